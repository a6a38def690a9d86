//! The byte stream of one NBD connection: plain, or TLS after the client's
//! NBD_OPT_STARTTLS (rustls, TLS 1.2 and 1.3).
//!
//! The handshake uses blocking reads and writes; the transmission phase
//! reads without blocking ([`Wire::recv_nb`]) so that one thread can wait
//! on the socket and the drives together, and writes replies blocking.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// What a non-blocking read got.
pub enum Recv {
    /// This many bytes.
    Got(usize),
    /// Nothing now; poll the socket.
    Again,
    /// The peer closed, or the stream failed.
    Closed,
}

/// A connection's stream.
pub enum Wire<S: Read + Write + AsRawFd> {
    /// Clear text.
    Plain(S),
    /// TLS; `pending` holds received ciphertext not yet given to rustls.
    Tls { tls: Box<rustls::StreamOwned<rustls::ServerConnection, S>>, pending: Vec<u8> },
    /// Transient state while upgrading.
    Gone,
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

impl<S: Read + Write + AsRawFd> Wire<S> {
    /// The socket's descriptor (to poll it).
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Wire::Plain(s) => s.as_raw_fd(),
            Wire::Tls { tls, .. } => tls.sock.as_raw_fd(),
            Wire::Gone => -1,
        }
    }

    /// True once TLS is up.
    pub fn is_tls(&self) -> bool {
        matches!(self, Wire::Tls { .. })
    }

    /// Upgrades to TLS with `config` and completes the TLS handshake
    /// (blocking). Errors: the handshake failed; the connection is then gone.
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
            conn.complete_io(sock)?;
        }
        *self = Wire::Tls { tls, pending: Vec::new() };
        Ok(())
    }

    /// Reads what is there without blocking.
    pub fn recv_nb(&mut self, buf: &mut [u8]) -> Recv {
        match self {
            Wire::Plain(s) => recv_fd(s.as_raw_fd(), buf),
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

    /// Writes every byte of `parts` (blocking).
    pub fn send_all(&mut self, parts: &mut [IoSlice<'_>]) -> io::Result<()> {
        match self {
            Wire::Plain(s) => {
                let mut bufs = parts;
                while !bufs.is_empty() {
                    match s.write_vectored(bufs) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
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
            Wire::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl<S: Read + Write + AsRawFd> Read for Wire<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls { tls, .. } => tls.read(buf),
            Wire::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl<S: Read + Write + AsRawFd> Write for Wire<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.write(buf),
            Wire::Tls { tls, .. } => {
                let n = tls.write(buf)?;
                tls.flush()?;
                Ok(n)
            }
            Wire::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Wire::Plain(s) => s.flush(),
            Wire::Tls { tls, .. } => tls.flush(),
            Wire::Gone => Ok(()),
        }
    }
}

/// Loads a certificate chain and private key (PEM files) into a rustls
/// server configuration. Errors name the file and what was wrong.
pub fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cannot read certificate file {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} is not a PEM certificate file: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not make a TLS identity: {e}"))?;
    Ok(Arc::new(config))
}
