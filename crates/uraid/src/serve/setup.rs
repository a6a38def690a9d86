//! What `uraid serve` runs with, checked before the array is touched:
//! the buffer budgets, the settings of an array named in the config
//! (where no flag is given), the maintenance rates and schedule, where
//! events go, the console's address and certificate, and the export's
//! TLS and TCP address.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use uraid_core::units::parse_size;
use uraid_core::MemberSpec;

use super::nbd_export::{self, Tls};
use super::ServeArgs;
use crate::common::specs;
use crate::service::events::Sinks;

/// Default scrub rate of a served array, bytes/s (100 MB/s).
const DEFAULT_SCRUB_RATE: u64 = 100_000_000;

/// `serve`'s settings, from its flags and the config.
pub(super) struct Settings {
    /// The members.
    pub specs: Vec<MemberSpec>,
    /// Buffer memory of one connection and of all together, bytes.
    pub budgets: (u64, u64),
    /// The unix socket's group.
    pub socket_gid: Option<libc::gid_t>,
    /// Background rebuild rate limit, bytes/s.
    pub rebuild_rate: Option<u64>,
    /// Scrub rate limit, bytes of a volume per second.
    pub scrub_rate: Option<u64>,
    /// The scheduled check's interval.
    pub scrub_every: Option<Duration>,
    /// Where events go.
    pub sinks: Sinks,
    /// The console's HTTPS configuration (with --tls-cert and --tls-key).
    pub console_tls: Option<Arc<rustls::ServerConfig>>,
    /// The export's TLS.
    pub tls: Option<Tls>,
    /// The TCP address to serve on.
    pub tcp: Option<std::net::SocketAddr>,
    /// Seconds between two health polls of the member drives (0: none).
    pub health_interval: u64,
    /// The health events' limits.
    pub health_limits: crate::service::health::Limits,
    /// Read errors a member may have before it is failed (`--max-read-errors`).
    pub max_read_errors: u32,
}

/// Checks `a` and completes it from the config (see the module docs).
/// Errors: a flag or config value that cannot be used (the message names
/// it and says what to give), an unsafe run directory, an unreadable
/// certificate.
pub(super) fn settings(a: &mut ServeArgs) -> Result<Settings> {
    let specs = specs(&a.members)?;
    let budgets = buffer_budgets(a)?;
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
    if let Some(c) = &mine {
        from_config(a, c);
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
        Some(s) => Some(Duration::from_secs(crate::conf::parse_duration(s).context("--scrub-every")?)),
        None => mine.as_ref().and_then(|c| c.scrub_every).map(Duration::from_secs),
    };
    let mon = conf.monitor.clone();
    let sinks = Sinks {
        program: a.program.clone().or_else(|| mon.as_ref().and_then(|m| m.program.clone()).map(PathBuf::from)),
        mail: a.mail.clone().or_else(|| mon.as_ref().and_then(|m| m.mail.clone())),
        mail_command: a.mail_command.clone().or_else(|| mon.as_ref().map(|m| m.mail_command.clone())),
    };
    // The console's address and certificate, checked before anything is
    // assembled: HTTPS with the export's certificate when one is given
    // (without the export's client certificates: a browser logs in with
    // the token), and loopback only without.
    let console_tls = match (&a.console, &a.tls_cert, &a.tls_key) {
        (Some(_), Some(c), Some(k)) => Some(nbd_export::console_tls(c, k)?),
        _ => None,
    };
    if let Some(addr) = &a.console {
        crate::service::console::parse_addr(addr, console_tls.is_some())?;
        if let Some(t) = &a.console_token {
            crate::service::console::check_token(t)?;
        }
    }
    let tls = nbd_export::tls(a)?;
    let tcp = a.tcp.as_deref().map(|addr| nbd_export::tcp_addr(addr, a, tls.is_some())).transpose()?;
    let health_interval = match a.health_interval.as_deref() {
        Some(s) => crate::conf::parse_health_interval(s).context("--health-interval")?,
        None => mon.as_ref().and_then(|m| m.health_interval).unwrap_or(crate::service::health::DEFAULT_INTERVAL),
    };
    let health_limits = crate::service::health::Limits {
        temperature: mon.as_ref().and_then(|m| m.temperature_warn),
        wear: mon.as_ref().and_then(|m| m.wear_warn),
        spare: mon.as_ref().and_then(|m| m.spare_warn),
    };
    let max_read_errors = a
        .max_read_errors
        .or_else(|| mine.as_ref().and_then(|c| c.max_read_errors))
        .unwrap_or(uraid_core::raid::read_errors::DEFAULT_MAX_READ_ERRORS);
    Ok(Settings { specs, budgets, socket_gid, rebuild_rate, scrub_rate, scrub_every, sinks, console_tls, tls, tcp, health_interval, health_limits, max_read_errors })
}

/// `--conn-buffer` and `--buffer-memory` in bytes. Errors: a size that
/// does not parse, or budgets that cannot hold the largest request or
/// every connection's reserve.
fn buffer_budgets(a: &ServeArgs) -> Result<(u64, u64)> {
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
    Ok((conn_buffer, buffer_memory))
}

/// Takes the settings of the array's config entry `c` where `a` gives
/// no flag.
fn from_config(a: &mut ServeArgs, c: &crate::conf::ArrayConf) {
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
