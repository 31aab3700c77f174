//! CPU affinity: the few system calls the publish-latency measurement needs to put its reader
//! thread on another core than the writer, and that the peer measurements need to give their
//! child processes (OVS-DPDK, dpdk-testpmd) back the CPUs the EAL took from this thread; and
//! the clock tick the Kubernetes figures read a daemon's CPU time in.
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

/// Makes `cmd`'s child start with `cpus` as its CPU mask instead of inheriting the spawning
/// thread's (after `rte_eal_init` that is the main lcore alone, and a DPDK child would then see
/// one CPU). An empty `cpus` leaves the mask as inherited.
pub fn child_on_cpus(cmd: &mut std::process::Command, cpus: &[usize]) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        if cpus.is_empty() {
            return Ok(());
        }
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in cpus {
            if cpu >= max {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cpu {cpu} is beyond CPU_SETSIZE ({max})"),
                ));
            }
            // SAFETY: `cpu` < CPU_SETSIZE (checked above), so CPU_SET writes inside the array.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        let hook = move || {
            // SAFETY: pid 0 is the calling (child) process's thread; `set` is a valid cpu_set_t
            // of the size passed, only read. sched_setaffinity is a plain system call:
            // async-signal-safe, no allocation, as a pre_exec hook must be.
            let rc =
                unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: the hook runs in the forked child before exec; it only makes one
        // async-signal-safe system call on memory it owns (see above).
        unsafe { cmd.pre_exec(hook) };
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (cmd, cpus);
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

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, the unit of `/proc/<pid>/stat`'s CPU times).
pub fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions and only returns a value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// CPU time process `pid` used so far (user and system), in seconds (`/proc/<pid>/stat`).
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU time this process's live threads used so far, in seconds, summed by thread name
/// (`/proc/self/task/*/comm`, at most 15 bytes).
pub fn thread_cpu_seconds() -> io::Result<std::collections::BTreeMap<String, f64>> {
    let mut out = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let dir = task?.path();
        // A thread that ended since the listing has no files left: it is not counted.
        let (Ok(comm), Ok(cpu)) = (
            std::fs::read_to_string(dir.join("comm")),
            stat_cpu_seconds(&dir.join("stat").to_string_lossy()),
        ) else {
            continue;
        };
        *out.entry(comm.trim().to_owned()).or_insert(0.0) += cpu;
    }
    Ok(out)
}

/// utime + stime of a procfs `stat` file, in seconds.
fn stat_cpu_seconds(path: &str) -> io::Result<f64> {
    let stat = std::fs::read_to_string(path)?;
    // After the command (which may hold spaces and parentheses): state is field 3, utime and
    // stime are fields 14 and 15.
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("unreadable {path}"));
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(bad)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or_else(bad);
    Ok((field(11)? + field(12)?) as f64 / clock_ticks_per_s() as f64)
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

    #[test]
    fn child_starts_on_the_cpus_given() {
        let cpus = allowed_cpus().expect("sched_getaffinity works");
        let first = cpus[0];
        let mut cmd = std::process::Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        child_on_cpus(&mut cmd, &[first]).unwrap();
        let out = cmd.output().expect("grep runs");
        let line = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            line.split_whitespace().nth(1),
            Some(first.to_string().as_str()),
            "{line}"
        );
        assert!(child_on_cpus(&mut std::process::Command::new("true"), &[1 << 20]).is_err());
    }
}
