//! `uraid serve`: export an array's volumes over NBD (and ublk) until
//! SIGINT/SIGTERM. [`run`] goes by phase: the settings ([`setup`]), the
//! array opened, the exports started (NBD: [`nbd_export`]; ublk:
//! `crate::ublk_export`), what is served announced, the service run
//! ([`running`]: manager, control socket, metrics, console), the stop.
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

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use uraid_core::control::array;
use uraid_core::io::member::MemberKind;
use uraid_core::units::parse_size;
use uraid_core::{MemberSpec, Volume};

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
    /// Read each member drive's health (smartctl --json) this often: 5m,
    /// 1h, or 0 for never (default: the config's `[monitor]
    /// health-interval`, else 5m). Events: HealthWarning,
    /// TemperatureHigh, WearOut, SpareLow, MediaErrors.
    #[arg(long, value_name = "DURATION")]
    health_interval: Option<String>,
    /// Corrected read errors a member may have before it is failed
    /// (md's max_read_errors): a read error on one member of a redundant
    /// array is repaired from the other copy or the parity and the member
    /// stays, until this many within md's window (the count halves every
    /// hour). Default: the config's `max-read-errors`, else 20.
    #[arg(long, value_name = "N")]
    max_read_errors: Option<u32>,
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

mod nbd_export;
mod notify;
mod running;
mod setup;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
    wake();
}

use crate::service::wake::wake;

fn install_signal_handlers() {
    crate::service::wake::make_pipe();
    crate::service::reload::install();
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

/// `uraid serve` (see the module docs). Errors: a setting that cannot be
/// used, an array that cannot be assembled, an export that cannot start
/// (nothing is served then), the final flush or stop.
pub(crate) fn run(mut a: ServeArgs) -> Result<()> {
    // A client that hangs up must never end the server (its replies go
    // with MSG_NOSIGNAL too; this also covers stdout and stderr).
    // SAFETY: setting a signal disposition; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    if a.fork {
        notify::fork_until_ready()?;
    }
    let mut set = setup::settings(&mut a)?;
    // The running server hands over first (said before anything else
    // when nothing serves the array, or serves it without ublk).
    a.ublk |= a.takeover;
    let taken = if a.takeover { Some(crate::service::takeover::take_over(&a.members)?) } else { None };
    // No ublk here: said before the array is touched, never served another way.
    if a.ublk {
        crate::ublk_export::check()?;
    }
    let (name, volume, arr) = open(&set.specs, &a.chunk)?;
    let started = start_exports(&a, &mut set, &name, arr.as_ref(), &volume)?;
    install_signal_handlers();
    announce(&a, &name, &volume, &started);
    let capacity = volume.capacity();
    // The live counters for `uraid status` in another process. The caches
    // are shared, not the volumes (see below).
    let publisher = arr.as_ref().map(publish);
    // From here the server alone holds the volume, so that after a spare
    // takes over a role the old volume's Arc count tells when every
    // connection has moved to the new one.
    drop(volume);
    let ran = running::run(&a, set, &name, arr, &started, taken)?;
    stop(&name, started, ran, capacity, publisher)
}

/// Opens what `specs` name: a temporary RAID 0 of `chunk` over `mem:`
/// drives (named "mem"), else the array they form, assembled. Returns its
/// name, its first volume and the array (`None`: temporary). Errors: a
/// member that is not a uraid member, an array that cannot be assembled.
fn open(specs: &[MemberSpec], chunk: &str) -> Result<(String, Arc<Volume>, Option<array::Array>)> {
    if specs.iter().all(|s| matches!(s, MemberSpec::Mem(_) | MemberSpec::Null(_))) {
        let members = array::open_members(specs, true, true)?;
        let (v, _) = array::temporary(members, parse_size(chunk, "chunk size")?)?;
        return Ok(("mem".to_string(), v, None));
    }
    for s in specs {
        if !array::examine(s)?.is_array_device() {
            bail!("{s} is not a uraid member; create an array first (uraid create --level 0 --name NAME MEMBER...)");
        }
    }
    let arr = array::assemble(specs)?;
    // What the assemble did, as `uraid assemble` prints it (the
    // manager also sends each as an AssembleWarning event).
    for w in arr.warnings() {
        eprintln!("uraid serve: warning: {w}");
    }
    Ok((arr.name().to_string(), arr.volume().clone(), Some(arr)))
}

/// The exports of a served array, started.
struct Started {
    /// Every volume (a Matrix array's each by its own exports).
    served: Vec<ServedVolume>,
    /// Their capacities, bytes, in the same order.
    capacities: Vec<u64>,
    /// The NBD listener and server.
    nbd: nbd_export::Nbd,
    /// One /dev/ublkbN per volume, in the order of the volume table.
    ublk: Option<Vec<uraid_ublk::UblkExport>>,
    /// Where each volume is served (URIs, devices).
    served_on_each: Vec<Vec<String>>,
    /// The first volume's NBD URI (empty without a listener).
    uri: String,
    /// The array's UUID (empty for a temporary array).
    array_uuid: String,
}

/// Starts the exports of every volume of `arr` (`first` alone for a
/// temporary array): NBD where `a` says, ublk with `--ublk`, the
/// /dev/uraid links. Errors: a listener or device that cannot start.
fn start_exports(a: &ServeArgs, set: &mut setup::Settings, name: &str, arr: Option<&array::Array>, first: &Arc<Volume>) -> Result<Started> {
    let (served, vols) = served_volumes(name, arr, first);
    let offers = served.iter().zip(&vols).map(|(s, v)| nbd_export::Offer { name: s.export.clone(), description: s.description.clone(), volume: v.clone() });
    let nbd = nbd_export::Nbd::start(a, name, set.tcp, set.tls.take(), set.socket_gid, set.budgets, offers.collect())?;
    let array_uuid = arr.map(|x| x.uuid()).unwrap_or_default();
    let ublk: Option<Vec<uraid_ublk::UblkExport>> = match a.ublk {
        true => {
            let targets: Vec<crate::ublk_export::Target> = served
                .iter()
                .zip(&vols)
                .map(|(s, v)| crate::ublk_export::Target { volume: s.name.clone(), uuid: s.uuid.clone(), vol: v.clone() })
                .collect();
            Some(crate::ublk_export::start_all(name, &array_uuid, &targets, a.read_only, a.ublk_id)?)
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
    let served_on_each: Vec<Vec<String>> = served
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let on = nbd.listens().then(|| nbd.uri_of(&s.export));
            on.into_iter().chain(ublk.iter().filter_map(|u| u.get(i)).map(|u| u.bdev().to_string())).collect()
        })
        .collect();
    let uri = nbd.uri_of(name);
    let capacities = vols.iter().map(|v| v.capacity()).collect();
    Ok(Started { served, capacities, nbd, ublk, served_on_each, uri, array_uuid })
}
/// Prints what is served where, and how to put a filesystem on it.
fn announce(a: &ServeArgs, name: &str, volume: &Volume, st: &Started) {
    if let Some(loopback) = st.nbd.open_tcp {
        log!(
            "WARNING: clients of {} do not authenticate: every user of this machine{} can connect and read and \
             write the array. Give --tls-psk FILE, or --tls-verify-peer --tls-ca CA.pem with --tls-cert and --tls-key \
             (or tls-psk / tls-ca in uraid.conf), or serve on the unix socket (mode 0600, root only)",
            st.uri,
            if loopback { "" } else { ", and every host that can reach it," }
        );
    }
    let ro = if a.read_only { ", read-only" } else { "" };
    let description = &st.served[0].description;
    println!("serving '{name}' ({description}, {} bytes{ro}) on {}", volume.capacity(), st.served_on_each[0].join(" and "));
    for ((s, cap), on) in st.served.iter().zip(&st.capacities).zip(&st.served_on_each).skip(1) {
        println!("serving volume '{}' of '{name}' ({}, {cap} bytes{ro}) on {}", s.name, s.description, on.join(" and "));
    }
    let kinds: Vec<String> =
        volume.raid().members().iter().map(|m| format!("{}{}", m.name(), if m.kind() == MemberKind::Mem { " (in RAM)" } else { "" })).collect();
    println!("members: {}", kinds.join(" "));
    // What a client gives: with TLS-PSK, a user and a file with its key.
    let client_uri = match &a.tls_psk {
        Some(p) => {
            println!("clients authenticate as a user of {}: USER below, and FILE holding that user's line (mode 0600)", p.display());
            format!("{}?tls-psk-file=FILE", st.uri.replacen("://", "://USER@", 1))
        }
        None => st.uri.clone(),
    };
    if let Some(c) = volume.cache() {
        let cfg = c.config();
        println!("cache: {} {}, dirty limit {}", cfg.mode.name(), uraid_core::units::fmt_size(cfg.size), uraid_core::units::fmt_size(cfg.dirty_limit));
        if cfg.mode == uraid_core::cache::CacheMode::WriteBack {
            println!("WARNING: {}", uraid_core::control::array::WRITEBACK_WARNING);
        }
    }
    for (s, u) in st.served.iter().zip(st.ublk.iter().flatten()) {
        let (what, dir) = if s.index == 0 { ("it".to_string(), name.to_string()) } else { (format!("volume '{}'", s.name), format!("{name}-{}", s.name)) };
        println!("to put a filesystem on {what}: mkfs.ext4 {0}   # first time only\n  mkdir -p /mnt/{dir} && mount {0} /mnt/{dir}", u.bdev());
    }
    if st.nbd.listens() {
        println!("to put a filesystem on it (kernel without nbd: FUSE + a loop device):");
        println!("  mkdir -p /mnt/{name}-nbd /mnt/{name} && nbdfuse /mnt/{name}-nbd '{client_uri}' &");
        println!("  LOOP=$(losetup -f --show --direct-io=on /mnt/{name}-nbd/nbd)");
        println!("  mkfs.ext4 $LOOP    # first time only");
        println!("  mount $LOOP /mnt/{name}");
        for line in nbd_export::nbd_client_hint(name, &st.uri, a.tls_cert.is_some(), a.tls_ca.is_some(), a.tls_psk.is_some()) {
            println!("{line}");
        }
    }
    println!("stop with Ctrl-C (SIGINT) or SIGTERM: requests in flight finish, members are flushed and marked clean.");
}

/// Starts publishing the live counters of `arr`'s volumes (see
/// [`crate::runstate`]).
fn publish(arr: &array::Array) -> crate::runstate::Publisher {
    let sources = arr
        .volume_entries()
        .iter()
        .zip(arr.volumes())
        .map(|(e, v)| crate::runstate::Source { name: e.name.clone(), uuid: uraid_core::control::superblock::fmt_uuid(&e.uuid), cache: v.cache().cloned() })
        .collect();
    crate::runstate::Publisher::start(arr.name(), arr.uuid(), sources)
}

/// The stop, once the service has ended (`ran`): the ublk devices go
/// (or are left for a takeover), every served volume is flushed and its
/// cache's counters logged, the array is stopped clean (`capacity`: the
/// first volume's at the start, bytes). Errors: the listening socket
/// failed, the manager panicked, a flush or the array's stop failed.
fn stop(name: &str, started: Started, ran: running::Ran, capacity: u64, publisher: Option<crate::runstate::Publisher>) -> Result<()> {
    started.nbd.remove_socket();
    // The devices go first (the kernel flushes them through the exports).
    if let Some(u) = started.ublk.as_ref().filter(|_| crate::ublk_export::handing_over()) {
        crate::ublk_export::leave_all(u, name);
    } else if let Some(u) = &started.ublk {
        for s in &started.served {
            crate::devlinks::unlink_volume(&s.link, &s.by_id(&started.array_uuid));
        }
        crate::ublk_export::stop_all(u, name)?;
    }
    let arr = ran.arr?;
    ran.res.context("the listening socket failed")?;
    for (i, vol_name) in ran.exports.volumes() {
        let Some(v) = ran.exports.list().iter().find(|e| e.volume == i).map(|e| e.export.volume()) else { continue };
        // A reshape may have grown it meanwhile, never shrunk it.
        debug_assert!(i > 0 || v.capacity() >= capacity);
        v.flush().context("final flush failed")?;
        let of = if started.served.len() > 1 { format!(" of volume '{vol_name}'") } else { String::new() };
        log_cache(&v, &of);
    }
    drop(started);
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

/// Logs the counters of `v`'s cache, if it has one (`of`: which volume).
fn log_cache(v: &Volume, of: &str) {
    let Some(c) = v.cache() else { return };
    let st = c.stats();
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
            v.raid().geometry().level().number(),
            v.raid().members().len(),
            uraid_core::units::fmt_size(v.raid().geometry().chunk())
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

/// The exports of every volume of `served`: its NBD export (when there
/// is a listener) and its ublk device (`ublk`, one per volume in the
/// same order), as the service sees them. Errors: the NBD server lost an
/// export (a bug).
fn exports_of(served: &[ServedVolume], nbd: &nbd_export::Nbd, ublk: Option<&[uraid_ublk::UblkExport]>) -> Result<Vec<crate::service::exports::Exported>> {
    let mut list = Vec::new();
    for (i, s) in served.iter().enumerate() {
        let mut of: Vec<Arc<dyn uraid_core::export::Export>> = Vec::new();
        of.extend(nbd.export(&s.export)?);
        if let Some(u) = ublk.and_then(|u| u.get(i)) {
            of.push(Arc::new(u.clone()));
        }
        list.extend(of.into_iter().map(|export| crate::service::exports::Exported { volume: s.index, volume_name: s.name.clone(), export }));
    }
    Ok(list)
}
