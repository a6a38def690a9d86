//! The events of a running array and where they go, as `mdadm --monitor`
//! does: mdadm's event names (Fail, FailSpare, DegradedArray, SpareActive,
//! RebuildStarted, RebuildNN, RebuildFinished, MismatchesFound, NewArray,
//! TestMessage; and uraid's CacheLost, JournalLost, and ReshapeStarted,
//! Reshape20/40/60/80, ReshapeFinished, ReshapeFailed after the Rebuild
//! ones, and AssembleWarning for each warning of the assemble at start:
//! journal records replayed, regions resynced, stripes left unresynced,
//! and TakeOver when `serve --takeover` moves a ublk device to a new
//! process, sent by both; and a member drive's health: HealthWarning,
//! TemperatureHigh, WearOut, SpareLow, MediaErrors, from
//! [`super::health`]; ReadErrorCorrected when a member's read error was
//! repaired from redundancy, and Fail says when a member was failed for
//! its read errors),
//! each sent to
//! - the system log (journald or syslogd through `/dev/log`, with the
//!   `syslog` crate; `$URAID_SYSLOG_SOCKET` names another datagram socket),
//!   and the service's stderr;
//! - the `program` of the config's `[monitor]` (mdadm's PROGRAM), run as
//!   `PROGRAM EVENT ARRAY [MEMBER]`;
//! - the `mail` address (mdadm's MAILADDR) through `mail-command`
//!   (default `/usr/sbin/sendmail -t`), for the events mdadm mails: Fail,
//!   FailSpare, DegradedArray, TestMessage (and JournalLost), and the
//!   drive health warnings (as smartd mails them);
//! - every `uraid monitor` connected to the control socket; the last
//!   [`KEPT`] events are kept for a monitor that connects later.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::proto::Event;

/// Events kept for monitors that connect later.
pub(crate) const KEPT: usize = 256;

/// Where events go besides the log and the monitors (the config's
/// `[monitor]` table).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sinks {
    /// PROGRAM, run as `PROGRAM EVENT ARRAY [MEMBER]`.
    pub program: Option<PathBuf>,
    /// MAILADDR.
    pub mail: Option<String>,
    /// The command that sends a mail read on its stdin (default
    /// `/usr/sbin/sendmail -t`).
    pub mail_command: Option<String>,
}

type Syslog = syslog::Logger<syslog::LoggerBackend, syslog::Formatter3164>;

struct Inner {
    array: String,
    sinks: Sinks,
    recent: Mutex<VecDeque<Event>>,
    monitors: Mutex<Vec<Sender<Event>>>,
    syslog: Mutex<Option<Syslog>>,
}

/// The event channel of one array; cheap to clone.
#[derive(Clone)]
pub(crate) struct Events {
    inner: Arc<Inner>,
}

/// The syslog severity mdadm gives each event: critical for a lost
/// member or redundancy, warning for mismatches, info for the rest.
fn severity(event: &str) -> u8 {
    match event {
        "Fail" | "FailSpare" | "DegradedArray" | "JournalLost" | "CacheLost" => 2,
        "MismatchesFound" | "TestMessage" | "ReshapeFailed" | "AssembleWarning" => 4,
        // Drive health (service::health): warnings, as smartd logs them.
        "HealthWarning" | "TemperatureHigh" | "WearOut" | "SpareLow" | "MediaErrors" => 4,
        // A read error repaired from redundancy: a warning (the drive may be going).
        "ReadErrorCorrected" => 4,
        _ => 6,
    }
}

/// Whether mdadm mails this event.
fn mailed(event: &str) -> bool {
    matches!(event, "Fail" | "FailSpare" | "DegradedArray" | "TestMessage" | "JournalLost" | "CacheLost" | "ReshapeFailed")
        // and, as smartd mails them, a drive's health warnings
        || matches!(event, "HealthWarning" | "TemperatureHigh" | "WearOut" | "SpareLow" | "MediaErrors")
}

impl Events {
    /// The events of array `array`, sent to `sinks` as well.
    pub(crate) fn new(array: &str, sinks: Sinks) -> Events {
        let formatter = syslog::Formatter3164 {
            facility: syslog::Facility::LOG_DAEMON,
            hostname: None,
            process: "uraid".into(),
            pid: std::process::id(),
        };
        let logger = match std::env::var_os("URAID_SYSLOG_SOCKET") {
            Some(p) => syslog::unix_custom(formatter, p),
            None => syslog::unix(formatter),
        };
        let logger = match logger {
            Ok(l) => Some(l),
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "uraid serve: no system log ({e}); events go to stderr only");
                None
            }
        };
        Events {
            inner: Arc::new(Inner {
                array: array.to_string(),
                sinks,
                recent: Mutex::new(VecDeque::new()),
                monitors: Mutex::new(Vec::new()),
                syslog: Mutex::new(logger),
            }),
        }
    }

    /// Sends event `event` (mdadm's name) about `member` (a device path),
    /// with `detail` for humans, everywhere. Never fails: a channel that
    /// fails is reported on stderr.
    pub(crate) fn emit(&self, event: &str, member: Option<&str>, detail: impl Into<String>) {
        let e = Event {
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            event: event.to_string(),
            array: self.inner.array.clone(),
            member: member.map(str::to_string),
            detail: detail.into(),
        };
        let line = format!(
            "{} event on array {}{}: {}",
            e.event,
            e.array,
            e.member.as_deref().map(|m| format!(" member {m}")).unwrap_or_default(),
            e.detail
        );
        let _ = writeln!(std::io::stderr(), "uraid serve: {line}");
        if let Some(l) = self.inner.syslog.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let r = match severity(event) {
                2 => l.crit(&line),
                4 => l.warning(&line),
                _ => l.info(&line),
            };
            if let Err(err) = r {
                let _ = writeln!(std::io::stderr(), "uraid serve: cannot write to the system log: {err}");
            }
        }
        if let Some(p) = &self.inner.sinks.program {
            run_program(p, &e);
        }
        if let Some(to) = &self.inner.sinks.mail {
            if mailed(event) {
                let cmd = self.inner.sinks.mail_command.as_deref().unwrap_or("/usr/sbin/sendmail -t");
                send_mail(cmd, to, &e, &line);
            }
        }
        {
            let mut r = self.inner.recent.lock().unwrap_or_else(|p| p.into_inner());
            if r.len() == KEPT {
                r.pop_front();
            }
            r.push_back(e.clone());
        }
        self.inner.monitors.lock().unwrap_or_else(|p| p.into_inner()).retain(|tx| tx.send(e.clone()).is_ok());
    }

    /// The events kept so far, and a receiver of every event from now on
    /// (dropped with the receiver).
    pub(crate) fn subscribe(&self) -> (Vec<Event>, Receiver<Event>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let recent = self.inner.recent.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
        self.inner.monitors.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
        (recent, rx)
    }
}

/// Runs `program EVENT ARRAY [MEMBER]` (mdadm's PROGRAM convention) and
/// reaps it in the background.
pub(crate) fn run_program(program: &std::path::Path, e: &Event) {
    let mut c = Command::new(program);
    c.arg(&e.event).arg(&e.array);
    if let Some(m) = &e.member {
        c.arg(m);
    }
    c.stdin(Stdio::null());
    match c.spawn() {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "uraid serve: cannot run the monitor program {}: {err}", program.display());
        }
    }
}

/// Mails `line` about `e` to `to` with `command` (split on whitespace),
/// which reads the message (with its headers) on stdin.
pub(crate) fn send_mail(command: &str, to: &str, e: &Event, line: &str) {
    let mut words = command.split_whitespace();
    let Some(prog) = words.next() else { return };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let msg = format!(
        "From: uraid monitoring <root>\nTo: {to}\nSubject: {} event on {}:{}\n\nThis is an automatically generated mail message from uraid\nrunning on {}\n\n{line}\n",
        e.event,
        e.array,
        host.trim(),
        host.trim()
    );
    match Command::new(prog).args(words).stdin(Stdio::piped()).stdout(Stdio::null()).spawn() {
        Ok(mut child) => {
            std::thread::spawn(move || {
                if let Some(mut i) = child.stdin.take() {
                    let _ = i.write_all(msg.as_bytes());
                }
                child.wait()
            });
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "uraid serve: cannot run the mail command '{command}': {err}");
        }
    }
}
