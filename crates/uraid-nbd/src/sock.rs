//! A connected socket whose reads and writes are bounded in time
//! ([`Sock`]), and what a non-blocking read got ([`Recv`]): the byte
//! stream under both kinds of NBD connection ([`crate::wire`]: plain or
//! rustls; [`crate::psk`]: OpenSSL with pre-shared keys), below both.
//!
//! Every byte goes through [`Sock`], which never lets a client stop the
//! server: sends use `MSG_NOSIGNAL` (a peer that hung up gives EPIPE, not
//! SIGPIPE), and a read or write that would block waits with poll(2) in
//! steps of 100 ms, so it ends when the handshake deadline passes, when
//! nothing moved for the stall limit (a client that stopped reading its
//! replies), or shortly after the server is told to stop.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one poll(2) waits before the limits are looked at again.
const STEP: Duration = Duration::from_millis(100);

/// What a non-blocking read got.
pub enum Recv {
    /// This many bytes.
    Got(usize),
    /// Nothing now; poll the socket.
    Again,
    /// The peer closed, or the stream failed.
    Closed,
}

/// A connected socket whose blocking reads and writes are bounded in time.
///
/// Limits, each ending the call with an `io::Error` that names it (kind
/// `TimedOut`):
/// - `deadline`: an instant no call may go past (the handshake's);
/// - `stall`: the longest a call may wait without moving a byte;
/// - the server's stop flag: once set, a call may wait `grace` more (then
///   kind `ConnectionAborted`: not `Interrupted`, which `read_exact` and
///   `write_all` would retry for ever).
#[derive(Debug)]
pub struct Sock {
    fd: OwnedFd,
    deadline: Option<Instant>,
    stall: Duration,
    stop: Arc<AtomicBool>,
    grace: Duration,
    stop_seen: Option<Instant>,
    /// Reads return `WouldBlock` instead of waiting (TLS-PSK's
    /// non-blocking reads through OpenSSL, see [`crate::psk`]).
    read_nowait: bool,
}

impl Sock {
    /// Wraps connected socket `fd`, which is made non-blocking. `stall` is
    /// the longest a blocking call waits without progress; `stop` the
    /// server's stop flag.
    ///
    /// Errors: fcntl(2) failed.
    pub fn new(fd: OwnedFd, stall: Duration, stop: Arc<AtomicBool>) -> io::Result<Sock> {
        let raw = fd.as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(raw, libc::F_GETFL);
            if fl < 0 || libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Sock { fd, deadline: None, stall, stop, grace: Duration::ZERO, stop_seen: None, read_nowait: false })
    }

    /// No call goes past `deadline` (None: no deadline).
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Once the stop flag is set, calls may still wait this long (zero:
    /// they end at once).
    pub fn set_stop_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// The longest a blocking call waits without moving a byte.
    pub fn set_stall(&mut self, stall: Duration) {
        self.stall = stall;
    }

    /// With `true`, a read that finds nothing returns `WouldBlock` at once
    /// instead of waiting; writes still wait.
    pub fn set_read_nowait(&mut self, nowait: bool) {
        self.read_nowait = nowait;
    }

    /// Waits until the socket is ready for `events` (POLLIN or POLLOUT), or
    /// a limit ends the wait. `since` is when the call last moved a byte.
    fn wait(&mut self, events: i16, since: Instant) -> io::Result<()> {
        loop {
            let now = Instant::now();
            if self.stop.load(Ordering::Relaxed) {
                let seen = *self.stop_seen.get_or_insert(now);
                if now >= seen + self.grace {
                    return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the server is stopping"));
                }
            }
            if self.deadline.is_some_and(|d| now >= d) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not finish the handshake in time"));
            }
            if now >= since + self.stall {
                let what = if events == libc::POLLOUT { "read its replies" } else { "send anything" };
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client did not {what} for {} s", self.stall.as_secs_f64()),
                ));
            }
            let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events, revents: 0 };
            // SAFETY: one valid pollfd, count 1.
            let r = unsafe { libc::poll(&mut pfd, 1, STEP.as_millis() as i32) };
            if r > 0 {
                return Ok(());
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    /// One sendmsg(2) of `parts` without blocking and without SIGPIPE:
    /// bytes sent, or the errno (EAGAIN included).
    fn sendmsg(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: a zeroed msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is ABI-compatible with struct iovec; sendmsg only reads it.
        msg.msg_iov = parts.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = parts.len().min(1024) as _;
        // SAFETY: msg points at parts.len() (at most 1024, IOV_MAX) valid
        // iovecs that stay borrowed for the call.
        let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let since = Instant::now();
        loop {
            match recv_fd(self.fd.as_raw_fd(), buf) {
                Recv::Got(n) => return Ok(n),
                Recv::Closed => return Ok(0),
                Recv::Again if self.read_nowait => return Err(io::ErrorKind::WouldBlock.into()),
                Recv::Again => self.wait(libc::POLLIN, since)?,
            }
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let since = Instant::now();
        loop {
            match self.sendmsg(bufs) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(libc::POLLOUT, since)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One recv(2) without waiting on `fd` into `buf`.
pub(crate) fn recv_fd(fd: RawFd, buf: &mut [u8]) -> Recv {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n > 0 {
        Recv::Got(n as usize)
    } else if n == 0 {
        Recv::Closed
    } else {
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Recv::Again,
            _ => Recv::Closed,
        }
    }
}

/// The credentials (process, user and group ids) of the peer of the unix
/// socket `fd` as the kernel recorded them when it connected or listened
/// (SO_PEERCRED); `None` when the kernel cannot tell them (not a unix
/// socket).
pub fn peer_cred(fd: RawFd) -> Option<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred is writable for len bytes, the size SO_PEERCRED fills.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    (r == 0).then_some(cred)
}

/// Who is at the other end of connected socket `fd`, for the server's
/// log: `ADDR:PORT` over TCP, `pid P uid U` over a unix socket, `?` when
/// the kernel does not say.
pub fn peer_name(fd: RawFd) -> String {
    // SAFETY: a zeroed sockaddr_storage is a valid buffer for any address.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: sa is writable for len bytes; len is updated by the call.
    if unsafe { libc::getpeername(fd, (&mut sa as *mut libc::sockaddr_storage).cast(), &mut len) } != 0 {
        return "?".into();
    }
    match sa.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: libc::sockaddr_in = unsafe { std::ptr::read((&sa as *const libc::sockaddr_storage).cast()) };
            std::net::SocketAddrV4::new(u32::from_be(a.sin_addr.s_addr).into(), u16::from_be(a.sin_port)).to_string()
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { std::ptr::read((&sa as *const libc::sockaddr_storage).cast()) };
            std::net::SocketAddrV6::new(a.sin6_addr.s6_addr.into(), u16::from_be(a.sin6_port), 0, 0).to_string()
        }
        _ => match peer_cred(fd) {
            Some(c) => format!("pid {} uid {}", c.pid, c.uid),
            None => "?".into(),
        },
    }
}
