//! The DPDK Environment Abstraction Layer: initialised once per process, never re-initialised.
//!
//! `rte_eal_init` and `rte_eal_cleanup` themselves go through lace-forwarder's wrapper
//! ([`lace_forwarder::dpdk::Eal`]), so that the pipeline figures can create its mempools and
//! ports in the same process: DPDK allows one EAL per process, and each wrapper refuses to
//! create objects without its own proof that the EAL runs. [`Eal::forwarder`] hands out that
//! proof.

use std::fmt;
use std::sync::{Mutex, MutexGuard};

use super::error::DpdkError;
use super::sys;

/// How to start the EAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalOptions {
    /// Use hugepages (`--in-memory`; needs free hugepages, no hugetlbfs mount). When false the
    /// EAL runs on ordinary anonymous memory (`--no-huge -m <memory_mb>`), which works anywhere
    /// but puts every table on 4 KiB pages: more TLB misses, so lookups are slower than in
    /// production. Figures from both sides of a comparison use the same memory either way.
    pub hugepages: bool,
    /// Size of the DPDK heap in MiB when `hugepages` is false (`-m`). Pages are touched lazily,
    /// so a generous value costs nothing until tables use it.
    pub memory_mb: u32,
    /// The lcore (CPU) the EAL's main lcore runs on (`-l`). `rte_eal_init` pins the calling
    /// thread to it.
    pub lcore: u32,
    /// `--file-prefix`; `None` picks `lace-bench-<pid>`, unique per process.
    pub file_prefix: Option<String>,
    /// Worker lcores besides `lcore` (each on the CPU of the same number), for measurements
    /// that launch jobs on other cores ([`lace_forwarder::dpdk::Eal::launch`]). With any, the
    /// EAL gets `-l <lcore>,<workers…> --main-lcore <lcore>`; their EAL threads sleep until a
    /// job is launched.
    pub workers: Vec<u32>,
}

impl Default for EalOptions {
    fn default() -> Self {
        Self {
            hugepages: false,
            memory_mb: 2048,
            lcore: 0,
            file_prefix: None,
            workers: Vec::new(),
        }
    }
}

impl fmt::Display for EalOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.args().join(" "))
    }
}

impl EalOptions {
    /// The `argv` passed to `rte_eal_init`, program name first.
    pub fn args(&self) -> Vec<String> {
        let prefix = self
            .file_prefix
            .clone()
            .unwrap_or_else(|| format!("lace-bench-{}", std::process::id()));
        let mut args = vec!["lace-bench".to_owned()];
        if self.hugepages {
            args.push("--in-memory".to_owned());
        } else {
            // --no-shconf: no runtime files for a process nothing attaches to.
            args.extend(["--no-huge", "--no-shconf", "-m"].map(str::to_owned));
            args.push(self.memory_mb.to_string());
        }
        args.extend(
            [
                "--no-pci",
                "--no-telemetry",
                "--log-level=lib.eal:error",
                "-l",
            ]
            .map(str::to_owned),
        );
        let lcores: Vec<String> = std::iter::once(self.lcore)
            .chain(self.workers.iter().copied())
            .map(|l| l.to_string())
            .collect();
        args.push(lcores.join(","));
        if !self.workers.is_empty() {
            args.push("--main-lcore".to_owned());
            args.push(self.lcore.to_string());
        }
        args.push(format!("--file-prefix={prefix}"));
        args
    }
}

enum State {
    Uninit,
    Running {
        options: EalOptions,
        live_tables: usize,
    },
    CleanedUp,
}

static STATE: Mutex<State> = Mutex::new(State::Uninit);

fn state() -> MutexGuard<'static, State> {
    // A panic while holding the lock leaves the state consistent (every transition is one
    // assignment), so a poisoned lock is still usable.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Proof that the process's DPDK EAL is running. Cheap to copy; every table constructor takes
/// one, so no DPDK table can be created before `rte_eal_init` succeeded.
#[derive(Debug, Clone, Copy)]
pub struct Eal {
    _private: (),
}

impl Eal {
    /// Initialises the EAL, or returns the running one when it was started with the same
    /// options. DPDK supports one `rte_eal_init` per process: different options are an error, as
    /// is any call after [`Eal::cleanup`]. The calling thread becomes the main lcore and is
    /// pinned to `options.lcore`.
    pub fn init(options: &EalOptions) -> Result<Eal, DpdkError> {
        let mut st = state();
        match &*st {
            State::Running {
                options: existing, ..
            } => {
                return if existing == options {
                    Ok(Eal { _private: () })
                } else {
                    Err(DpdkError::EalAlreadyInitialized {
                        existing: existing.to_string(),
                        requested: options.to_string(),
                    })
                };
            }
            State::CleanedUp => return Err(DpdkError::EalCleanedUp),
            State::Uninit => {}
        }
        if options.hugepages && free_hugepages() == Some(0) {
            return Err(DpdkError::NoHugepages);
        }
        let args = options.args();
        // argv[0] is the program name; lace-forwarder's wrapper supplies its own.
        if let Err(e) = lace_forwarder::dpdk::Eal::init(&args[1..]) {
            return Err(match e {
                lace_forwarder::dpdk::Error::NoHugepages { .. } => DpdkError::NoHugepages,
                lace_forwarder::dpdk::Error::EalInit { errno, reason, .. } => DpdkError::EalInit {
                    args: args.join(" "),
                    errno,
                    reason,
                    fix: eal_fix(errno, options.hugepages),
                },
                other => DpdkError::EalInit {
                    args: args.join(" "),
                    errno: other.errno(),
                    reason: other.to_string(),
                    fix: "lace-forwarder's EAL wrapper refused: another part of this process \
                          started or cleaned up DPDK; start it through lace_benches::dpdk::Eal",
                },
            });
        }
        *st = State::Running {
            options: options.clone(),
            live_tables: 0,
        };
        Ok(Eal { _private: () })
    }

    /// lace-forwarder's proof that the EAL runs, for its mempools, ports and lcore launches;
    /// [`DpdkError::EalCleanedUp`] after [`Eal::cleanup`] (called through another copy).
    pub fn forwarder(&self) -> Result<lace_forwarder::dpdk::Eal, DpdkError> {
        lace_forwarder::dpdk::Eal::running().ok_or(DpdkError::EalCleanedUp)
    }

    /// The options the running EAL was started with.
    pub fn options(&self) -> EalOptions {
        match &*state() {
            State::Running { options, .. } => options.clone(),
            _ => EalOptions::default(),
        }
    }

    /// Calls `rte_eal_cleanup`, releasing DPDK's memory. Refused while any table created from
    /// this EAL is alive. Afterwards no DPDK table can be created in this process.
    pub fn cleanup(self) -> Result<(), DpdkError> {
        let mut st = state();
        match &*st {
            State::Running { live_tables: 0, .. } => {}
            State::Running { live_tables, .. } => {
                return Err(DpdkError::TablesAlive { live: *live_tables })
            }
            State::CleanedUp => return Ok(()),
            State::Uninit => unreachable!("an Eal value exists only after a successful init"),
        }
        // lace-forwarder's wrapper runs rte_eal_cleanup, after checking that none of its own
        // objects (mempools, ports) is alive; then no table can be created either.
        let fwd = lace_forwarder::dpdk::Eal::running().ok_or(DpdkError::EalCleanedUp)?;
        let runtime = fwd.runtime_dir();
        if let Err(e) = fwd.cleanup() {
            if let lace_forwarder::dpdk::Error::ObjectsAlive { live } = e {
                return Err(DpdkError::TablesAlive { live });
            }
            *st = State::CleanedUp;
            return Err(DpdkError::Create {
                call: "rte_eal_cleanup",
                name: String::new(),
                errno: e.errno(),
                reason: e.to_string(),
                fix: "nothing to do; the process should exit",
            });
        }
        *st = State::CleanedUp;
        // The file prefix is this process's own: its runtime directory goes with it.
        let _ = std::fs::remove_dir_all(&runtime);
        Ok(())
    }

    /// Bytes currently allocated from DPDK's heaps, summed over all NUMA sockets
    /// (`rte_malloc_socket_stats::heap_allocsz_bytes`). Includes malloc element headers and
    /// memzones (mempools are memzones), i.e. everything DPDK libraries allocate.
    pub fn heap_allocated_bytes(&self) -> usize {
        // SAFETY: the EAL is running (we hold an Eal); the call only reads EAL configuration.
        let sockets = unsafe { sys::rte_socket_count() };
        let mut total = 0;
        for idx in 0..sockets {
            // SAFETY: idx < rte_socket_count(), as the function requires.
            let socket = unsafe { sys::rte_socket_id_by_idx(idx) };
            if socket < 0 {
                continue;
            }
            let mut stats = sys::rte_malloc_socket_stats {
                heap_totalsz_bytes: 0,
                heap_freesz_bytes: 0,
                greatest_free_size: 0,
                free_count: 0,
                alloc_count: 0,
                heap_allocsz_bytes: 0,
            };
            // SAFETY: stats is a valid, writable rte_malloc_socket_stats; socket is a real socket
            // id; the function takes the heap lock internally.
            if unsafe { sys::rte_malloc_get_socket_stats(socket, &mut stats) } == 0 {
                total += stats.heap_allocsz_bytes;
            }
        }
        total
    }

    /// Registers a live table; the returned token unregisters it when dropped.
    pub(crate) fn register_table(&self) -> Result<LiveTable, DpdkError> {
        match &mut *state() {
            State::Running { live_tables, .. } => {
                *live_tables += 1;
                Ok(LiveTable { _private: () })
            }
            State::CleanedUp => Err(DpdkError::EalCleanedUp),
            State::Uninit => unreachable!("an Eal value exists only after a successful init"),
        }
    }
}

/// Held by every table wrapper; keeps [`Eal::cleanup`] from freeing memory under it. Declare it
/// as the last field so it drops after the table's own `Drop` freed the DPDK object.
#[derive(Debug)]
pub(crate) struct LiveTable {
    _private: (),
}

impl Drop for LiveTable {
    fn drop(&mut self) {
        if let State::Running { live_tables, .. } = &mut *state() {
            *live_tables = live_tables.saturating_sub(1);
        }
    }
}

/// `HugePages_Free` from /proc/meminfo (default page size), if readable.
fn free_hugepages() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
}

fn eal_fix(errno: i32, hugepages: bool) -> &'static str {
    match errno {
        libc::EACCES | libc::ENOMEM if hugepages => {
            "no usable hugepages — run without --huge (uses --no-huge) or reserve hugepages \
             (echo 1024 > /proc/sys/vm/nr_hugepages)"
        }
        libc::ENOMEM => "not enough memory for -m: lower EalOptions::memory_mb",
        libc::EALREADY => "rte_eal_init already ran in this process: call Eal::init once",
        libc::EACCES => "permission denied: run as root or grant CAP_SYS_ADMIN/CAP_IPC_LOCK",
        libc::EINVAL => "DPDK rejected an EAL argument: check lcore and memory options",
        _ => "see the EAL log lines above",
    }
}
