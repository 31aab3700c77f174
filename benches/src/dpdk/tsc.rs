//! The CPU's time-stamp counter. It lives here because `crate::dpdk` is the crate's one module
//! allowed to hold `unsafe` (the intrinsics are `unsafe fn`); [`crate::report`] re-exports it.

/// Reads the time-stamp counter, fenced with `lfence` on both sides so earlier instructions
/// have completed before the read and later ones do not start before it. On targets without a
/// TSC it returns nanoseconds since the first call instead (and [`crate::report::tsc_hz`]
/// calibrates to ~1 GHz accordingly).
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: lfence needs SSE2, which every x86_64 CPU has; it only orders instructions.
        unsafe { _mm_lfence() };
        // SAFETY: rdtsc reads a counter register and has no memory effects.
        let t = unsafe { _rdtsc() };
        // SAFETY: lfence again; SSE2 is part of the x86_64 baseline.
        unsafe { _mm_lfence() };
        t
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}
