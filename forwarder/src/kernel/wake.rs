//! What a worker sleeps on: an epoll set of its ports' sockets plus an eventfd the main thread
//! writes when it posts commands.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An eventfd: [`EventFd::notify`] makes it readable until [`EventFd::clear`].
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new, non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the eventfd readable (wakes a waiter).
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our fd; a full counter (EAGAIN) still
        // leaves it readable, which is all a notification needs.
        unsafe { libc::write(self.0.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Consumes pending notifications.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN (nothing pending) is fine.
        unsafe { libc::read(self.0.as_raw_fd(), (&raw mut v).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An epoll set; each registered fd carries a `u64` token.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// Most events one [`Epoll::wait`] returns.
    pub const MAX_EVENTS: usize = 256;

    /// A new epoll set.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: fd is a fresh descriptor owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; Self::MAX_EVENTS],
        })
    }

    /// Watches `fd` for input (level-triggered), reporting `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: ev is a valid epoll_event the kernel copies; fd is the caller's open fd.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd` (closing it does too).
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: a NULL event is allowed for EPOLL_CTL_DEL; errors (fd already closed) are
        // harmless.
        unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits up to `timeout` (`None`: until an fd is ready; zero: just looks) and returns the
    /// tokens of the ready fds. Nanosecond timeouts (`epoll_pwait2`).
    pub fn wait(&mut self, timeout: Option<Duration>) -> &[libc::epoll_event] {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: events has MAX_EVENTS writable entries; tsp is NULL or points to a live
        // timespec; no signal mask (NULL). The kernel writes at most MAX_EVENTS entries.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                Self::MAX_EVENTS as libc::c_int,
                tsp,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        let n = usize::try_from(n).unwrap_or(0).min(Self::MAX_EVENTS);
        &self.events[..n]
    }
}
