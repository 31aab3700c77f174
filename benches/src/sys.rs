//! CPU affinity: the few system calls the publish-latency measurement needs to put its reader
//! thread on another core than the writer.
//!
//! With [`crate::dpdk`], this is the crate's only module holding `unsafe`; every block states
//! why it is sound. Linux only (`sched_getaffinity`/`sched_setaffinity`); elsewhere both calls
//! report `Unsupported`.

use std::io;

/// The CPUs the calling thread may run on, ascending.
///
/// Call it before `rte_eal_init` to learn the process's CPUs: the EAL pins the main thread to
/// its lcore, and threads spawned afterwards inherit that one-CPU mask.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; `set` is a writable cpu_set_t of the size passed.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: CPU_ISSET only reads the bit array; every index is below CPU_SETSIZE.
        Ok((0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "CPU affinity is only implemented for Linux",
        ))
    }
}

/// Pins the calling thread to `cpu` alone.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        if cpu >= max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cpu {cpu} is beyond CPU_SETSIZE ({max})"),
            ));
        }
        // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` < CPU_SETSIZE (checked above), so CPU_SET writes inside the array.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed and
        // is only read.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "CPU affinity is only implemented for Linux",
        ))
    }
}

/// The CPU the calling thread is running on right now, if the system says.
pub fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no arguments and only returns a number (or -1).
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_to_an_allowed_cpu_and_back() {
        let cpus = allowed_cpus().expect("sched_getaffinity works");
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(last).expect("pinning to an allowed CPU works");
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
            assert_eq!(current_cpu(), Some(last));
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(1 << 20).is_err());
    }
}
