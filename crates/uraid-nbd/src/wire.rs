//! The byte stream of one NBD connection: plain, or TLS after the client's
//! NBD_OPT_STARTTLS (rustls, TLS 1.2 and 1.3, with certificates; or
//! OpenSSL with pre-shared keys, see [`crate::psk`]).
//!
//! Every byte goes through [`Sock`], which never lets a client stop the
//! server: sends use `MSG_NOSIGNAL` (a peer that hung up gives EPIPE, not
//! SIGPIPE), and a read or write that would block waits with poll(2) in
//! steps of 100 ms, so it ends when the handshake deadline passes, when
//! nothing moved for the stall limit (a client that stopped reading its
//! replies), or shortly after the server is told to stop.
//!
//! The handshake reads and writes through [`Sock`]'s blocking `Read` and
//! `Write`; the transmission phase reads without blocking
//! ([`Wire::recv_nb`]) so that one thread can wait on the socket and the
//! drives together, and sends replies with [`Wire::send_all`].

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

/// A connection's stream.
pub enum Wire {
    /// Clear text.
    Plain(Sock),
    /// TLS; `pending` holds received ciphertext not yet given to rustls.
    Tls { tls: Box<rustls::StreamOwned<rustls::ServerConnection, Sock>>, pending: Vec<u8> },
    /// TLS-PSK (OpenSSL; see [`crate::psk`]).
    Psk(Box<openssl::ssl::SslStream<Sock>>),
    /// Transient state while upgrading.
    Gone,
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
        _ => {
            let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
            let mut clen = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
            // SAFETY: cred is writable for clen bytes, the size SO_PEERCRED fills.
            let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut clen) };
            if r == 0 {
                format!("pid {} uid {}", cred.pid, cred.uid)
            } else {
                "?".into()
            }
        }
    }
}

fn recv_fd(fd: RawFd, buf: &mut [u8]) -> Recv {
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

impl Wire {
    /// The socket's descriptor (to poll it).
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Wire::Plain(s) => s.as_raw_fd(),
            Wire::Tls { tls, .. } => tls.sock.as_raw_fd(),
            Wire::Psk(s) => s.get_ref().as_raw_fd(),
            Wire::Gone => -1,
        }
    }

    /// The socket under the stream (to change its limits).
    pub fn sock_mut(&mut self) -> Option<&mut Sock> {
        match self {
            Wire::Plain(s) => Some(s),
            Wire::Tls { tls, .. } => Some(&mut tls.sock),
            Wire::Psk(s) => Some(s.get_mut()),
            Wire::Gone => None,
        }
    }

    /// True once TLS is up.
    pub fn is_tls(&self) -> bool {
        matches!(self, Wire::Tls { .. } | Wire::Psk(_))
    }

    /// Upgrades to TLS-PSK with `config` and completes the TLS handshake
    /// (blocking, within the socket's limits). Errors: the handshake
    /// failed (an unknown user or a wrong key, a peer that went away, a
    /// limit); the connection is then gone.
    pub fn start_psk(&mut self, config: &crate::psk::PskConfig) -> io::Result<()> {
        let Wire::Plain(sock) = std::mem::replace(self, Wire::Gone) else {
            return Err(io::Error::other("TLS is already up"));
        };
        *self = Wire::Psk(Box::new(crate::psk::accept(config, sock)?));
        Ok(())
    }

    /// Sends TLS's close_notify when TLS is up (best effort, before the
    /// socket is shut down).
    pub fn close_notify(&mut self) {
        match self {
            Wire::Tls { tls, .. } => {
                tls.conn.send_close_notify();
                let rustls::StreamOwned { conn, sock } = &mut **tls;
                let _ = conn.write_tls(sock);
            }
            Wire::Psk(s) => crate::psk::close_notify(s),
            Wire::Plain(_) | Wire::Gone => {}
        }
    }

    /// Upgrades to TLS with `config` and completes the TLS handshake
    /// (blocking, within the socket's limits). Errors: the handshake
    /// failed (a client certificate refused, a peer that went away, a
    /// limit); the connection is then gone.
    pub fn start_tls(&mut self, config: Arc<rustls::ServerConfig>) -> io::Result<()> {
        let Wire::Plain(sock) = std::mem::replace(self, Wire::Gone) else {
            return Err(io::Error::other("TLS is already up"));
        };
        let mut conn = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        // Read replies can be 32 MiB: let rustls buffer them whole.
        conn.set_buffer_limit(None);
        let mut tls = Box::new(rustls::StreamOwned::new(conn, sock));
        while tls.conn.is_handshaking() {
            let rustls::StreamOwned { conn, sock } = &mut *tls;
            if let Err(e) = conn.complete_io(sock) {
                // Tell the client why (a refused certificate, say), then go.
                let _ = conn.write_tls(sock);
                return Err(e);
            }
        }
        *self = Wire::Tls { tls, pending: Vec::new() };
        Ok(())
    }

    /// Reads what is there without blocking.
    pub fn recv_nb(&mut self, buf: &mut [u8]) -> Recv {
        match self {
            Wire::Plain(s) => recv_fd(s.as_raw_fd(), buf),
            Wire::Psk(s) => crate::psk::recv_nb(s, buf),
            Wire::Gone => Recv::Closed,
            Wire::Tls { tls, pending } => loop {
                match tls.conn.reader().read(buf) {
                    Ok(0) => return Recv::Closed,
                    Ok(n) => return Recv::Got(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return Recv::Closed,
                }
                if pending.is_empty() {
                    let mut tmp = [0u8; 16 << 10];
                    match recv_fd(tls.sock.as_raw_fd(), &mut tmp) {
                        Recv::Got(n) => pending.extend_from_slice(&tmp[..n]),
                        other => return other,
                    }
                }
                let mut rd: &[u8] = pending;
                let r = tls.conn.read_tls(&mut rd);
                let used = pending.len() - rd.len();
                pending.drain(..used);
                if r.is_err() && used == 0 {
                    return Recv::Closed;
                }
                if tls.conn.process_new_packets().is_err() {
                    return Recv::Closed;
                }
            },
        }
    }

    /// Writes every byte of `parts`, blocking within the socket's limits.
    /// Errors: the peer went away, or a limit ended the wait.
    pub fn send_all(&mut self, parts: &mut [IoSlice<'_>]) -> io::Result<()> {
        match self {
            Wire::Plain(s) => {
                let mut bufs = parts;
                while !bufs.is_empty() {
                    match s.write_vectored(bufs) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            Wire::Tls { tls, .. } => {
                for p in parts.iter() {
                    tls.conn.writer().write_all(p)?;
                }
                while tls.conn.wants_write() {
                    let rustls::StreamOwned { conn, sock } = &mut **tls;
                    conn.write_tls(sock)?;
                }
                Ok(())
            }
            Wire::Psk(s) => crate::psk::send_all(s, parts),
            Wire::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls { tls, .. } => tls.read(buf),
            Wire::Psk(s) => s.read(buf),
            Wire::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.write(buf),
            Wire::Tls { tls, .. } => {
                let n = tls.write(buf)?;
                tls.flush()?;
                Ok(n)
            }
            Wire::Psk(s) => s.write(buf),
            Wire::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Wire::Plain(s) => s.flush(),
            Wire::Tls { tls, .. } => tls.flush(),
            Wire::Psk(s) => s.flush(),
            Wire::Gone => Ok(()),
        }
    }
}

/// Loads a certificate chain and private key (PEM files) into a rustls
/// server configuration. With `client_ca` (a PEM file of one or more CA
/// certificates) every client must present a certificate signed by one of
/// them (nbdkit's `--tls-verify-peer`); without it any client may connect.
///
/// Errors name the file and what was wrong.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
    client_ca: Option<&std::path::Path>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read_certs = |path: &std::path::Path| -> Result<Vec<CertificateDer<'static>>, String> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("cannot read certificate file {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{} is not a PEM certificate file: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{} holds no certificate", path.display()));
        }
        Ok(certs)
    };
    let certs = read_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match client_ca {
        None => rustls::server::WebPkiClientVerifier::no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in read_certs(ca)? {
                roots.add(c).map_err(|e| format!("{} holds a CA certificate that cannot be used: {e}", ca.display()))?;
            }
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| format!("cannot verify clients with the CA certificates of {}: {e}", ca.display()))?
        }
    };
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not make a TLS identity: {e}"))?;
    Ok(Arc::new(config))
}

