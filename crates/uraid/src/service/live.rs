//! What the manager shares with the control socket's threads, the
//! console and the metrics ([`Live`]): the array's status as of the last
//! look, the background operation's progress, the check's mismatches, the
//! members' details, the reshape, the maintenance settings, the exports.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use uraid_core::control::array::ArrayStatus;

use super::exports;
use super::proto::Progress;

/// What the manager shares with the control socket's threads.
pub(crate) struct Live {
    /// The array's status as of the manager's last look (every second when
    /// idle, after each checkpoint of a rebuild or scrub).
    pub(super) status: Mutex<Option<ArrayStatus>>,
    /// The background operation running, if any.
    progress: Mutex<Option<Progress>>,
    /// Set to pause a running rebuild or scrub at its next checkpoint
    /// (a command waits, or the service stops).
    pub interrupt: AtomicBool,
    /// Set when the service is to stop (a `stop` command).
    pub stop: Arc<AtomicBool>,
    /// Per volume, the mismatches its last finished check found.
    mismatches: Mutex<Vec<(String, u64)>>,
    /// What each member is (model, size, logical sector size, what it
    /// sits on) and the shared-device and shared-bus warnings of the
    /// benchmark suite, taken when the members change.
    pub(super) members: Mutex<serde_json::Value>,
    /// The reshape under way: `{"members": [before, after], "position":
    /// bytes, "total": bytes, "failed": why or null}`, or null.
    reshape: Mutex<serde_json::Value>,
    /// The maintenance settings in force (see [`Live::maintenance`]).
    pub(super) maintenance: Mutex<serde_json::Value>,
    /// The exports of the served volume (see [`Live::exports`]).
    exports: Mutex<serde_json::Value>,
    /// The last health reading of each member drive (service::health),
    /// by device path; empty when none is polled.
    pub(crate) health: Mutex<Vec<super::health::Health>>,
    /// Where the members' I/O counters are read live (set at each look).
    pub(super) io_source: Mutex<Option<uraid_core::control::array::MemberIoSource>>,
    /// When the service started (the members' counters count from about then).
    pub(super) started: std::time::Instant,
}

impl Live {
    /// Shared state of a service that stops when `stop` is set.
    pub(crate) fn new(stop: Arc<AtomicBool>) -> Arc<Live> {
        Arc::new(Live {
            status: Mutex::new(None),
            progress: Mutex::new(None),
            interrupt: AtomicBool::new(false),
            stop,
            mismatches: Mutex::new(Vec::new()),
            members: Mutex::new(serde_json::Value::Null),
            reshape: Mutex::new(serde_json::Value::Null),
            maintenance: Mutex::new(serde_json::Value::Null),
            exports: Mutex::new(serde_json::json!([])),
            health: Mutex::new(Vec::new()),
            io_source: Mutex::new(None),
            started: std::time::Instant::now(),
        })
    }

    /// The exports of the served volumes: `[{"kind": "nbd" | "ublk",
    /// "address": URI or device, "volume": its volume's name}]`, in the
    /// order of the volume table, as `status` and the console show them.
    pub(crate) fn exports(&self) -> serde_json::Value {
        self.exports.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `list` as the served volumes' exports.
    pub(crate) fn set_exports(&self, list: &exports::Exports) {
        let mut all: Vec<&exports::Exported> = list.list().iter().collect();
        all.sort_by_key(|e| e.volume);
        let v = all
            .iter()
            .map(|e| serde_json::json!({"kind": e.export.kind(), "address": e.export.address(), "volume": e.volume_name}))
            .collect();
        *self.exports.lock().unwrap_or_else(|p| p.into_inner()) = serde_json::Value::Array(v);
    }
    /// Each role's I/O counters read now (not as of the last look), or
    /// `None` before the manager's first look.
    pub(crate) fn member_io(&self) -> Option<Vec<uraid_core::raid::engine::counters::MemberIo>> {
        self.io_source.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|s| s.member_io())
    }

    /// The last status the manager took, with the members' I/O counters
    /// read now.
    pub(crate) fn status_now(&self) -> Option<ArrayStatus> {
        let mut st = self.status()?;
        if let Some(io) = self.member_io() {
            for m in &mut st.members {
                m.io = m.role.and_then(|r| io.get(r as usize).cloned());
            }
        }
        Some(st)
    }

    /// The last status the manager took.
    pub(crate) fn status(&self) -> Option<ArrayStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// The background operation running, if any.
    pub(crate) fn progress(&self) -> Option<Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// The members' details: `{"members": [MemberInfo + block_size], "warnings": [...]}`.
    pub(crate) fn member_details(&self) -> serde_json::Value {
        self.members.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Per volume, the mismatches its last finished check found (md's
    /// `mismatch_cnt`).
    pub(crate) fn mismatches(&self) -> Vec<(String, u64)> {
        self.mismatches.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    pub(super) fn set_mismatches(&self, volume: &str, n: u64) {
        let mut m = self.mismatches.lock().unwrap_or_else(|p| p.into_inner());
        match m.iter_mut().find(|(v, _)| v == volume) {
            Some(e) => e.1 = n,
            None => m.push((volume.to_string(), n)),
        }
    }
    /// The maintenance settings in force: `{"rebuild_rate": bytes/s,
    /// "scrub_rate": bytes/s, "scrub_every": s, "next_check_unix": s}`,
    /// each null when unset (no limit, no schedule); null before the
    /// manager starts.
    pub(crate) fn maintenance(&self) -> serde_json::Value {
        self.maintenance.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// The reshape under way (see the field), or null.
    pub(crate) fn reshape(&self) -> serde_json::Value {
        self.reshape.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    pub(super) fn set_reshape(&self, v: serde_json::Value) {
        *self.reshape.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }
    pub(super) fn set_progress(&self, p: Option<Progress>) {
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = p;
    }
    pub(super) fn set_status(&self, st: ArrayStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
    }
}
