//! Giving the heap control freed back to the system (the one FFI call of the daemon).
//!
//! glibc's allocator keeps what a process frees for its next allocations: pages freed in the
//! middle of the main arena stay resident until `malloc_trim`. Control's bursts (a resync, a
//! hundred ADDs compiled network by network) free most of what they allocate, and measured
//! with 100 networks served (`k8s.control.rss_mib`) the main arena held 132 MB of which 18 MB
//! was in use. The event loop therefore trims once it goes idle after work ([`IdleTrim`]).

/// When to trim: once per idle period that follows work, never twice in a row without work
/// in between (a trim walks every free chunk of every arena).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IdleTrim {
    worked: bool,
}

impl IdleTrim {
    /// The loop woke up for an event (`true`) or because its wait timed out (`false`); true
    /// when it should trim now.
    pub fn woke(&mut self, for_event: bool) -> bool {
        if for_event {
            self.worked = true;
            false
        } else {
            std::mem::take(&mut self.worked)
        }
    }
}

/// Returns the free pages of every malloc arena to the system.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own state, under
    // the allocator's locks: it may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_per_idle_period_after_work() {
        let mut t = IdleTrim::default();
        // Idle from the start: nothing to give back.
        assert!(!t.woke(false));
        // A burst of events, then the wait times out: one trim.
        assert!(!t.woke(true));
        assert!(!t.woke(true));
        assert!(t.woke(false));
        // Still idle: no second trim.
        assert!(!t.woke(false));
        assert!(!t.woke(true));
        assert!(t.woke(false));
    }
}
