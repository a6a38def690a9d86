//! `uraid monitor --scan` (also `uraid monitor` without NAME) and
//! `uraid monitor --oneshot`: the watcher of the configured arrays, as
//! `mdadm --monitor --scan` and ZFS's zed are of theirs.
//!
//! The daemon looks every `--delay` seconds (default 2) at the arrays of
//! the configuration file (its `[[array]]` tables, read again at each
//! look) and at every array served here (the control sockets in the run
//! directory). It follows each served one (its events, as `uraid monitor
//! NAME` prints them, the events kept from before included unless
//! `--new-only`), reports at its own start the ones degraded
//! (DegradedArray), reports a configured array that is not served and a
//! followed one that stops or whose process is gone (DeviceDisappeared,
//! mdadm's name), follows arrays that start later, and stays up until it
//! is killed. A look costs a read of the configuration, a listing of the
//! run directory and a connection attempt per array not followed.
//!
//! The events it finds itself (DeviceDisappeared) go, besides its output
//! and `--program`, to the configuration's `[monitor]` program and mail
//! address: no serving process can report them. The events of a served
//! array reach those from the serving process already.
//!
//! `--oneshot` looks once: a line per array that needs attention (a
//! degraded, rebuilding or failed volume; a configured array not served),
//! and the exit status 1 when there is one, 0 when every array watched is
//! served and healthy (also when there is none), for cron.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use clap::Args;

use crate::conf::{self, Config};
use crate::devlinks;
use crate::service::client::{self, Client};
use crate::service::events::{self, KEPT};
use crate::service::proto::{Command, Event, Reply};

#[derive(Args)]
pub(crate) struct MonitorArgs {
    /// The served arrays to follow until they stop (default: --scan).
    #[arg(value_name = "NAME")]
    pub(crate) arrays: Vec<String>,
    /// Watch the arrays of the config and every served one, for ever (as
    /// mdadm --monitor --scan; the default without NAME): degraded ones and
    /// configured ones not served are reported (DegradedArray,
    /// DeviceDisappeared), arrays that start later are followed.
    #[arg(long, conflicts_with = "arrays")]
    pub(crate) scan: bool,
    /// Seconds between two looks for arrays that started or stopped
    /// (mdadm's --delay), 0.1 to 3600.
    #[arg(long, default_value = "2", value_parser = parse_delay)]
    pub(crate) delay: f64,
    /// Look once, print what needs attention (DegradedArray, and
    /// DeviceDisappeared for a configured array not served) and exit: 0 when
    /// every array watched is served and healthy, 1 otherwise (for cron).
    #[arg(long)]
    pub(crate) oneshot: bool,
    /// Send a TestMessage through every channel of each array (log,
    /// program, mail and monitors), then go on (or exit with --oneshot).
    #[arg(long)]
    pub(crate) test: bool,
    /// Also run this program on each event, as `PROGRAM EVENT ARRAY [MEMBER]`.
    #[arg(long)]
    pub(crate) program: Option<std::path::PathBuf>,
    /// Print only the events from now on, not those kept from before.
    #[arg(long)]
    pub(crate) new_only: bool,
}

/// One event as a line: `2026-11-25T16:40:01+01:00 Fail data /dev/loop3: ...`
/// (local time, ISO 8601).
pub(crate) fn event_line(e: &Event) -> String {
    let when = crate::common::local_iso8601((e.unix_ms / 1000) as i64);
    format!("{when} {} {}{}: {}", e.event, e.array, e.member.as_deref().map(|m| format!(" {}", crate::conf::quote(m))).unwrap_or_default(), e.detail)
}

/// `uraid monitor NAME...`: follows the events of those served arrays
/// until they stop (mdadm --monitor); without NAME, with --scan or
/// --oneshot, [`run`].
pub(crate) fn monitor(a: MonitorArgs) -> Result<()> {
    if a.scan || a.oneshot || a.arrays.is_empty() {
        return run(&a);
    }
    let names = a.arrays.clone();
    let mut clients = Vec::new();
    for n in &names {
        match Client::connect(n) {
            Some(c) => clients.push(c),
            None => bail!("array '{n}' is not served (no control socket answers at {})", client::ctl_path(n).display()),
        }
    }
    if a.test {
        for n in &names {
            if let Some(c) = Client::connect(n) {
                c.call(Command::TestMessage, &mut |_| {})?;
            }
        }
    }
    let (tx, rx) = std::sync::mpsc::channel::<Option<Event>>();
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    for c in clients {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = c.call(Command::Monitor, &mut |r: &Reply| {
                if let Some(e) = &r.event {
                    let _ = tx.send(Some(e.clone()));
                }
            });
            let _ = tx.send(None);
        });
    }
    drop(tx);
    let mut open = names.len();
    while open > 0 {
        match rx.recv() {
            Ok(Some(e)) => {
                if a.new_only && e.unix_ms < started {
                    continue;
                }
                {
                    use std::io::Write as _;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{}", event_line(&e))?;
                    out.flush()?;
                }
                if let Some(p) = &a.program {
                    let mut cmd = std::process::Command::new(p);
                    cmd.arg(&e.event).arg(&e.array);
                    if let Some(m) = &e.member {
                        cmd.arg(m);
                    }
                    if let Err(err) = cmd.status() {
                        eprintln!("uraid monitor: cannot run {}: {err}", p.display());
                    }
                }
            }
            Ok(None) => open -= 1,
            Err(_) => break,
        }
    }
    println!("uraid monitor: every array followed has stopped");
    Ok(())
}

/// Parses `--delay`: seconds between two looks, 0.1 to 3600 (fractions
/// allowed).
pub(crate) fn parse_delay(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if (0.1..=3600.0).contains(&d) => Ok(d),
        _ => Err(format!("'{s}' is not a delay in seconds from 0.1 to 3600, like 2 or 0.5")),
    }
}

/// What the followers tell the main loop.
enum Msg {
    /// An event of a followed array.
    Event(Event),
    /// The follower of this array ended: `true` when its array announced
    /// its stop, `false` when the connection failed.
    Ended(String, bool),
}

/// `uraid monitor --scan`, `uraid monitor` without NAME, or `--oneshot`
/// (of NAMEs or of the arrays `--scan` watches).
///
/// Errors: the configuration does not parse at start; stdout closed; with
/// `--oneshot`, an array needs attention (after the lines that say which).
pub(crate) fn run(a: &MonitorArgs) -> Result<()> {
    let cfg = conf::load()?;
    if a.test {
        for n in watched(a, &cfg) {
            if let Some(c) = Client::connect(&n) {
                c.call(Command::TestMessage, &mut |_| {})?;
            }
        }
    }
    if a.oneshot {
        return oneshot(a, &cfg);
    }
    daemon(a, cfg)
}

/// The names of the arrays watched: the NAMEs given, else those of the
/// configuration and those served here, each once, sorted.
fn watched(a: &MonitorArgs, cfg: &Config) -> Vec<String> {
    if !a.arrays.is_empty() {
        return a.arrays.clone();
    }
    let mut names: Vec<String> = cfg.arrays.iter().map(|e| e.name.clone()).chain(client::served_names()).collect();
    names.sort();
    names.dedup();
    names
}

/// Whether the array `name` is one the configuration lists, or was named
/// on the command line: its absence is worth reporting.
fn expected(a: &MonitorArgs, cfg: &Config, name: &str) -> bool {
    a.arrays.iter().any(|n| n == name) || cfg.arrays.iter().any(|e| e.name == name)
}

/// What needs attention in a served array's status (the control socket's
/// `status` result): one description per volume degraded, rebuilding or
/// failed.
fn troubles(status: &serde_json::Value) -> Vec<String> {
    status["array"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let state = v["state"].as_str().unwrap_or("");
            matches!(state, "degraded" | "rebuilding" | "failed").then(|| format!("volume '{}' is {state}", v["name"].as_str().unwrap_or("")))
        })
        .collect()
}

/// Why the array `name` is reported not served, for its DeviceDisappeared.
fn not_served(name: &str) -> String {
    let ctl = client::ctl_path(name);
    if ctl.exists() {
        format!("its control socket {} does not answer: the process that served it is gone; start it again with 'uraid serve {name}'", ctl.display())
    } else {
        format!("it is not served (no control socket at {}); start it with 'uraid serve {name}' or 'uraid scan --assemble'", ctl.display())
    }
}

/// An event this monitor found itself, dated now.
fn own_event(event: &str, array: &str, detail: String) -> Event {
    let unix_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    Event { unix_ms, event: event.to_string(), array: array.to_string(), member: None, detail }
}

/// Prints event `e` and runs `--program` on it; an event of this monitor
/// (`own`) goes to the configuration's `[monitor]` program and mail too.
/// Errors: stdout is closed.
fn report(a: &MonitorArgs, cfg: &Config, e: &Event, own: bool) -> Result<()> {
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", event_line(e))?;
        out.flush()?;
    }
    if let Some(p) = &a.program {
        events::run_program(p, e);
    }
    if let (true, Some(m)) = (own, &cfg.monitor) {
        if let Some(p) = &m.program {
            events::run_program(&PathBuf::from(p), e);
        }
        if let Some(to) = &m.mail {
            let line = format!("{} event on array {}: {}", e.event, e.array, e.detail);
            events::send_mail(&m.mail_command, to, e, &line);
        }
    }
    Ok(())
}

/// `--oneshot`: one look, a line per array that needs attention.
fn oneshot(a: &MonitorArgs, cfg: &Config) -> Result<()> {
    let names = watched(a, cfg);
    if names.is_empty() {
        eprintln!("uraid monitor: no array in {} and none served here: nothing to watch", conf::path().display());
        return Ok(());
    }
    let mut attention = Vec::new();
    for n in &names {
        let found = match Client::connect(n) {
            Some(c) => match c.call(Command::Status, &mut |_| {}) {
                Ok(v) => troubles(&v).into_iter().map(|t| ("DegradedArray", t)).collect(),
                Err(e) => vec![("DeviceDisappeared", format!("its status cannot be read: {e:#}"))],
            },
            None => vec![("DeviceDisappeared", not_served(n))],
        };
        for (event, detail) in found {
            println!("{event} event on {n}: {detail}");
            if let Some(p) = &a.program {
                events::run_program(p, &own_event(event, n, detail));
            }
            if !attention.contains(n) {
                attention.push(n.clone());
            }
        }
    }
    if !attention.is_empty() {
        bail!("{} of the {} arrays watched need attention: {}", attention.len(), names.len(), attention.join(", "));
    }
    Ok(())
}

/// Follows the events of the array `name` in a thread of its own, until
/// it stops or the connection fails.
fn follow(name: String, tx: Sender<Msg>) {
    std::thread::spawn(move || {
        let r = match Client::connect(&name) {
            Some(c) => c.call(Command::Monitor, &mut |r: &Reply| {
                if let Some(e) = &r.event {
                    let _ = tx.send(Msg::Event(e.clone()));
                }
            }),
            None => Err(anyhow!("no control socket answers")),
        };
        let _ = tx.send(Msg::Ended(name, r.is_ok()));
    });
}

/// The identity of an event, to print an event replayed twice once (the
/// kept events come again when a broken connection is made anew).
type EventKey = (u64, String, Option<String>, String);

/// The daemon: looks every `--delay` seconds, until killed.
fn daemon(a: &MonitorArgs, mut cfg: Config) -> Result<()> {
    let delay = Duration::from_secs_f64(a.delay);
    let started = own_event("", "", String::new()).unix_ms;
    let (tx, rx) = std::sync::mpsc::channel::<Msg>();
    let mut w = Watch::default();
    let mut conf_error: Option<String> = None;
    let mut ublk = UblkWatch::default();
    let mut first = true;
    loop {
        if !first {
            reload(&mut cfg, &mut conf_error);
        }
        w.look(a, &cfg, first, &tx)?;
        first = false;
        ublk.look(a, &cfg)?;
        let next = Instant::now() + delay;
        loop {
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Msg::Event(e)) => w.event(a, &cfg, e, started)?,
                Ok(Msg::Ended(n, stopped)) => w.ended(a, &cfg, n, stopped)?,
                // (Never disconnected: this loop holds a sender.)
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
    }
}

/// Reads the configuration again into `cfg`; one that cannot be read is
/// said once (`conf_error`: what was said last) and the one read before
/// is kept.
fn reload(cfg: &mut Config, conf_error: &mut Option<String>) {
    match conf::load() {
        Ok(c) => {
            *cfg = c;
            *conf_error = None;
        }
        Err(e) => {
            let msg = format!("{e:#}");
            if conf_error.as_ref() != Some(&msg) {
                eprintln!("uraid monitor: {msg}; the arrays of the configuration read before are watched meanwhile");
                *conf_error = Some(msg);
            }
        }
    }
}

/// What the monitor daemon knows of the watched arrays.
#[derive(Default)]
struct Watch {
    /// Followed arrays and the pid of the process serving each.
    followed: HashMap<String, u64>,
    /// Arrays whose process announced its stop while its control socket
    /// still answers (it is flushing): not followed again.
    stopping: HashMap<String, u64>,
    /// Arrays reported not served, until they are served again.
    absent: HashSet<String>,
    /// Followed arrays whose connection ended without a stop announced
    /// (their process stopped before it could say so, or is gone): the
    /// pid that served each.
    lost: HashMap<String, u64>,
    /// Per array, the events reported lately (to drop repeats).
    seen: HashMap<String, VecDeque<EventKey>>,
}

impl Watch {
    /// Looks at every watched array not followed yet: follows those now
    /// served (their troubles reported at the monitor's `first` look),
    /// reports those no longer served. Errors: a report that failed.
    fn look(&mut self, a: &MonitorArgs, cfg: &Config, first: bool, tx: &std::sync::mpsc::Sender<Msg>) -> Result<()> {
        let mut names = watched(a, cfg);
        names.extend(self.lost.keys().cloned());
        names.sort();
        names.dedup();
        for n in names {
            if self.followed.contains_key(&n) {
                continue;
            }
            let Some(c) = Client::connect(&n) else {
                self.stopping.remove(&n);
                let was = self.lost.remove(&n);
                if self.absent.insert(n.clone()) && (was.is_some() || expected(a, cfg, &n) || client::ctl_path(&n).exists()) {
                    let detail = match was {
                        Some(pid) => format!("it is no longer served: its uraid serve (pid {pid}) stopped or is gone"),
                        None => not_served(&n),
                    };
                    report(a, cfg, &own_event("DeviceDisappeared", &n, detail), true)?;
                }
                continue;
            };
            // Starting (Busy) or not answering: looked at again next time.
            let Ok(st) = c.call(Command::Status, &mut |_| {}) else { continue };
            let pid = st["pid"].as_u64().unwrap_or(0);
            if self.stopping.get(&n) == Some(&pid) {
                continue;
            }
            self.stopping.remove(&n);
            self.absent.remove(&n);
            self.lost.remove(&n);
            if first {
                for t in troubles(&st) {
                    report(a, cfg, &own_event("DegradedArray", &n, format!("{t} (at the monitor's start)")), false)?;
                }
            }
            follow(n.clone(), tx.clone());
            self.followed.insert(n, pid);
        }
        Ok(())
    }

    /// Reports event `e` of a followed array unless it was reported
    /// already (or, with `--new-only`, is older than the monitor's
    /// `started`, ms since the epoch).
    fn event(&mut self, a: &MonitorArgs, cfg: &Config, e: Event, started: u64) -> Result<()> {
        if a.new_only && e.unix_ms < started {
            return Ok(());
        }
        let key = (e.unix_ms, e.event.clone(), e.member.clone(), e.detail.clone());
        let keys = self.seen.entry(e.array.clone()).or_default();
        if keys.contains(&key) {
            return Ok(());
        }
        if keys.len() == 2 * KEPT {
            keys.pop_front();
        }
        keys.push_back(key);
        report(a, cfg, &e, false)
    }

    /// The connection to array `n` ended: after a stop announced
    /// (`stopped`), reported at once; else looked at again next time.
    fn ended(&mut self, a: &MonitorArgs, cfg: &Config, n: String, stopped: bool) -> Result<()> {
        let Some(pid) = self.followed.remove(&n) else { return Ok(()) };
        // A broken connection: the next look tells whether the
        // process is gone (reported then) or still serves.
        if !stopped {
            self.lost.insert(n, pid);
            return Ok(());
        }
        self.stopping.insert(n.clone(), pid);
        self.absent.insert(n.clone());
        let detail = format!("it is no longer served: its uraid serve (pid {pid}) stopped");
        report(a, cfg, &own_event("DeviceDisappeared", &n, detail), true)
    }
}

/// The ublk devices of served arrays (`RUN_DIR/NAME.ublk`) whose `uraid
/// serve` is gone: the kernel keeps such a device (user recovery) and
/// queues its I/O until a serve re-attaches. After the configuration's
/// `ublk-recovery-timeout` without one, the device is deleted so that its
/// I/O fails with EIO rather than waiting for ever
/// (DeviceDisappeared).
///
/// This lives in the monitor, not in `uraid serve`: a serve that cannot
/// assemble the array exits and systemd starts it again (a member slow to
/// appear at boot must not cost the mounted filesystem its device), and
/// once the serves stop coming back, the monitor is the process left to
/// count the time.
///
/// A device counts as without a server when the kernel reports it
/// quiesced (`UBLK_S_DEV_QUIESCED`), it is the device the record names
/// (its server pid is the record's) and that process is gone; the time
/// counts from the first look that saw it so. It is deleted only when,
/// at the deadline, no process has its `/dev/ublkcN` open (a serve that
/// is re-attaching does) either.
#[derive(Default)]
struct UblkWatch {
    /// Control handles by device number, made once each (libublk reads the
    /// device's JSON when one is made).
    ctrls: HashMap<u32, libublk::ctrl::UblkCtrl>,
    /// Since when each device (number) has been seen without a server.
    since: HashMap<u32, Instant>,
}

impl UblkWatch {
    /// One look at every recorded ublk device; deletes those past the
    /// deadline. Errors: stdout is closed.
    fn look(&mut self, a: &MonitorArgs, cfg: &Config) -> Result<()> {
        let timeout = cfg.ublk_recovery_timeout();
        let mut recorded = HashSet::new();
        for (name, r) in devlinks::records() {
            // Every device of the record (one per volume of a Matrix array).
            let devices = devices_of(&name, &r);
            let (mut left, mut deleted) = (devices.len(), false);
            for d in &devices {
                // The newest record of a device (records come newest first).
                if !recorded.insert(d.dev_id) {
                    continue;
                }
                match self.look_at(a, cfg, &name, &r, d, timeout)? {
                    Seen::Kept => {}
                    Seen::Gone => left -= 1,
                    Seen::Deleted => (left, deleted) = (left - 1, true),
                }
            }
            // The record goes with its last device, unless a serve wrote a
            // new one meanwhile.
            if left == 0 && deleted {
                let path = crate::runstate::run_dir().join(format!("{name}.ublk"));
                if devlinks::records().iter().any(|(n, now)| n == &name && now == &r) {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        self.since.retain(|id, _| recorded.contains(id));
        self.ctrls.retain(|id, _| recorded.contains(id));
        Ok(())
    }

    /// One look at the device `d` of record `r` (array `name`), deleted
    /// when past its deadline. Errors: stdout is closed.
    fn look_at(&mut self, a: &MonitorArgs, cfg: &Config, name: &str, r: &devlinks::UblkRecord, d: &Device, timeout: u64) -> Result<Seen> {
        if !Path::new(&format!("/sys/class/ublk-char/ublkc{}", d.dev_id)).exists() {
            self.ctrls.remove(&d.dev_id);
            self.since.remove(&d.dev_id);
            return Ok(Seen::Gone);
        }
        if !self.orphaned(d.dev_id, r.pid) {
            self.since.remove(&d.dev_id);
            return Ok(Seen::Kept);
        }
        let since = *self.since.entry(d.dev_id).or_insert_with(|| {
            let wait = if timeout == 0 { "for ever (ublk-recovery-timeout = 0)".to_string() } else { format!("{timeout} s") };
            eprintln!(
                "uraid monitor: {} of array '{name}' has no server (uraid serve, pid {}, is gone): its I/O waits {wait} for 'uraid serve {name}' to re-attach",
                d.bdev.display(),
                r.pid
            );
            Instant::now()
        });
        if timeout == 0 || since.elapsed() < Duration::from_secs(timeout) {
            return Ok(Seen::Kept);
        }
        if let Some(pid) = cdev_holder(d.dev_id) {
            eprintln!("uraid monitor: process {pid} has /dev/ublkc{} open (a serve re-attaching?): {} is kept", d.dev_id, d.bdev.display());
            self.since.insert(d.dev_id, Instant::now());
            return Ok(Seen::Kept);
        }
        let stopped = self.expire(a, cfg, name, r.pid, d, since.elapsed().as_secs(), timeout)?;
        Ok(if stopped { Seen::Deleted } else { Seen::Kept })
    }

    /// Whether the device `dev_id` is quiesced, is still the device of the
    /// server `pid` (the record's) and that server is gone.
    fn orphaned(&mut self, dev_id: u32, pid: u32) -> bool {
        let ctrl = match self.ctrls.entry(dev_id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => match libublk::ctrl::UblkCtrl::new_simple(dev_id as i32) {
                Ok(c) => v.insert(c),
                // No /dev/ublk-control (no ublk_drv, or not root): no device to watch.
                Err(_) => return false,
            },
        };
        if ctrl.read_dev_info().is_err() {
            self.ctrls.remove(&dev_id);
            return false;
        }
        let info = ctrl.dev_info();
        info.state as u32 == libublk::sys::UBLK_S_DEV_QUIESCED && info.ublksrv_pid as i64 == pid as i64 && !uraid_alive(pid)
    }

    /// Deletes the device `d` of array `name` (its I/O then fails with
    /// EIO) and its links, and reports it; true when it was stopped.
    /// Errors: stdout is closed.
    #[allow(clippy::too_many_arguments)]
    fn expire(&mut self, a: &MonitorArgs, cfg: &Config, name: &str, pid: u32, d: &Device, waited: u64, timeout: u64) -> Result<bool> {
        let Some(ctrl) = self.ctrls.get(&d.dev_id) else { return Ok(false) };
        // STOP_DEV fails the queued I/O and removes the disk; the
        // asynchronous DEL_DEV does not wait for a mounted filesystem to
        // let go of it (the synchronous one would).
        if let Err(e) = ctrl.kill_dev() {
            eprintln!("uraid monitor: cannot stop {} of array '{name}' ({e}); tried again at the next look", d.bdev.display());
            return Ok(false);
        }
        let deleted = match ctrl.del_dev_async() {
            Ok(_) => String::from("deleted"),
            Err(e) => format!("stopped (its deletion failed: {e}; 'uraid monitor' does not retry it)"),
        };
        self.ctrls.remove(&d.dev_id);
        self.since.remove(&d.dev_id);
        for uuid in &d.uuids {
            devlinks::unlink_device(&d.link, uuid, &d.bdev);
        }
        let detail = format!(
            "the ublk device {} had no server for {waited} s (its uraid serve, pid {pid}, is gone and none re-attached within \
             ublk-recovery-timeout = {timeout} s): {deleted}, so its I/O fails with EIO instead of waiting. Unmount a \
             filesystem on it; 'uraid serve {name}' makes a new device",
            d.bdev.display(),
        );
        let e = Event { member: Some(d.bdev.display().to_string()), ..own_event("DeviceDisappeared", name, detail) };
        report(a, cfg, &e, true)?;
        Ok(true)
    }
}

/// What one look found of a recorded device.
enum Seen {
    /// Served, or waiting for a server within its time.
    Kept,
    /// Not there (deleted, or a reboot).
    Gone,
    /// Deleted by this look (past `ublk-recovery-timeout`).
    Deleted,
}

/// One ublk device of a record: a volume's.
#[derive(Debug, PartialEq)]
struct Device {
    /// N of /dev/ublkbN.
    dev_id: u32,
    /// `/dev/ublkbN`.
    bdev: PathBuf,
    /// Its link in /dev/uraid: `NAME`, or `NAME:VOLUME` for a volume
    /// after the first.
    link: String,
    /// The UUIDs of its /dev/disk/by-id links (the array's, and the
    /// volume's own in a Matrix array).
    uuids: Vec<String>,
}

/// Every device the record `r` of array `name` lists: the first volume's
/// (the record's top), then one per further volume of a Matrix array.
fn devices_of(name: &str, r: &devlinks::UblkRecord) -> Vec<Device> {
    let first = Device {
        dev_id: r.dev_id,
        bdev: r.bdev.clone(),
        link: name.to_string(),
        uuids: [&r.uuid, &r.volume_uuid].into_iter().filter(|u| !u.is_empty()).cloned().collect(),
    };
    let rest = r.volumes.iter().map(|v| Device {
        dev_id: v.dev_id,
        bdev: v.bdev.clone(),
        link: format!("{name}:{}", v.volume),
        uuids: [&v.uuid].into_iter().filter(|u| !u.is_empty()).cloned().collect(),
    });
    std::iter::once(first).chain(rest).collect()
}

/// Whether process `pid` is alive and is a uraid (not another program
/// that got the number since).
fn uraid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end().starts_with("uraid"))
}

/// A process that has `/dev/ublkcN` open (a server attached or
/// re-attaching), if any.
fn cdev_holder(dev_id: u32) -> Option<u32> {
    let cdev = PathBuf::from(format!("/dev/ublkc{dev_id}"));
    std::fs::read_dir("/proc").ok()?.filter_map(|e| e.ok()).find_map(|p| {
        let pid: u32 = p.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(p.path().join("fd")).ok()?;
        fds.filter_map(|f| f.ok()).any(|f| std::fs::read_link(f.path()).is_ok_and(|t| t == cdev)).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every device of a Matrix array's record is watched: the first
    /// volume's at the top, then each further volume's, with its own link
    /// and UUID; an array of one volume has its one device.
    #[test]
    fn devices_of_walks_every_volume() {
        let json = r#"{"dev_id":3,"uuid":"a1","pid":7,"bdev":"/dev/ublkb3","volume":"fast","volume_uuid":"v1",
            "volumes":[{"volume":"bulk","uuid":"v2","dev_id":4,"bdev":"/dev/ublkb4"},
                       {"volume":"logs","uuid":"v3","dev_id":9,"bdev":"/dev/ublkb9"}]}"#;
        let r: devlinks::UblkRecord = serde_json::from_str(json).unwrap();
        let d = devices_of("m", &r);
        let got: Vec<(u32, &str, &str, Vec<&str>)> =
            d.iter().map(|d| (d.dev_id, d.bdev.to_str().unwrap(), d.link.as_str(), d.uuids.iter().map(|u| u.as_str()).collect())).collect();
        assert_eq!(
            got,
            vec![
                (3, "/dev/ublkb3", "m", vec!["a1", "v1"]),
                (4, "/dev/ublkb4", "m:bulk", vec!["v2"]),
                (9, "/dev/ublkb9", "m:logs", vec!["v3"]),
            ]
        );
        let one: devlinks::UblkRecord = serde_json::from_str(r#"{"dev_id":0,"uuid":"","pid":7,"bdev":"/dev/ublkb0"}"#).unwrap();
        assert_eq!(devices_of("t", &one), vec![Device { dev_id: 0, bdev: "/dev/ublkb0".into(), link: "t".into(), uuids: vec![] }]);
    }
}
