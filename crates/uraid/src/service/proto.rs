//! The control protocol of a running array (`/run/uraid/NAME.ctl`): one
//! JSON object per line each way, versioned. The CLI (`uraid status | fail
//! | remove | add | replace | rebuild | check | repair | config | stop |
//! monitor NAME`) is one client; anything that speaks JSON over a unix
//! socket is another (`socat - UNIX-CONNECT:/run/uraid/data.ctl`).
//! docs/control-protocol.md describes it for other clients; this file is
//! its definition.
//!
//! A request: `{"version": 1, "command": COMMAND}` where COMMAND is
//! `"status"`, `"stop"`, `"monitor"`, `"test-message"`, or an object with one
//! key naming the command and its arguments, e.g.
//! `{"fail": {"member": "1", "force": false}}`. Unknown commands, unknown
//! arguments and other versions are refused with an error and change
//! nothing.
//!
//! Replies: zero or more `{"version": 1, "progress": PROGRESS}` or
//! `{"version": 1, "event": EVENT}` lines, then (except for `monitor`,
//! which streams events until the client hangs up) one
//! `{"version": 1, "ok": true, "result": ...}` or
//! `{"version": 1, "ok": false, "error": {"kind": KIND, "message": "..."}}`.

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest request line accepted, bytes (a request is a few hundred).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// One request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Must be [`PROTOCOL_VERSION`].
    pub version: u32,
    /// What to do.
    pub command: Command,
}

/// A command to a running array. Member arguments are a role (or spare
/// slot) number or a device path, as the CLI takes them; rates are bytes
/// per second.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Command {
    /// The array's status with live figures (`LiveStatus`).
    Status,
    /// Mark a member faulty (`force`: even past a volume's tolerance).
    Fail {
        /// Role number or device path.
        member: String,
        /// Fail it even when a volume then loses data.
        #[serde(default)]
        force: bool,
    },
    /// Take a faulty member or a spare out.
    Remove {
        /// Slot number or device path.
        member: String,
    },
    /// Add a spare; it takes over a faulty or missing role at once and is
    /// rebuilt in the background.
    Add {
        /// The new device's path.
        device: String,
        /// Overwrite a device that holds a filesystem or another array.
        #[serde(default)]
        force: bool,
    },
    /// Fail `old` (when active) and rebuild `new` in its place.
    Replace {
        /// Role number or device path of the member to replace.
        old: String,
        /// The new device's path.
        new: String,
        /// Even when a volume has no redundancy left while it rebuilds, and
        /// overwriting a new device that holds data.
        #[serde(default)]
        force: bool,
    },
    /// Set the background rebuild's rate limit (bytes/s; `None`: none).
    Rebuild {
        /// Bytes per second, or `null` for no limit.
        rate: Option<u64>,
    },
    /// Scrub: check (or `repair`) one volume or every redundant one.
    /// Progress lines follow until it ends, then the reports.
    Check {
        /// Volume name; `None`: every redundant volume.
        #[serde(default)]
        volume: Option<String>,
        /// Rewrite copies or parity that disagree.
        #[serde(default)]
        repair: bool,
        /// Bytes of the volume per second; `None`: the service's scrub rate.
        #[serde(default)]
        rate: Option<u64>,
    },
    /// Stop the running check or repair (md's `sync_action` = `idle`);
    /// what it found so far is in the reply.
    CheckStop,
    /// Change a volume's cache mode live (off, writethrough, writeback;
    /// the journal mode needs the array stopped): the export pauses, the
    /// old cache writes back what it holds, the volume gets its new cache,
    /// the export resumes.
    Config {
        /// Volume name; `None`: every volume.
        #[serde(default)]
        volume: Option<String>,
        /// off, writethrough or writeback.
        mode: String,
        /// Cache size, bytes (`None`: the volume's, else the default).
        #[serde(default)]
        cache_size: Option<u64>,
        /// Most dirty bytes before writers wait (`None`: as for the size).
        #[serde(default)]
        dirty_limit: Option<u64>,
    },
    /// Add members and restripe the volume onto them while it is served
    /// (`uraid grow --add`): replies once the reshape has started; it runs
    /// in the background (status shows its progress, the events
    /// ReshapeStarted, Reshape20..80 and ReshapeFinished tell its course).
    Grow {
        /// The new devices' paths.
        #[serde(default)]
        add: Vec<String>,
        /// Instead of `add`: grow the last volume into the room past it on
        /// every member, to this many bytes (a decimal string) or `max`.
        #[serde(default)]
        size: Option<String>,
        /// Overwrite devices that hold a filesystem or another array.
        #[serde(default)]
        force: bool,
        /// Logical bytes moved per second; `None`: the service's reshape
        /// rate.
        #[serde(default)]
        rate: Option<u64>,
        /// With `add`: restripe to this chunk size (bytes) too.
        #[serde(default)]
        chunk: Option<u64>,
        /// Convert the volume to this RAID level (with `add` where the
        /// conversion needs new members).
        #[serde(default)]
        level: Option<u32>,
    },
    /// Stop the array cleanly (as SIGTERM does); replies with the pid.
    Stop,
    /// Stream the array's events (and the last ones kept) until the
    /// client hangs up.
    Monitor,
    /// Send a TestMessage event through every configured channel.
    TestMessage,
    /// The members' I/O counters now (`uraid iostat`): `{"array": NAME,
    /// "seconds": since the service started, "members": [MemberStatus
    /// with "io"]}`.
    Iostat,
    /// Hand the array's ublk device over to process `by` (`uraid serve
    /// NAME --ublk --takeover`): the device's requests in flight are
    /// answered within `quiet_seconds`, then the array is flushed and
    /// closed clean and this process exits, leaving the device quiesced
    /// for `by` to re-attach. Replies `{"pid", "devices", "nbd"}` before
    /// the close. Refused (nothing changes): no ublk export, `by` not a
    /// running process, requests still in flight after `quiet_seconds`.
    Takeover {
        /// Seconds to wait for the requests in flight (default 10).
        #[serde(default)]
        quiet_seconds: Option<u64>,
        /// The process that takes the device over.
        by: u32,
    },
}

impl Command {
    /// The command's name as the CLI spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Status => "status",
            Command::Fail { .. } => "fail",
            Command::Remove { .. } => "remove",
            Command::Add { .. } => "add",
            Command::Replace { .. } => "replace",
            Command::Rebuild { .. } => "rebuild",
            Command::Check { repair: false, .. } => "check",
            Command::Check { repair: true, .. } => "repair",
            Command::CheckStop => "check --stop",
            Command::Config { .. } => "config",
            Command::Grow { .. } => "grow",
            Command::Stop => "stop",
            Command::Monitor => "monitor",
            Command::TestMessage => "test-message",
            Command::Iostat => "iostat",
            Command::Takeover { .. } => "takeover",
        }
    }
}

/// Why a request failed: an engine [`ErrorKind`](uraid_core::ErrorKind)
/// name (`InvalidInput`, `WouldDestroy`, `TooSmall`, ...), or `Protocol`
/// (the request could not be read), `NotLive` (the command cannot be done
/// on a running array; the message says what to do).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// Stable kind name.
    pub kind: String,
    /// For humans: what was wrong and what to do.
    pub message: String,
}

impl ErrorBody {
    /// An error of `kind` saying `message`.
    pub fn new(kind: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody { kind: kind.to_string(), message: message.into() }
    }
}

impl From<uraid_core::Error> for ErrorBody {
    fn from(e: uraid_core::Error) -> ErrorBody {
        ErrorBody { kind: format!("{:?}", e.kind()), message: e.to_string() }
    }
}

/// One line from the service.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// Set on the final line: whether the command succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The command's result (final line, success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed (final line, failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Progress of a long command (a scrub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// An event (`monitor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
}

impl Reply {
    fn empty() -> Reply {
        Reply { version: PROTOCOL_VERSION, ok: None, result: None, error: None, progress: None, event: None }
    }
    /// A final success line.
    pub fn done(result: serde_json::Value) -> Reply {
        Reply { ok: Some(true), result: Some(result), ..Reply::empty() }
    }
    /// A final failure line.
    pub fn failed(error: ErrorBody) -> Reply {
        Reply { ok: Some(false), error: Some(error), ..Reply::empty() }
    }
    /// A progress line.
    pub fn progress(p: Progress) -> Reply {
        Reply { progress: Some(p), ..Reply::empty() }
    }
    /// An event line.
    pub fn event(e: Event) -> Reply {
        Reply { event: Some(e), ..Reply::empty() }
    }
}

/// Where a background operation (rebuild, check, repair) stands.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Progress {
    /// rebuild, check, repair or reshape.
    pub action: String,
    /// The rebuilt role, or the scrubbed volume's name.
    pub target: String,
    /// Bytes done (member bytes for a rebuild, volume bytes for a scrub).
    pub done: u64,
    /// Bytes in all.
    pub total: u64,
    /// Rate over the operation so far, MB/s (10^6 bytes/s).
    pub mb_per_s: f64,
    /// Seconds left at that rate (`None` until it can be told).
    pub eta_seconds: Option<f64>,
    /// Rate limit, bytes/s (`None`: none).
    pub rate_limit: Option<u64>,
}

impl Progress {
    /// `done` in percent of `total` (100 when there is nothing to do).
    pub fn percent(&self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            self.done as f64 * 100.0 / self.total as f64
        }
    }
}

/// An event of the array, with mdadm's event names (Fail, FailSpare,
/// DegradedArray, SpareActive, RebuildStarted, Rebuild20/40/60/80,
/// RebuildFinished, MismatchesFound, CacheLost, JournalLost, NewArray,
/// TestMessage; ReshapeStarted, Reshape20/40/60/80, ReshapeFinished,
/// ReshapeFailed; TakeOver).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// mdadm's event name.
    pub event: String,
    /// The array's name.
    pub array: String,
    /// The member (device path) it concerns, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// What happened, for humans.
    pub detail: String,
}

/// Live I/O figures of a volume over the last seconds (from the export).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IoFigures {
    /// Seconds the figures cover.
    pub seconds: f64,
    /// Reads per second.
    pub read_iops: f64,
    /// Writes per second.
    pub write_iops: f64,
    /// Read MB/s (10^6 bytes/s).
    pub read_mb_s: f64,
    /// Write MB/s (10^6 bytes/s).
    pub write_mb_s: f64,
    /// Mean read latency, µs.
    pub read_mean_us: f64,
    /// 99th percentile read latency, µs (within its histogram bucket).
    pub read_p99_us: f64,
    /// Mean write latency, µs.
    pub write_mean_us: f64,
    /// 99th percentile write latency, µs.
    pub write_p99_us: f64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// NBD connections open now.
    pub connections: u64,
}
