//! The DPDK Environment Abstraction Layer: started once per process, never restarted.

use std::ffi::{c_char, c_int, c_void, CString};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use lace_dpdk_sys as sys;

use super::error::{rte_errno, strerror, Error, Result};

/// The program name passed to `rte_eal_init` as `argv[0]`.
const PROGRAM: &str = "lace-forwarder";

enum State {
    Uninit,
    Running { args: Vec<String> },
    CleanedUp,
}

static STATE: Mutex<State> = Mutex::new(State::Uninit);

/// DPDK objects (ports, queues, mempools, rings) alive; `Eal::cleanup` waits for zero.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn state() -> MutexGuard<'static, State> {
    // Every transition is a single assignment, so a poisoned lock still guards a valid state.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Proof that this process's EAL is running. Every DPDK object is created from one, so none can
/// exist before `rte_eal_init` succeeded. Cheap to copy and to send between threads.
#[derive(Debug, Clone, Copy)]
pub struct Eal {
    _private: (),
}

impl Eal {
    /// Starts the EAL with `args` (the EAL's own command line, without a program name, e.g.
    /// `["--in-memory", "-l", "0-3", "--no-pci"]`). The calling thread becomes the main lcore
    /// and is pinned to its CPU.
    ///
    /// DPDK allows one `rte_eal_init` per process: a second call returns
    /// [`Error::EalAlreadyInitialized`] (use [`Eal::running`] to get the handle instead). When the
    /// arguments use hugepages (no `--no-huge`) and the kernel has none free, the EAL is not
    /// attempted and [`Error::NoHugepages`] says how to reserve some or run without.
    pub fn init<I, S>(args: I) -> Result<Eal>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let args: Vec<String> = args.into_iter().map(|s| s.as_ref().to_owned()).collect();
        let mut st = state();
        match &*st {
            State::Running { args } => {
                return Err(Error::EalAlreadyInitialized {
                    args: args.join(" "),
                })
            }
            State::CleanedUp => return Err(Error::EalCleanedUp),
            State::Uninit => {}
        }
        let has = |flag: &str| args.iter().any(|a| a == flag);
        let wants_hugepages = !has("--no-huge");
        if !wants_hugepages && has("--in-memory") {
            // DPDK's own message blames --legacy-mem, which --no-huge implies.
            return Err(Error::InvalidArgument {
                what: "EAL arguments",
                value: args.join(" "),
                why: "--in-memory needs hugepages; with --no-huge use --no-shconf instead"
                    .to_owned(),
            });
        }
        if wants_hugepages && free_hugepages() == Some(0) {
            return Err(Error::NoHugepages {
                args: args.join(" "),
            });
        }
        let mut cstrings = Vec::with_capacity(args.len() + 1);
        for a in std::iter::once(PROGRAM).chain(args.iter().map(String::as_str)) {
            cstrings.push(CString::new(a).map_err(|_| Error::InvalidArgument {
                what: "EAL argument",
                value: a.to_owned(),
                why: "it contains a NUL byte".to_owned(),
            })?);
        }
        let argc = c_int::try_from(cstrings.len()).map_err(|_| Error::InvalidArgument {
            what: "EAL arguments",
            value: args.join(" "),
            why: "too many arguments".to_owned(),
        })?;
        // rte_eal_init keeps pointers into argv (and getopt permutes the array), so the strings
        // and the pointer array live for the rest of the process.
        let cstrings: &'static [CString] = Box::leak(cstrings.into_boxed_slice());
        let argv: Vec<*mut c_char> = cstrings
            .iter()
            .map(|c| c.as_ptr().cast_mut())
            .chain([std::ptr::null_mut()])
            .collect();
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        // SAFETY: argv holds argc NUL-terminated strings and a final NULL, all leaked so they
        // outlive the EAL; the STATE lock serialises this with every other init and cleanup, and
        // the state is Uninit, so this process has not initialised DPDK (a failed earlier attempt
        // is reported by DPDK itself as EALREADY).
        let ret = unsafe { sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            return Err(Error::EalInit {
                args: args.join(" "),
                errno,
                reason: strerror(errno),
                fix: eal_fix(errno, wants_hugepages),
            });
        }
        *st = State::Running { args };
        Ok(Eal { _private: () })
    }

    /// The running EAL, if [`Eal::init`] succeeded and [`Eal::cleanup`] has not run.
    pub fn running() -> Option<Eal> {
        match &*state() {
            State::Running { .. } => Some(Eal { _private: () }),
            _ => None,
        }
    }

    /// The EAL's runtime directory (`/var/run/dpdk/<file-prefix>` for root): its shared
    /// configuration files, which `rte_eal_cleanup` leaves. A process that owns its file prefix
    /// removes it after [`Eal::cleanup`].
    pub fn runtime_dir(&self) -> std::path::PathBuf {
        // SAFETY: the EAL is running (an `Eal` exists); the function returns a pointer to its
        // static, NUL-terminated runtime directory path.
        let p = unsafe { sys::rte_eal_get_runtime_dir() };
        if p.is_null() {
            return std::path::PathBuf::new();
        }
        // SAFETY: non-null: the EAL's NUL-terminated path, alive until the process exits.
        let s = unsafe { std::ffi::CStr::from_ptr(p) };
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes()))
    }

    /// The arguments the EAL was started with.
    pub fn args(&self) -> Vec<String> {
        match &*state() {
            State::Running { args } => args.clone(),
            _ => Vec::new(),
        }
    }

    /// Calls `rte_eal_cleanup`, releasing DPDK's memory. Refused with [`Error::ObjectsAlive`]
    /// while any port, queue, mempool or ring exists. Afterwards no DPDK object can be created
    /// in this process.
    pub fn cleanup(self) -> Result<()> {
        let mut st = state();
        if !matches!(&*st, State::Running { .. }) {
            return Ok(());
        }
        super::mempool::free_orphans();
        let live = LIVE.load(Ordering::Acquire);
        if live > 0 {
            return Err(Error::ObjectsAlive { live });
        }
        // SAFETY: the EAL is running and no wrapper holds DPDK memory (LIVE is 0; objects are
        // only created while the state is Running, under this lock's protection in
        // `Live::new`); the state moves to CleanedUp so none can be created afterwards.
        let ret = unsafe { sys::rte_eal_cleanup() };
        *st = State::CleanedUp;
        if ret < 0 {
            let errno = rte_errno();
            return Err(Error::EalInit {
                args: String::new(),
                errno,
                reason: strerror(errno),
                fix: "rte_eal_cleanup failed; nothing to do but exit",
            });
        }
        Ok(())
    }

    /// The lcore `rte_eal_init` made the calling thread (`--main-lcore`, else the first of `-l`).
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: reads the EAL configuration, which is immutable once the EAL runs.
        unsafe { sys::rte_get_main_lcore() }
    }

    /// The number of enabled lcores, the main one included.
    pub fn lcore_count(&self) -> u32 {
        // SAFETY: as in main_lcore.
        unsafe { sys::rte_lcore_count() }
    }

    /// The enabled lcores other than the main one, in ascending order.
    pub fn worker_lcores(&self) -> Vec<u32> {
        let mut lcores = Vec::new();
        let mut i = u32::MAX; // rte_get_next_lcore(-1, ...) starts at lcore 0
        loop {
            // SAFETY: as in main_lcore; skip_main = 1, wrap = 0 ends at RTE_MAX_LCORE.
            i = unsafe { sys::rte_get_next_lcore(i, 1, 0) };
            if i >= sys::RTE_MAX_LCORE {
                return lcores;
            }
            lcores.push(i);
        }
    }

    /// The NUMA socket of `lcore`.
    pub fn lcore_socket(&self, lcore: u32) -> u32 {
        // DPDK indexes an array with the id without checking it.
        if lcore >= sys::RTE_MAX_LCORE {
            return 0;
        }
        // SAFETY: reads the EAL configuration; lcore < RTE_MAX_LCORE, the array's length.
        unsafe { sys::rte_lcore_to_socket_id(lcore) }
    }

    /// TSC ticks per second, as measured by the EAL at start.
    pub fn tsc_hz(&self) -> u64 {
        // SAFETY: reads a value the EAL computed during init.
        unsafe { sys::rte_get_tsc_hz() }
    }

    /// Runs `job` on the worker `lcore` (`rte_eal_remote_launch`); [`Worker::join`] waits for
    /// it and returns its value. Must be called from the main lcore's thread, and the lcore must
    /// be idle (not running an earlier job).
    ///
    /// A panic in `job` is caught on the worker; `join` then returns [`WORKER_PANICKED`].
    pub fn launch<F>(&self, lcore: u32, job: F) -> Result<Worker>
    where
        F: FnOnce() -> i32 + Send + 'static,
    {
        let launch_error = |errno: i32, fix: &'static str| Error::Launch {
            lcore,
            errno,
            reason: strerror(errno),
            fix,
        };
        if lcore_id() != Some(self.main_lcore()) {
            return Err(launch_error(
                libc::EPERM,
                "launch from the main lcore's thread (the one that called Eal::init)",
            ));
        }
        if !self.worker_lcores().contains(&lcore) {
            return Err(launch_error(
                libc::EINVAL,
                "pick one of Eal::worker_lcores() (enable more lcores with -l/--lcores)",
            ));
        }
        let job: Box<Job> = Box::new(Box::new(job));
        let arg = Box::into_raw(job).cast::<c_void>();
        // SAFETY: run_job matches lcore_function_t and takes ownership of `arg`, a leaked
        // Box<Job> that outlives the call; lcore is an enabled worker and this is the main
        // lcore's thread, as rte_eal_remote_launch requires.
        let ret = unsafe { sys::rte_eal_remote_launch(Some(run_job), arg, lcore) };
        if ret < 0 {
            // SAFETY: the launch failed, so the worker never received `arg`; reclaim it.
            drop(unsafe { Box::from_raw(arg.cast::<Job>()) });
            return Err(launch_error(
                -ret,
                "the lcore is still running an earlier job: join its Worker first",
            ));
        }
        Ok(Worker {
            lcore,
            _main_thread_only: PhantomData,
        })
    }
}

type Job = Box<dyn FnOnce() -> i32 + Send + 'static>;

/// What [`Worker::join`] returns when the job panicked.
pub const WORKER_PANICKED: i32 = i32::MIN;

unsafe extern "C" fn run_job(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the Box<Job> leaked by Eal::launch, handed to exactly this call.
    let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    // Unwinding out of an extern "C" function aborts; report the panic as a value instead.
    catch_unwind(AssertUnwindSafe(move || (*job)())).unwrap_or(WORKER_PANICKED)
}

/// A job running on a worker lcore. Join it from the main lcore's thread (hence not `Send`).
/// Dropping it without joining leaves the job running; the lcore stays busy until it returns.
#[derive(Debug)]
#[must_use = "join the worker to learn its result and free the lcore for another launch"]
pub struct Worker {
    lcore: u32,
    _main_thread_only: PhantomData<*const ()>,
}

impl Worker {
    /// The lcore the job runs on.
    pub fn lcore(&self) -> u32 {
        self.lcore
    }

    /// Waits for the job to return (`rte_eal_wait_lcore`) and returns its value.
    pub fn join(self) -> i32 {
        // SAFETY: Worker is not Send, so this runs on the main lcore's thread that launched the
        // job, as rte_eal_wait_lcore requires; lcore is a valid worker id.
        unsafe { sys::rte_eal_wait_lcore(self.lcore) }
    }
}

/// The calling thread's lcore id, or `None` on a thread the EAL did not create or register.
#[inline]
pub fn lcore_id() -> Option<u32> {
    // SAFETY: reads a thread-local variable; no preconditions.
    let id = unsafe { sys::lace_rte_lcore_id() };
    (id != sys::LCORE_ID_ANY).then_some(id)
}

/// The calling thread's NUMA socket, or `None` on a thread unknown to the EAL.
pub fn socket_id() -> Option<u32> {
    // SAFETY: reads a thread-local variable; no preconditions.
    let id = unsafe { sys::rte_socket_id() };
    // SOCKET_ID_ANY (-1) as the unsigned value rte_socket_id returns.
    (id != sys::SOCKET_ID_ANY as u32).then_some(id)
}

/// The CPU's time-stamp counter (`rte_rdtsc`). Use [`Eal::tsc_hz`] to convert.
#[inline]
pub fn tsc() -> u64 {
    // SAFETY: reads the TSC; no preconditions.
    unsafe { sys::lace_rte_rdtsc() }
}

/// Held by every DPDK object wrapper; keeps [`Eal::cleanup`] from freeing memory under it.
/// Declare it as the wrapper's last field, so it is dropped after the object was freed.
#[derive(Debug)]
pub(crate) struct Live {
    _private: (),
}

impl Live {
    /// Registers an object. Fails when the EAL was cleaned up.
    pub(crate) fn new(_eal: &Eal) -> Result<Live> {
        let st = state();
        match &*st {
            State::Running { .. } => {
                LIVE.fetch_add(1, Ordering::AcqRel);
                Ok(Live { _private: () })
            }
            State::CleanedUp => Err(Error::EalCleanedUp),
            // An Eal value exists only after a successful init; report it as cleaned up rather
            // than panic.
            State::Uninit => Err(Error::EalCleanedUp),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Free hugepages of every size (`/sys/kernel/mm/hugepages/*/free_hugepages`), if readable.
fn free_hugepages() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/kernel/mm/hugepages").ok()?;
    let mut total = 0;
    for entry in dir.flatten() {
        let free = std::fs::read_to_string(entry.path().join("free_hugepages")).ok()?;
        total += free.trim().parse::<u64>().ok()?;
    }
    Some(total)
}

fn eal_fix(errno: i32, hugepages: bool) -> &'static str {
    match errno {
        libc::EACCES | libc::ENOMEM if hugepages => {
            "no usable hugepages: reserve some with the node's hugepages tool (hugepages/) or \
             `echo 1024 > /proc/sys/vm/nr_hugepages` and use --in-memory, or add --no-huge"
        }
        libc::ENOMEM => "not enough memory: lower -m or free memory",
        libc::EALREADY => {
            "rte_eal_init already ran (or failed past the point of retrying) in this process: \
             restart the process"
        }
        libc::EACCES => "permission denied: run as root or grant CAP_SYS_ADMIN and CAP_IPC_LOCK",
        libc::EINVAL => "DPDK rejected an EAL argument: the EAL log line above names it",
        libc::ENOTSUP => "the EAL lacks a feature these arguments need (see the log above)",
        libc::EPROTO => "the EAL could not initialise a bus or device: see the log above",
        _ => "see the EAL log lines above",
    }
}
