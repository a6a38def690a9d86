//! The byte stream of one NBD connection: plain, or TLS after the client's
//! NBD_OPT_STARTTLS (rustls, TLS 1.2 and 1.3, with certificates; or
//! OpenSSL with pre-shared keys, see [`crate::psk`]).
//!
//! Every byte goes through [`Sock`] ([`crate::sock`]), which never lets a
//! client stop the server.
//!
//! The handshake reads and writes through [`Sock`]'s blocking `Read` and
//! `Write`; the transmission phase reads without blocking
//! ([`Wire::recv_nb`]) so that one thread can wait on the socket and the
//! drives together, and sends replies with [`Wire::send_all`].

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

pub use crate::sock::{Recv, Sock};
use crate::sock::recv_fd;


/// A connection's stream.
pub enum Wire {
    /// Clear text.
    Plain(Sock),
    /// TLS; `pending` holds received ciphertext not yet given to rustls.
    Tls {
        /// The rustls session over the socket.
        tls: Box<rustls::StreamOwned<rustls::ServerConnection, Sock>>,
        /// Ciphertext received, not yet given to rustls.
        pending: Vec<u8>,
    },
    /// TLS-PSK (OpenSSL; see [`crate::psk`]).
    Psk(Box<openssl::ssl::SslStream<Sock>>),
    /// Transient state while upgrading.
    Gone,
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

