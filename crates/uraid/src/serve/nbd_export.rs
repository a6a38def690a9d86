//! The NBD export of `uraid serve`, built in this one place: its TLS
//! (certificates or pre-shared keys), the address it listens on (a unix
//! socket, or TCP with the refusal of unauthenticated non-loopback
//! serving), the NBD server over every served volume, each volume's
//! export as a `uraid_core::export::Export` for the service, and the
//! lines that tell the kernel's nbd-client how to connect. Everything
//! else in `serve` and the service talks to the exports through that
//! interface, never through the NBD server's own types.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use uraid_core::Volume;
use uraid_nbd::{Listener, Server, ServerOptions};

pub(crate) use uraid_nbd::Tls;

use super::ServeArgs;

/// The export's TLS: certificates (with the clients' CA when given), or
/// pre-shared keys. Errors: a file cannot be read or used (the message
/// names it), or both kinds are given (the config and flags together).
pub(super) fn tls(a: &ServeArgs) -> Result<Option<Tls>> {
    match (&a.tls_cert, &a.tls_key, &a.tls_psk) {
        (Some(_), _, Some(_)) => bail!("give either --tls-psk (tls-psk in uraid.conf) or --tls-cert and --tls-key, not both"),
        (Some(c), Some(k), None) => Ok(Some(Tls::Certificate(uraid_nbd::tls_config(c, k, a.tls_ca.as_deref()).map_err(anyhow::Error::msg)?))),
        (None, _, Some(p)) => Ok(Some(Tls::Psk(uraid_nbd::psk_config(p).map_err(anyhow::Error::msg)?))),
        _ if a.tls_ca.is_some() => bail!("tls-ca (client certificates) needs tls-cert and tls-key, the server's own certificate"),
        _ => Ok(None),
    }
}

/// The console's HTTPS configuration: the export's certificate `cert`
/// and key `key` (PEM files), without client certificates (a browser
/// logs in with the token). Errors: a file cannot be read or used.
pub(super) fn console_tls(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    uraid_nbd::tls_config(cert, key, None).map_err(anyhow::Error::msg)
}

/// Whether TCP clients must prove who they are: a pre-shared key
/// (--tls-psk) or a certificate of the clients' CA (--tls-ca).
pub(super) fn clients_authenticate(a: &ServeArgs) -> bool {
    a.tls_psk.is_some() || a.tls_ca.is_some()
}

/// The TCP address `addr` to serve on (port 10809 when none is given).
/// Errors: not an address, or not loopback while clients would not
/// authenticate (no TLS-PSK, no client CA) and the user did not say
/// --insecure-no-client-auth.
pub(super) fn tcp_addr(addr: &str, a: &ServeArgs, tls: bool) -> Result<SocketAddr> {
    let sa: SocketAddr = addr
        .parse()
        .or_else(|_| format!("{addr}:10809").parse())
        .with_context(|| format!("'{addr}' is not an address like 127.0.0.1:10809"))?;
    if !sa.ip().is_loopback() && !clients_authenticate(a) && !a.insecure_no_client_auth {
        bail!(
            "{sa} is not a loopback address and clients would not authenticate: anyone who can connect \
             could read and write the array{}. Give --tls-psk FILE (pre-shared keys), or --tls-cert and \
             --tls-key with --tls-verify-peer --tls-ca CA.pem (client certificates); or use a unix socket \
             or 127.0.0.1; or add --insecure-no-client-auth if everyone who can reach {sa} may write the array \
             (in uraid.conf: tls-psk, tls-ca, insecure-no-client-auth = true)",
            if tls { "" } else { ", and without TLS data travels in clear" }
        );
    }
    Ok(sa)
}

/// One volume as an NBD export: its export name, what `nbdinfo --list`
/// shows of it, the volume.
pub(super) struct Offer {
    pub name: String,
    pub description: String,
    pub volume: Arc<Volume>,
}

/// The NBD side of a served array: the listener (none with `--ublk`
/// alone) and the server over every served volume.
pub(super) struct Nbd {
    server: Server,
    listener: Option<Listener>,
    /// An export's URI is `uri_parts.0 + EXPORT + uri_parts.1`.
    uri_parts: (String, String),
    /// TCP without client authentication: `Some(whether it is loopback only)`.
    pub open_tcp: Option<bool>,
}

impl Nbd {
    /// Listens where `a` says (TCP at `tcp`, else the unix socket
    /// `--socket` or RUN_DIR/NAME.sock with `--socket-mode` and group
    /// `socket_gid`; nothing with `--ublk` alone) and makes the server of
    /// `offers` with `tls` and the buffer budgets `conn_buffer` and
    /// `buffer_memory` (bytes). Errors: the address or socket cannot be
    /// bound.
    pub(super) fn start(
        a: &ServeArgs,
        name: &str,
        tcp: Option<SocketAddr>,
        tls: Option<Tls>,
        socket_gid: Option<libc::gid_t>,
        (conn_buffer, buffer_memory): (u64, u64),
        offers: Vec<Offer>,
    ) -> Result<Nbd> {
        let scheme = if tls.is_some() { "nbds" } else { "nbd" };
        let mut open_tcp = None;
        let (listener, uri_parts) = match tcp {
            Some(sa) => {
                if !clients_authenticate(a) {
                    open_tcp = Some(sa.ip().is_loopback());
                }
                let l = TcpListener::bind(sa).with_context(|| format!("cannot listen on {sa}"))?;
                // With port 0 the kernel picks one: print the real address.
                let sa = l.local_addr().unwrap_or(sa);
                (Some(Listener::Tcp(l)), (format!("{scheme}://{sa}/"), String::new()))
            }
            // --ublk alone: no NBD socket.
            None if a.ublk && a.socket.is_none() => (None, (String::new(), String::new())),
            None => {
                let path = a.socket.clone().unwrap_or_else(|| crate::runstate::run_dir().join(format!("{name}.sock")));
                let l = crate::sock::bind_unix(&path, a.socket_mode, socket_gid)?;
                let parts = (format!("{scheme}+unix:///"), format!("?socket={}", path.display()));
                (Some(Listener::Unix(l, path)), parts)
            }
        };
        // No NBD export without a listener: it would hold the volume, which
        // a grow waits for every export to let go of (--ublk alone).
        let exports = match listener.is_some() {
            true => offers.into_iter().map(|o| uraid_nbd::Export { name: o.name, description: o.description, volume: o.volume }).collect(),
            false => Vec::new(),
        };
        let server = Server::new(
            exports,
            ServerOptions {
                read_only: a.read_only,
                queue_depth: a.queue_depth.clamp(1, 1024),
                tls,
                max_connections: a.max_connections as usize,
                handshake_timeout: std::time::Duration::from_secs(a.handshake_timeout),
                client_timeout: std::time::Duration::from_secs(a.client_timeout),
                payload_timeout: std::time::Duration::from_secs(a.payload_timeout),
                conn_buffer_bytes: usize::try_from(conn_buffer).unwrap_or(usize::MAX),
                buffer_bytes: usize::try_from(buffer_memory).unwrap_or(usize::MAX),
            },
        );
        Ok(Nbd { server, listener, uri_parts, open_tcp })
    }

    /// Whether there is an NBD listener (not with `--ublk` alone).
    pub(super) fn listens(&self) -> bool {
        self.listener.is_some()
    }

    /// The URI of export `export` (empty without a listener).
    pub(super) fn uri_of(&self, export: &str) -> String {
        match self.listens() {
            true => format!("{}{export}{}", self.uri_parts.0, self.uri_parts.1),
            false => String::new(),
        }
    }

    /// The export `export` (a served volume's export name) as the service
    /// sees it; `None` without a listener. Errors: the server lost the
    /// export (a bug).
    pub(super) fn export(&self, export: &str) -> Result<Option<Arc<dyn uraid_core::export::Export>>> {
        if !self.listens() {
            return Ok(None);
        }
        let h = self.server.handle(export, &self.uri_of(export)).context("the NBD server lost its export")?;
        Ok(Some(Arc::new(h)))
    }

    /// The flag that stops the server (and, in `serve`, everything else).
    pub(super) fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.server.shutdown_flag()
    }

    /// The listening socket's descriptor, to wake the server's poll on it
    /// with `shutdown` at the stop; `None` without a listener.
    pub(super) fn listener_fd(&self) -> Option<std::os::fd::RawFd> {
        self.listener.as_ref().map(|l| match l {
            Listener::Unix(u, _) => std::os::fd::AsRawFd::as_raw_fd(u),
            Listener::Tcp(t) => std::os::fd::AsRawFd::as_raw_fd(t),
        })
    }

    /// Serves until the shutdown flag is set. Errors: the listening
    /// socket failed. Without a listener: returns at once.
    pub(super) fn run(&self) -> std::io::Result<()> {
        match &self.listener {
            Some(l) => self.server.run(l),
            None => Ok(()),
        }
    }

    /// Removes the unix socket's file (after the server stopped).
    pub(super) fn remove_socket(&self) {
        if let Some(Listener::Unix(_, p)) = &self.listener {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The lines `serve` prints for the kernel's client: the nbd-client
/// command (Debian's 3.24 syntax, run as printed by tests/vm/nbd_client.sh)
/// for the export at `uri` (`nbd[s]://HOST:PORT/NAME` or
/// `nbd[s]+unix:///NAME?socket=PATH`). With `cert` (TLS certificates) the
/// command verifies the server against `CA.pem` and, with `client_cert`
/// (the server checks clients against --tls-ca), presents `CLIENT-CERT.pem`
/// and `CLIENT-KEY.pem`: placeholders the user fills in, explained on the
/// next line. nbd-client has no TLS-PSK (`psk`): then the line says so.
pub(super) fn nbd_client_hint(name: &str, uri: &str, cert: bool, client_cert: bool, psk: bool) -> Vec<String> {
    let head = "with the kernel's nbd module:";
    if psk {
        return vec![format!("{head} nbd-client (3.24) has no TLS-PSK: use nbdfuse above, or certificates (--tls-cert)")];
    }
    let q = |s: &str| {
        if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c)) {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let target = match uri.split_once("socket=") {
        Some((_, path)) => format!("-unix {}", q(path)),
        None => {
            // HOST:PORT, HOST an IPv4 address or a bracketed IPv6 one.
            let authority = uri.split_once("://").map_or(uri, |(_, r)| r).split('/').next().unwrap_or("");
            let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "10809"));
            format!("{} {port}", host.trim_start_matches('[').trim_end_matches(']'))
        }
    };
    let mut cmd = format!("{head} nbd-client -N {} {target} /dev/nbd0", q(name));
    let mut lines = Vec::new();
    if cert {
        cmd += " -cacertfile CA.pem";
        if uri.contains("+unix:") {
            cmd += " -tlshostname HOST";
        }
        if client_cert {
            cmd += " -certfile CLIENT-CERT.pem -keyfile CLIENT-KEY.pem";
        }
        lines.push(cmd);
        lines.push(format!(
            "  (CA.pem: the CA that signed this server's certificate; without it nbd-client does not check the server{}{})",
            if uri.contains("+unix:") { "; HOST: a name in that certificate" } else { "" },
            if client_cert { "; CLIENT-CERT.pem, CLIENT-KEY.pem: a client certificate signed by --tls-ca and its key" } else { "" }
        ));
    } else {
        lines.push(cmd);
    }
    lines
}

#[cfg(test)]
mod nbd_client_hint_tests {
    use super::nbd_client_hint;

    #[test]
    fn the_command_names_the_socket_or_host_and_port_and_the_tls_files() {
        let h = |uri, cert, cc, psk| nbd_client_hint("a1", uri, cert, cc, psk).join("\n");
        assert_eq!(h("nbd+unix:///a1?socket=/run/uraid/a1.sock", false, false, false), "with the kernel's nbd module: nbd-client -N a1 -unix /run/uraid/a1.sock /dev/nbd0");
        assert_eq!(h("nbd+unix:///a1?socket=/tmp/my dir/a'1.sock", false, false, false), "with the kernel's nbd module: nbd-client -N a1 -unix '/tmp/my dir/a'\\''1.sock' /dev/nbd0");
        assert_eq!(h("nbd://127.0.0.1:10809/a1", false, false, false), "with the kernel's nbd module: nbd-client -N a1 127.0.0.1 10809 /dev/nbd0");
        assert_eq!(h("nbd://[::1]:10900/a1", false, false, false), "with the kernel's nbd module: nbd-client -N a1 ::1 10900 /dev/nbd0");
        let t = h("nbds://127.0.0.1:10819/a1", true, true, false);
        assert!(t.starts_with("with the kernel's nbd module: nbd-client -N a1 127.0.0.1 10819 /dev/nbd0 -cacertfile CA.pem -certfile CLIENT-CERT.pem -keyfile CLIENT-KEY.pem\n  (CA.pem:"), "{t}");
        let t = h("nbds://127.0.0.1:10819/a1", true, false, false);
        assert!(t.starts_with("with the kernel's nbd module: nbd-client -N a1 127.0.0.1 10819 /dev/nbd0 -cacertfile CA.pem\n") && !t.contains("CLIENT-"), "{t}");
        assert!(h("nbds://127.0.0.1:10819/a1", false, false, true).contains("has no TLS-PSK"));
    }
}
