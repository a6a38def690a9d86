//! `uraid serve`: export an array's volume over NBD until SIGINT/SIGTERM.
//!
//! A member left rebuilding when the array is assembled (a spare that took
//! over a failed role, or one added with `--no-rebuild`) is rebuilt in the
//! background while the export serves I/O (the stripe locks order the two);
//! a stop interrupts it at its next checkpoint and the next assemble
//! resumes it.
//!
//! While it serves, the live state of an assembled array (each volume's
//! cache counters) is published in a runtime file for `uraid status`
//! (see [`crate::runstate`]); a clean stop removes it.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use uraid_core::control::array;
use uraid_core::io::member::MemberKind;
use uraid_core::units::parse_size;
use uraid_nbd::{Export, Listener, Server, ServerOptions};

use crate::common::specs;
use crate::sock::bind_unix;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Unix socket to listen on (default: /run/uraid/NAME.sock, or in
    /// $URAID_RUN_DIR when set).
    #[arg(long, conflicts_with = "tcp")]
    socket: Option<PathBuf>,
    /// Listen on TCP instead, at ADDR:PORT (default 127.0.0.1:10809).
    #[arg(long, num_args = 0..=1, default_missing_value = "127.0.0.1:10809")]
    tcp: Option<String>,
    /// Serve a TCP address that is not loopback to clients that do not
    /// authenticate (no --tls-psk, no --tls-verify-peer): anyone who can
    /// connect can read and write the array (and without TLS, data
    /// travels in clear). Refused without this flag.
    #[arg(long, alias = "insecure")]
    insecure_no_client_auth: bool,
    /// TLS certificate chain (PEM); with --tls-key, clients must upgrade
    /// with STARTTLS before anything else (nbds:// URIs).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require a client certificate signed by a CA of --tls-ca (nbdkit's
    /// name); clients without one are refused during the TLS handshake.
    #[arg(long, requires_all = ["tls_cert", "tls_ca"])]
    tls_verify_peer: bool,
    /// CA certificates (PEM) that sign the clients' certificates, for
    /// --tls-verify-peer.
    #[arg(long, requires = "tls_verify_peer")]
    tls_ca: Option<PathBuf>,
    /// TLS with pre-shared keys instead of certificates (nbdkit's
    /// --tls-psk): FILE has one USERNAME:HEXKEY line per client (psktool's
    /// format; `echo alice:$(openssl rand -hex 32) > FILE`, mode 0600).
    /// Clients must upgrade with STARTTLS and prove they hold a key
    /// (libnbd: nbds://alice@HOST:PORT/NAME?tls-psk-file=FILE).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tls_cert", "tls_key"])]
    tls_psk: Option<PathBuf>,
    /// Permissions of the unix socket, octal: who may connect (and so read
    /// and write the array). The default lets only its owner (root) in.
    #[arg(long, default_value = "0600", value_parser = parse_mode)]
    socket_mode: u32,
    /// Group of the unix socket (a name or a number), e.g. with
    /// --socket-mode 0660 to let that group connect.
    #[arg(long, conflicts_with = "tcp")]
    socket_group: Option<String>,
    /// Connections served at once; the next one is told "too many
    /// connections" (NBD_REP_ERR_POLICY) and closed.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_connections: u32,
    /// Seconds a client has for its whole handshake (TLS included).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    handshake_timeout: u64,
    /// Seconds a client may leave its replies unread before it is
    /// disconnected.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    client_timeout: u64,
    /// Seconds a WRITE payload may stop arriving before the connection is
    /// closed and its buffers freed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    payload_timeout: u64,
    /// I/O buffer memory one connection may hold (READ data not yet sent,
    /// WRITE payloads); beyond it requests wait in the socket. At least 32M
    /// (the largest request).
    #[arg(long, default_value = "64M")]
    conn_buffer: String,
    /// I/O buffer memory all connections together may hold; each
    /// connection is guaranteed (this - --conn-buffer) / --max-connections
    /// of it (at most 1M, at least 4K), the rest is shared.
    #[arg(long, default_value = "512M")]
    buffer_memory: String,
    /// Export read-only.
    #[arg(long)]
    read_only: bool,
    /// Serve the array as a block device, /dev/ublkbN (the kernel's ublk
    /// driver: `modprobe ublk_drv`, Linux 6.5+): alone, with no NBD
    /// socket; with --socket or --tcp, both. A device left by a server
    /// that died (kill -9) is re-attached, its mounts kept.
    #[arg(long)]
    ublk: bool,
    /// Take the array over from the `uraid serve` that serves it (e.g.
    /// after an upgrade), keeping its /dev/ublkbN and the filesystems
    /// mounted on it: that process answers its requests in flight,
    /// flushes, closes the array clean and exits, leaving the device
    /// waiting; this one re-attaches it. Implies --ublk. Its NBD clients
    /// lose their connection (they reconnect).
    #[arg(long)]
    takeover: bool,
    /// N of a new /dev/ublkbN (default: the first free one).
    #[arg(long, value_name = "N")]
    ublk_id: Option<u32>,
    /// Go to the background once the array is served (the export listens
    /// and the control socket answers), as qemu-nbd --fork: the command
    /// returns then with status 0, or with 1 when the server could not
    /// start (its error is on stderr). The server keeps this stdout and
    /// stderr; stop it with `uraid stop NAME`.
    #[arg(long)]
    fork: bool,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 64)]
    queue_depth: usize,
    /// Rebuild rate limit for a background rebuild, in MB/s (10^6 bytes/s);
    /// a plain number is MB/s, or give units (250M). Default: no limit.
    #[arg(long)]
    rebuild_rate: Option<String>,
    /// Rate limit of a scrub (`uraid check NAME`, `--scrub-every`) of the
    /// served array, in MB/s of the volume (10^6 bytes/s); a plain number
    /// is MB/s, or give units (200M). `uraid check --rate` overrides it.
    /// Default: the config's `scrub-rate`, else 100 MB/s.
    #[arg(long)]
    scrub_rate: Option<String>,
    /// Serve Prometheus metrics over HTTP at ADDR:PORT (GET /metrics), e.g.
    /// 127.0.0.1:9109.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Allow a --metrics address that is not loopback.
    #[arg(long)]
    metrics_insecure: bool,
    /// Serve the web console at ADDR:PORT (default 127.0.0.1:8109): live
    /// state, charts, events and actions. It prints the address to open and
    /// where its access token is (it never prints the token). With --tls-cert and
    /// --tls-key it speaks HTTPS with that certificate, and may then listen
    /// on any address; without, loopback only.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8109")]
    console: Option<String>,
    /// Where the console keeps the reports of the benchmarks it runs, and
    /// lists `uraid suite --out` reports (default /var/lib/uraid/reports).
    #[arg(long, value_name = "DIR", requires = "console")]
    reports: Option<PathBuf>,
    /// The one directory whose regular files the console may write
    /// (benchmark targets, spares); without it the console acts on free
    /// block devices only.
    #[arg(long, value_name = "DIR", requires = "console")]
    console_files_dir: Option<PathBuf>,
    /// The console's access token, at least 22 characters (default: a new
    /// random 128-bit one each start, written to
    /// $URAID_RUN_DIR/NAME.console-token, else /run/uraid/NAME.console-token,
    /// mode 0600). Other local users can read a command line (ps): prefer
    /// `console-token` in the config.
    #[arg(long, value_name = "TOKEN", requires = "console")]
    console_token: Option<String>,
    /// Check every redundant volume this often (like the weekly mdcheck
    /// timer), counted from the end of the last check, also across
    /// restarts (its stamp is kept in $URAID_STATE_DIR, else
    /// /var/lib/uraid; without one, from the start of `serve`): 12h, 7d,
    /// 1w. Mismatches are reported as MismatchesFound.
    #[arg(long)]
    scrub_every: Option<String>,
    /// Run this program on every event, as `PROGRAM EVENT ARRAY [MEMBER]`
    /// (mdadm's PROGRAM).
    #[arg(long)]
    program: Option<PathBuf>,
    /// Mail these events to this address: Fail, FailSpare, DegradedArray,
    /// TestMessage, JournalLost (mdadm's MAILADDR).
    #[arg(long)]
    mail: Option<String>,
    /// The command that sends a mail given on its stdin (default: the
    /// config's, else /usr/sbin/sendmail -t).
    #[arg(long)]
    mail_command: Option<String>,
    /// Chunk of the temporary RAID 0 when every member is a `mem:` drive.
    #[arg(long, default_value = "128K")]
    chunk: String,
    /// The members of an array (any order); or `mem:` drives for a
    /// temporary in-memory array named "mem".
    #[arg(required = true)]
    members: Vec<String>,
}

/// Parses a permission mode given in octal ("0600", "660").
fn parse_mode(s: &str) -> std::result::Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("'{s}' is not a permission mode in octal, like 0600 or 0660")),
    }
}

/// Writes a line to stderr, ignoring a stderr that went away (a server
/// must not stop, nor panic as `eprintln!` does, because its log reader
/// left).
macro_rules! log {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
    wake();
}

use crate::service::wake::{wait_wake, wake};

fn install_signal_handlers() {
    crate::service::wake::make_pipe();
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an
        // atomic (async-signal-safe); sa_mask empty, no SA_RESTART so that
        // blocking calls return EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The export's TLS: certificates (with the clients' CA when given), or
/// pre-shared keys. Errors: a file cannot be read or used (the message
/// names it), or both kinds are given (the config and flags together).
fn nbd_tls(a: &ServeArgs) -> Result<Option<uraid_nbd::Tls>> {
    match (&a.tls_cert, &a.tls_key, &a.tls_psk) {
        (Some(_), _, Some(_)) => bail!("give either --tls-psk (tls-psk in uraid.conf) or --tls-cert and --tls-key, not both"),
        (Some(c), Some(k), None) => {
            Ok(Some(uraid_nbd::Tls::Certificate(uraid_nbd::tls_config(c, k, a.tls_ca.as_deref()).map_err(anyhow::Error::msg)?)))
        }
        (None, _, Some(p)) => Ok(Some(uraid_nbd::Tls::Psk(uraid_nbd::psk_config(p).map_err(anyhow::Error::msg)?))),
        _ if a.tls_ca.is_some() => bail!("tls-ca (client certificates) needs tls-cert and tls-key, the server's own certificate"),
        _ => Ok(None),
    }
}

/// Whether TCP clients must prove who they are: a pre-shared key
/// (--tls-psk) or a certificate of the clients' CA (--tls-ca).
fn clients_authenticate(a: &ServeArgs) -> bool {
    a.tls_psk.is_some() || a.tls_ca.is_some()
}

/// The TCP address `addr` to serve on (port 10809 when none is given).
/// Errors: not an address, or not loopback while clients would not
/// authenticate (no TLS-PSK, no client CA) and the user did not say
/// --insecure-no-client-auth.
fn tcp_addr(addr: &str, a: &ServeArgs, tls: bool) -> Result<SocketAddr> {
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

/// Default scrub rate of a served array, bytes/s (100 MB/s).
const DEFAULT_SCRUB_RATE: u64 = 100_000_000;

pub(crate) fn run(mut a: ServeArgs) -> Result<()> {
    // A client that hangs up must never end the server (its replies go
    // with MSG_NOSIGNAL too; this also covers stdout and stderr).
    // SAFETY: setting a signal disposition; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    if a.fork {
        fork_until_ready()?;
    }
    let specs = specs(&a.members)?;
    let conn_buffer = parse_size(&a.conn_buffer, "--conn-buffer")?;
    let buffer_memory = parse_size(&a.buffer_memory, "--buffer-memory")?;
    if conn_buffer < 32 << 20 {
        bail!("--conn-buffer {} is below 32M, the largest request a client may send", a.conn_buffer);
    }
    if buffer_memory < conn_buffer {
        bail!("--buffer-memory {} is below --conn-buffer {}: one connection could not hold its budget", a.buffer_memory, a.conn_buffer);
    }
    if buffer_memory < conn_buffer + 4096 * a.max_connections as u64 {
        bail!(
            "--buffer-memory {} cannot hold --conn-buffer {} and the 4K reserved for each of the --max-connections {}: give more buffer memory or fewer connections",
            a.buffer_memory,
            a.conn_buffer,
            a.max_connections
        );
    }
    let socket_gid = a.socket_group.as_deref().map(group_id).transpose()?;
    // The control socket and the state file go there: refused before the
    // array is touched when others could write to it.
    crate::runstate::check_run_dir()?;
    // An array named in the config: its settings where no flag is given.
    let conf = crate::conf::load()?;
    let mine = match &a.members[..] {
        [one] => conf.array(one).cloned(),
        _ => None,
    };
    let mon = conf.monitor.clone();
    if let Some(c) = &mine {
        a.socket = a.socket.take().or(c.socket.clone());
        a.tcp = a.tcp.take().or(c.tcp.clone());
        a.tls_cert = a.tls_cert.take().or(c.tls_cert.clone());
        a.tls_key = a.tls_key.take().or(c.tls_key.clone());
        a.tls_ca = a.tls_ca.take().or(c.tls_ca.clone());
        a.tls_psk = a.tls_psk.take().or(c.tls_psk.clone());
        a.insecure_no_client_auth |= c.insecure_no_client_auth;
        a.metrics = a.metrics.take().or(c.metrics.clone());
        a.console = a.console.take().or(c.console.clone());
        a.console_token = a.console_token.take().or(c.console_token.clone());
        a.reports = a.reports.take().or(c.reports.clone());
        a.console_files_dir = a.console_files_dir.take().or(c.console_files_dir.clone());
        a.ublk |= c.ublk;
        a.ublk_id = a.ublk_id.or(c.ublk_id);
    }
    let rebuild_rate = match crate::manage::rate(&a.rebuild_rate).context("--rebuild-rate")? {
        Some(r) => Some(r),
        None => mine.as_ref().and_then(|c| c.rebuild_rate),
    };
    let scrub_rate = match crate::manage::rate(&a.scrub_rate).context("--scrub-rate")? {
        Some(r) => Some(r),
        None => Some(mine.as_ref().and_then(|c| c.scrub_rate).unwrap_or(DEFAULT_SCRUB_RATE)),
    };
    let scrub_every = match a.scrub_every.as_deref() {
        Some(s) => Some(std::time::Duration::from_secs(crate::conf::parse_duration(s).context("--scrub-every")?)),
        None => mine.as_ref().and_then(|c| c.scrub_every).map(std::time::Duration::from_secs),
    };
    let sinks = crate::service::events::Sinks {
        program: a.program.clone().or_else(|| mon.as_ref().and_then(|m| m.program.clone()).map(PathBuf::from)),
        mail: a.mail.clone().or_else(|| mon.as_ref().and_then(|m| m.mail.clone())),
        mail_command: a.mail_command.clone().or_else(|| mon.as_ref().map(|m| m.mail_command.clone())),
    };
    let window = Arc::new(crate::service::figures::Window::default());
    // The console's address and certificate, checked before anything is
    // assembled: HTTPS with the export's certificate when one is given
    // (without the export's client certificates: a browser logs in with
    // the token), and loopback only without.
    let console_tls = match (&a.console, &a.tls_cert, &a.tls_key) {
        (Some(_), Some(c), Some(k)) => Some(uraid_nbd::tls_config(c, k, None).map_err(anyhow::Error::msg)?),
        _ => None,
    };
    if let Some(addr) = &a.console {
        crate::service::console::parse_addr(addr, console_tls.is_some())?;
        if let Some(t) = &a.console_token {
            crate::service::console::check_token(t)?;
        }
    }
    let tls = nbd_tls(&a)?;
    let tcp_addr = a.tcp.as_deref().map(|addr| tcp_addr(addr, &a, tls.is_some())).transpose()?;
    // The running server hands over first (said before anything else
    // when nothing serves the array, or serves it without ublk).
    a.ublk |= a.takeover;
    let taken = if a.takeover { Some(crate::service::takeover::take_over(&a.members)?) } else { None };
    // No ublk here: said before the array is touched, never served another way.
    if a.ublk {
        crate::ublk_export::check()?;
    }

    let all_mem = specs.iter().all(|s| matches!(s, uraid_core::MemberSpec::Mem(_)));
    let (name, volume, mut arr) = if all_mem {
        let members = array::open_members(&specs, true, true)?;
        let (v, _) = array::temporary(members, parse_size(&a.chunk, "chunk size")?)?;
        ("mem".to_string(), v, None)
    } else {
        for s in &specs {
            if !array::examine(s)?.is_array_device() {
                bail!("{s} is not a uraid member; create an array first (uraid create --level 0 --name NAME MEMBER...)");
            }
        }
        let arr = array::assemble(&specs)?;
        // What the assemble did, as `uraid assemble` prints it (the
        // manager also sends each as an AssembleWarning event).
        for w in arr.warnings() {
            eprintln!("uraid serve: warning: {w}");
        }
        (arr.name().to_string(), arr.volume().clone(), Some(arr))
    };
    // Every volume is served (a Matrix array's each by its own exports).
    let (served, vols) = served_volumes(&name, arr.as_ref(), &volume);
    // Each served volume's live I/O figures, for `uraid status`; the
    // first volume's window is also the console's.
    let windows: Vec<(usize, String, Arc<crate::service::figures::Window>)> = served
        .iter()
        .map(|s| (s.index, s.name.clone(), if s.index == 0 { window.clone() } else { Default::default() }))
        .collect();
    let exported = served[0].name.clone();
    let figures: crate::service::ctl::Figures = {
        let windows = windows.clone();
        Arc::new(move || {
            let each = windows.iter().map(|(_, n, w)| (n.clone(), serde_json::json!(w.figures(crate::service::figures::STATUS_SECONDS))));
            serde_json::Value::Object(each.collect())
        })
    };
    let scheme = if tls.is_some() { "nbds" } else { "nbd" };
    // TCP without client authentication: Some(whether it is loopback only).
    let mut open_tcp: Option<bool> = None;
    // An export's URI is `uri_parts.0 + EXPORT + uri_parts.1`.
    let (listener, uri_parts) = match tcp_addr {
        Some(sa) => {
            if !clients_authenticate(&a) {
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
            let l = bind_unix(&path, a.socket_mode, socket_gid)?;
            let parts = (format!("{scheme}+unix:///"), format!("?socket={}", path.display()));
            (Some(Listener::Unix(l, path)), parts)
        }
    };
    let uri_of = |export: &str| if listener.is_some() { format!("{}{export}{}", uri_parts.0, uri_parts.1) } else { String::new() };
    let uri = uri_of(&name);
    let kinds: Vec<String> = volume
        .members()
        .iter()
        .map(|m| format!("{}{}", m.name(), if m.kind() == MemberKind::Mem { " (in RAM)" } else { "" }))
        .collect();
    let description = served[0].description.clone();
    let server = Server::new(
        // No NBD export without a listener: it would hold the volume, which
        // a grow waits for every export to let go of (--ublk alone).
        match listener.is_some() {
            true => served.iter().zip(&vols).map(|(s, v)| Export { name: s.export.clone(), description: s.description.clone(), volume: v.clone() }).collect(),
            false => Vec::new(),
        },
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
    let array_uuid = arr.as_ref().map(|x| x.uuid()).unwrap_or_default();
    // One /dev/ublkbN per volume, in the order of the volume table.
    let ublk: Option<Vec<uraid_ublk::UblkExport>> = match a.ublk {
        true => {
            let targets: Vec<crate::ublk_export::Target> = served
                .iter()
                .zip(&vols)
                .map(|(s, v)| crate::ublk_export::Target { volume: s.name.clone(), uuid: s.uuid.clone(), vol: v.clone() })
                .collect();
            Some(crate::ublk_export::start_all(&name, &array_uuid, &targets, a.read_only, a.ublk_id)?)
        }
        false => None,
    };
    // /dev/uraid/NAME (NAME:VOLUME past the first volume) and
    // /dev/disk/by-id/uraid-UUID (crate::devlinks); a path held by
    // something else is said, and the array is served.
    for (s, u) in served.iter().zip(ublk.iter().flatten()) {
        if let Err(e) = crate::devlinks::link_volume(&s.link, &s.by_id(&array_uuid), std::path::Path::new(u.bdev())) {
            eprintln!("uraid serve: {e:#}");
        }
    }
    // Where each volume is served.
    let served_on_each: Vec<Vec<String>> = served
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let nbd = listener.iter().map(|_| uri_of(&s.export));
            nbd.chain(ublk.iter().filter_map(|u| u.get(i)).map(|u| u.bdev().to_string())).collect()
        })
        .collect();
    let served_on = served_on_each[0].clone();
    install_signal_handlers();
    if let Some(loopback) = open_tcp {
        log!(
            "WARNING: clients of {uri} do not authenticate: every user of this machine{} can connect and read and \
             write the array. Give --tls-psk FILE, or --tls-verify-peer --tls-ca CA.pem with --tls-cert and --tls-key \
             (or tls-psk / tls-ca in uraid.conf), or serve on the unix socket (mode 0600, root only)",
            if loopback { "" } else { ", and every host that can reach it," }
        );
    }
    println!("serving '{name}' ({description}, {} bytes{}) on {}", volume.capacity(), if a.read_only { ", read-only" } else { "" }, served_on.join(" and "));
    for ((s, v), on) in served.iter().zip(&vols).zip(&served_on_each).skip(1) {
        println!(
            "serving volume '{}' of '{name}' ({}, {} bytes{}) on {}",
            s.name,
            s.description,
            v.capacity(),
            if a.read_only { ", read-only" } else { "" },
            on.join(" and ")
        );
    }
    println!("members: {}", kinds.join(" "));
    // What a client gives: with TLS-PSK, a user and a file with its key.
    let client_uri = match &a.tls_psk {
        Some(p) => {
            println!("clients authenticate as a user of {}: USER below, and FILE holding that user's line (mode 0600)", p.display());
            format!("{}?tls-psk-file=FILE", uri.replacen("://", "://USER@", 1))
        }
        None => uri.clone(),
    };
    if let Some(c) = volume.cache() {
        let cfg = c.config();
        println!("cache: {} {}, dirty limit {}", cfg.mode.name(), uraid_core::units::fmt_size(cfg.size), uraid_core::units::fmt_size(cfg.dirty_limit));
        if cfg.mode == uraid_core::cache::CacheMode::WriteBack {
            println!("WARNING: {}", uraid_core::control::array::WRITEBACK_WARNING);
        }
    }
    for (s, u) in served.iter().zip(ublk.iter().flatten()) {
        let (what, dir) = if s.index == 0 { ("it".to_string(), name.clone()) } else { (format!("volume '{}'", s.name), format!("{name}-{}", s.name)) };
        println!("to put a filesystem on {what}: mkfs.ext4 {0}   # first time only\n  mkdir -p /mnt/{dir} && mount {0} /mnt/{dir}", u.bdev());
    }
    if listener.is_some() {
        println!("to put a filesystem on it (kernel without nbd: FUSE + a loop device):");
        println!("  mkdir -p /mnt/{name}-nbd /mnt/{name} && nbdfuse /mnt/{name}-nbd '{client_uri}' &");
        println!("  LOOP=$(losetup -f --show --direct-io=on /mnt/{name}-nbd/nbd)");
        println!("  mkfs.ext4 $LOOP    # first time only");
        println!("  mount $LOOP /mnt/{name}");
        for line in nbd_client_hint(&name, &uri, a.tls_cert.is_some(), a.tls_ca.is_some(), a.tls_psk.is_some()) {
            println!("{line}");
        }
    }
    println!("stop with Ctrl-C (SIGINT) or SIGTERM: requests in flight finish, members are flushed and marked clean.");
    let capacity = volume.capacity();
    // The live counters for `uraid status` in another process. The caches
    // are shared, not the volumes (see below).
    let publisher = arr.as_ref().map(|arr| {
        let sources = arr
            .volume_entries()
            .iter()
            .zip(arr.volumes())
            .map(|(e, v)| crate::runstate::Source {
                name: e.name.clone(),
                uuid: uraid_core::control::superblock::fmt_uuid(&e.uuid),
                cache: v.cache().cloned(),
            })
            .collect();
        crate::runstate::Publisher::start(arr.name(), arr.uuid(), sources)
    });
    // From here the server alone holds the volume, so that after a spare
    // takes over a role the old volume's Arc count tells when every
    // connection has moved to the new one.
    drop(volume);
    drop(vols);
    // The service: the control socket, the events and the manager that
    // owns the array (see crate::service).
    let stop_service = Arc::new(AtomicBool::new(false));
    let live = crate::service::Live::new(stop_service.clone());
    let events = crate::service::events::Events::new(&name, sinks.clone());
    if let Some(t) = &taken {
        events.emit("TakeOver", None, format!("process {} took {} over from process {}", std::process::id(), served_on.join(" and "), t.pid));
    }
    let (jobs_tx, jobs_rx) = std::sync::mpsc::channel();
    let flag = server.shutdown_flag();
    // Every export of every volume, as the manager, status and metrics
    // see them.
    let list = exports_of(&served, listener.as_ref().map(|_| &server), ublk.as_deref(), &uri_of)?;
    let exports = crate::service::exports::Exports::new(list, flag.clone());
    live.set_exports(&exports);
    let watcher = {
        let flag = flag.clone();
        let stop = stop_service.clone();
        let live = live.clone();
        // Asleep until a signal or a stop command wakes it (see [`wake`]);
        // a look every 5 s for any other setter of the flags. The main
        // thread (in `ublk_export::wait`) and the NBD listener are woken.
        let (main, lfd) = (std::thread::current(), listener.as_ref().map(|l| match l {
            Listener::Unix(u, _) => std::os::fd::AsRawFd::as_raw_fd(u),
            Listener::Tcp(t) => std::os::fd::AsRawFd::as_raw_fd(t),
        }));
        std::thread::spawn(move || {
            while !STOP.load(Ordering::Relaxed) && !flag.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                wait_wake(std::time::Duration::from_secs(5));
            }
            live.interrupt.store(true, Ordering::Relaxed);
            flag.store(true, Ordering::Relaxed);
            main.unpark();
            if let Some(fd) = lfd {
                // SAFETY: the listener outlives this thread (joined before
                // it is dropped); shutdown wakes the server's poll on it.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
        })
    };
    let (res, arr) = std::thread::scope(|sc| -> (std::io::Result<()>, Result<Option<array::Array>>) {
        let manager = match arr.take() {
            Some(x) if !a.read_only => {
                let check_stamp = Some(crate::runstate::check_stamp(&x.uuid()));
                let opts = crate::service::ManagerOptions { rebuild_rate, scrub_rate, scrub_every, check_stamp };
                // A member the data path fails wakes the manager at once
                // (its events, the live status, a spare's takeover).
                let wake = std::sync::Mutex::new(jobs_tx.clone());
                x.health().set_notify(move || {
                    let _ = wake.lock().unwrap_or_else(|p| p.into_inner()).send(crate::service::Job::wake());
                });
                let m = crate::service::Manager::new(x, exports.clone(), opts, jobs_rx, live.clone(), events.clone());
                let ctl = match crate::service::ctl::CtlServer::start(
                    &crate::service::client::ctl_path(&name),
                    live.clone(),
                    jobs_tx.clone(),
                    events.clone(),
                    figures.clone(),
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        flag.store(true, Ordering::Relaxed);
                        // Nothing was served: the array goes back as it came.
                        let stopped = m.into_array().stop();
                        let e = e.context("cannot open the control socket");
                        return (Ok(()), Err(match stopped {
                            Ok(()) => e,
                            Err(s) => e.context(format!("and the array could not be stopped cleanly: {s}")),
                        }));
                    }
                };
                Some((sc.spawn(move || m.run()), ctl))
            }
            other => {
                arr = other;
                None
            }
        };
        // The export's counters, once a second, for status and metrics.
        let sampler = {
            let (exports, windows, flag) = (exports.clone(), windows.clone(), flag.clone());
            sc.spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    for (i, _, w) in &windows {
                        w.push(exports.stats_of(*i));
                    }
                    // Woken at the stop (unparked below).
                    std::thread::park_timeout(std::time::Duration::from_secs(1));
                }
            })
        };
        let metrics = match &a.metrics {
            Some(addr) => {
                let source = crate::service::metrics::Source {
                    array: name.clone(),
                    exported: windows.clone(),
                    exports: Some(exports.clone()),
                    live: live.clone(),
                };
                match crate::service::metrics::start(addr, a.metrics_insecure, source) {
                    Ok(m) => {
                        println!("metrics: http://{}/metrics", m.addr);
                        Some(m)
                    }
                    Err(e) => {
                        flag.store(true, Ordering::Relaxed);
                        stop_service.store(true, Ordering::Relaxed);
                        let _ = sampler.join();
                        if let Some((m, ctl)) = manager {
                            drop(ctl);
                            let _ = m.join();
                        }
                        return (Ok(()), Err(e));
                    }
                }
            }
            None => None,
        };
        // A token made here is written to a file only root reads, never printed.
        let token_file = (a.console.is_some() && manager.is_some() && a.console_token.is_none()).then(|| crate::service::console::token_path(&name));
        let console = match (&a.console, &manager) {
            (Some(addr), Some(_)) => {
                let token = match a.console_token.clone().map(Ok).unwrap_or_else(crate::service::console::new_token) {
                    Ok(t) => match token_file.as_deref().map(|p| crate::service::console::write_token(p, &t)) {
                        Some(Err(e)) => {
                            eprintln!("uraid serve: no console: {e:#}");
                            String::new()
                        }
                        _ => t,
                    },
                    Err(e) => {
                        eprintln!("uraid serve: {e:#}");
                        String::new()
                    }
                };
                let https = console_tls.is_some();
                let source = crate::service::console::Source {
                    array: name.clone(),
                    token: token.clone(),
                    live: live.clone(),
                    jobs: std::sync::Mutex::new(jobs_tx.clone()),
                    events: events.clone(),
                    exported: (exported.clone(), window.clone()),
                    reports: a.reports.clone().unwrap_or_else(|| PathBuf::from("/var/lib/uraid/reports")),
                    bench: std::sync::Mutex::new(None),
                    tls: console_tls.clone(),
                    guesses: crate::service::console::Guesses::new(),
                    files_dir: a.console_files_dir.clone(),
                    export_uri: uri.clone(),
                };
                match (token.is_empty(), crate::service::console::start(addr, source)) {
                    (false, Ok(c)) => {
                        let told = token_file.as_ref().map_or("as configured".to_string(), |p| format!("in {}", p.display()));
                        println!("console: {}://{}/ (access token {told})", if https { "https" } else { "http" }, c.addr);
                        Some(c)
                    }
                    (_, Err(e)) => {
                        eprintln!("uraid serve: no console: {e:#}");
                        None
                    }
                    (true, Ok(_)) => None,
                }
            }
            (Some(_), None) => {
                eprintln!("uraid serve: no console: a read-only or temporary array has no manager to act on it");
                None
            }
            _ => None,
        };
        notify_ready(&name, &served_on.join(" and "));
        let res = match &listener {
            Some(l) => server.run(l),
            None => crate::ublk_export::wait(&flag),
        };
        flag.store(true, Ordering::Relaxed);
        // Everything that waits for the service's stop (the metrics
        // endpoint, the control socket, the manager) is told first.
        stop_service.store(true, Ordering::Relaxed);
        drop(metrics);
        drop(console);
        if let Some(p) = &token_file {
            let _ = std::fs::remove_file(p);
        }
        sampler.thread().unpark();
        let _ = sampler.join();
        live.interrupt.store(true, Ordering::Relaxed);
        let managed = manager.map(|(m, ctl)| {
            drop(ctl);
            // Wakes the idle manager, which then sees the stop.
            let _ = jobs_tx.send(crate::service::Job::wake());
            m.join().map_err(|_| anyhow::anyhow!("the array manager thread panicked"))
        });
        (res, managed.transpose().map(|m| m.or(arr)))
    });
    notify_stopping();
    let _ = watcher.join();
    if let Some(Listener::Unix(_, p)) = &listener {
        let _ = std::fs::remove_file(p);
    }
    // The devices go first (the kernel flushes them through the exports).
    if let Some(u) = ublk.as_ref().filter(|_| crate::ublk_export::handing_over()) {
        crate::ublk_export::leave_all(u, &name);
    } else if let Some(u) = &ublk {
        for s in &served {
            crate::devlinks::unlink_volume(&s.link, &s.by_id(&array_uuid));
        }
        crate::ublk_export::stop_all(u, &name)?;
    }
    let arr = arr?;
    res.context("the listening socket failed")?;
    for (i, vol_name) in exports.volumes() {
        let Some(v) = exports.list().iter().find(|e| e.volume == i).map(|e| e.export.volume()) else { continue };
        // A reshape may have grown it meanwhile, never shrunk it.
        debug_assert!(i > 0 || v.capacity() >= capacity);
        v.flush().context("final flush failed")?;
        if let Some(c) = v.cache() {
            let st = c.stats();
            let of = if served.len() > 1 { format!(" of volume '{vol_name}'") } else { String::new() };
            log!(
                "uraid serve: cache{of} {}: {} writes ({} merged into dirty lines), {} written back ({} whole stripes), \
                 read hits {} of {} ({:.1}%), writers held at the dirty limit {} times",
                st.mode.name(),
                st.writes,
                st.merged,
                st.writebacks,
                st.full_lines,
                st.read_hits,
                st.read_hits + st.read_misses,
                st.hit_ratio * 100.0,
                st.throttled
            );
            if st.journal_records + st.stripe_records + st.rows_records > 0 {
                log!(
                    "uraid serve: journal: {} records of writes, {} whole stripes and {} stripe rows recorded before their member writes",
                    st.journal_records, st.stripe_records, st.rows_records
                );
            }
        }
    }
    drop(server);
    // The last counters, kept if the stop fails (the file is stale once
    // this process is gone).
    let publisher = publisher.map(|p| p.finish());
    if let Some(arr) = arr {
        arr.stop()?;
    }
    if let Some(p) = publisher {
        p.remove();
    }
    log!("uraid serve: stopped cleanly");
    Ok(())
}

/// One volume of the served array, as its exports name it: a Matrix
/// array's volumes are each served on their own, the first as the array
/// (NBD export NAME, /dev/uraid/NAME) and every further one as
/// NAME/VOLUME over NBD and /dev/uraid/NAME:VOLUME as a ublk device
/// (neither an array nor a volume name holds `/` or `:`).
struct ServedVolume {
    /// Its index in the volume table (0: the first).
    index: usize,
    /// Its name in the volume table (the array's for a temporary array).
    name: String,
    /// Its UUID as `uraid status` prints it (empty for a temporary array).
    uuid: String,
    /// Its NBD export name.
    export: String,
    /// Its link's name in /dev/uraid.
    link: String,
    /// What `nbdinfo --list` shows of it.
    description: String,
    /// The array has several volumes.
    matrix: bool,
}

impl ServedVolume {
    /// The UUIDs its /dev/disk/by-id/uraid-UUID links name: the array's
    /// (`array_uuid`, the first volume only, as before Matrix volumes were
    /// served) and, a Matrix array's, its own.
    fn by_id(&self, array_uuid: &str) -> Vec<String> {
        let first = (self.index == 0).then(|| array_uuid.to_string());
        let own = self.matrix.then(|| self.uuid.clone());
        first.into_iter().chain(own).filter(|u| !u.is_empty()).collect()
    }
}

/// Every volume of array `name` (`arr`; `None` for a temporary array,
/// whose one volume is `first`), with its volume.
fn served_volumes(name: &str, arr: Option<&array::Array>, first: &Arc<uraid_core::Volume>) -> (Vec<ServedVolume>, Vec<Arc<uraid_core::Volume>>) {
    let describe = |v: &uraid_core::Volume| {
        format!(
            "uraid RAID {} over {} members, chunk {}",
            v.geometry().level().number(),
            v.members().len(),
            uraid_core::units::fmt_size(v.geometry().chunk())
        )
    };
    let Some(arr) = arr else {
        let only = ServedVolume { index: 0, name: name.to_string(), uuid: String::new(), export: name.to_string(), link: name.to_string(), description: describe(first), matrix: false };
        return (vec![only], vec![first.clone()]);
    };
    let entries = arr.volume_entries();
    let matrix = entries.len() > 1;
    entries
        .iter()
        .zip(arr.volumes())
        .enumerate()
        .map(|(i, (e, v))| {
            let (export, link) = if i == 0 { (name.to_string(), name.to_string()) } else { (format!("{name}/{}", e.name), format!("{name}:{}", e.name)) };
            let description = match matrix {
                true => format!("{}, volume '{}' ({} of {}) of array '{name}'", describe(v), e.name, i + 1, entries.len()),
                false => describe(v),
            };
            let uuid = uraid_core::control::superblock::fmt_uuid(&e.uuid);
            (ServedVolume { index: i, name: e.name.clone(), uuid, export, link, description, matrix }, v.clone())
        })
        .unzip()
}

/// The exports of every volume of `served`: its NBD export on `server`
/// (when there is a listener; its URI by `uri_of`) and its ublk device
/// (`ublk`, one per volume in the same order). Errors: the NBD server
/// lost an export (a bug).
fn exports_of(
    served: &[ServedVolume],
    server: Option<&Server>,
    ublk: Option<&[uraid_ublk::UblkExport]>,
    uri_of: &dyn Fn(&str) -> String,
) -> Result<Vec<crate::service::exports::Exported>> {
    let mut list = Vec::new();
    for (i, s) in served.iter().enumerate() {
        let mut of: Vec<Arc<dyn uraid_core::export::Export>> = Vec::new();
        if let Some(server) = server {
            of.push(Arc::new(server.handle(&s.export, &uri_of(&s.export)).context("the NBD server lost its export")?));
        }
        if let Some(u) = ublk.and_then(|u| u.get(i)) {
            of.push(Arc::new(u.clone()));
        }
        list.extend(of.into_iter().map(|export| crate::service::exports::Exported { volume: s.index, volume_name: s.name.clone(), export }));
    }
    Ok(list)
}

/// The group id of `g`, a group name or a number.
fn group_id(g: &str) -> Result<libc::gid_t> {
    if let Ok(n) = g.parse::<libc::gid_t>() {
        return Ok(n);
    }
    let c = std::ffi::CString::new(g).map_err(|_| anyhow::anyhow!("--socket-group '{g}' holds a NUL byte"))?;
    // SAFETY: getgrnam with a valid NUL-terminated name; the result is read
    // at once, before any other call could reuse its static storage (this
    // runs before any thread of ours calls getgr*).
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if gr.is_null() {
        bail!("--socket-group '{g}': no such group (give a name from /etc/group or a number)");
    }
    // SAFETY: non-null result of getgrnam points at a valid struct group.
    Ok(unsafe { (*gr).gr_gid })
}

/// Tells the service manager (systemd, Type=notify) that the array is
/// assembled and exported, and starts the watchdog pings it asks for
/// (every half of WatchdogSec). Nothing happens outside systemd.
fn notify_ready(name: &str, uri: &str) {
    ready_to_parent();
    let status = format!("serving array '{name}' on {uri}");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&status)]);
    if let Some(every) = sd_notify::watchdog_enabled() {
        std::thread::spawn(move || loop {
            std::thread::sleep(every / 2);
            if STOP.load(Ordering::Relaxed) {
                break;
            }
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        });
    }
}

/// The write end of the pipe the parent of a `--fork`ed server waits on
/// (-1: not forked, or already told).
static READY_FD: AtomicI32 = AtomicI32::new(-1);

/// `serve --fork`: forks; the parent waits until the child serves (then
/// exits 0) or ends without serving (exits 1; the child said why on
/// stderr); the child returns and goes on. Called before any thread
/// starts: fork copies the calling thread only. Errors: the pipe or the
/// fork fails (no memory, too many processes).
fn fork_until_ready() -> Result<()> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two new descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("--fork: cannot make a pipe");
    }
    // SAFETY: no other thread runs yet (see above), so the child is a
    // whole copy of this process.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()).context("--fork: cannot fork"),
        0 => {
            // SAFETY: the read end is this process's own and used nowhere else.
            unsafe { libc::close(fds[0]) };
            READY_FD.store(fds[1], Ordering::Relaxed);
            Ok(())
        }
        _ => {
            // SAFETY: both ends are this process's own; the write end is
            // closed so that the read ends when the child does.
            let mut rd = unsafe {
                libc::close(fds[1]);
                std::fs::File::from_raw_fd(fds[0])
            };
            let mut b = [0u8; 1];
            std::process::exit(if rd.read_exact(&mut b).is_ok() { 0 } else { 1 });
        }
    }
}

/// Tells the parent of a `--fork`ed server that the array is served.
fn ready_to_parent() {
    let fd = READY_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: `fd` is the pipe's write end, owned here alone (swapped
        // out above); the File closes it.
        let mut w = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let _ = std::io::Write::write_all(&mut w, b"1");
    }
}

/// Tells the service manager that the array is stopping.
fn notify_stopping() {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping, sd_notify::NotifyState::Status("stopping: flushing and marking the members clean")]);
}

/// The lines `serve` prints for the kernel's client: the nbd-client
/// command (Debian's 3.24 syntax, run as printed by tests/vm/nbd_client.sh)
/// for the export at `uri` (`nbd[s]://HOST:PORT/NAME` or
/// `nbd[s]+unix:///NAME?socket=PATH`). With `cert` (TLS certificates) the
/// command verifies the server against `CA.pem` and, with `client_cert`
/// (the server checks clients against --tls-ca), presents `CLIENT-CERT.pem`
/// and `CLIENT-KEY.pem`: placeholders the user fills in, explained on the
/// next line. nbd-client has no TLS-PSK (`psk`): then the line says so.
fn nbd_client_hint(name: &str, uri: &str, cert: bool, client_cert: bool, psk: bool) -> Vec<String> {
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
