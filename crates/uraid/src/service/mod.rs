//! The array service inside `uraid serve`: what makes a served array
//! manageable while it runs, as md arrays are.
//!
//! - [`Manager`]: the one thread that owns the [`Array`] while it is
//!   served. It carries out the commands of the control socket (fail,
//!   remove, add, replace, rebuild rate, check / repair), moves spares into
//!   failed roles (new volumes over them, every connection moved), runs the
//!   background rebuild and scrubs (a command pauses them at their next
//!   checkpoint; they resume after it), and turns what it sees into events.
//! - [`ctl`]: the control socket (`/run/uraid/NAME.ctl`) and [`proto`], its
//!   versioned JSON protocol; [`client`]: the CLI's side of it.
//! - [`events`]: mdadm's events to the system log, a program, mail and
//!   the monitors.
//!
//! The manager reaches the array only through `uraid_core::control`'s
//! `Array` and the exports only through [`exports::Exports`] (each export
//! moved to its own volume's replacement).

pub(crate) mod client;
pub(crate) mod console;
pub(crate) mod ctl;
pub(crate) mod exports;
pub(crate) mod events;
pub(crate) mod figures;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod proto;
pub(crate) mod reload;
pub(crate) mod takeover;
pub(crate) mod wake;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uraid_core::control::array::{Array, ArrayStatus, LiveChange};
use uraid_core::control::maint::{CheckOptions, CheckReport};
use uraid_core::raid::health::MemberState;
use uraid_core::MemberSpec;

use self::events::Events;
use self::proto::{Command, ErrorBody, Progress, Reply};

/// A command for the manager, with where its final reply goes.
pub(crate) struct Job {
    /// The command.
    pub cmd: Command,
    /// The final reply.
    pub reply: Sender<Reply>,
}

impl Job {
    /// A job that only wakes an idle manager, which then looks at the
    /// array at once (its events, the live status, a spare's takeover):
    /// `stop` is run by the control socket, so the manager answers it,
    /// into a reply nobody reads, without acting on it.
    pub(crate) fn wake() -> Job {
        Job { cmd: Command::Stop, reply: std::sync::mpsc::channel().0 }
    }
}

/// What the manager shares with the control socket's threads.
pub(crate) struct Live {
    /// The array's status as of the manager's last look (every second when
    /// idle, after each checkpoint of a rebuild or scrub).
    status: Mutex<Option<ArrayStatus>>,
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
    members: Mutex<serde_json::Value>,
    /// The reshape under way: `{"members": [before, after], "position":
    /// bytes, "total": bytes, "failed": why or null}`, or null.
    reshape: Mutex<serde_json::Value>,
    /// The maintenance settings in force (see [`Live::maintenance`]).
    maintenance: Mutex<serde_json::Value>,
    /// The exports of the served volume (see [`Live::exports`]).
    exports: Mutex<serde_json::Value>,
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
    fn set_mismatches(&self, volume: &str, n: u64) {
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
    fn set_reshape(&self, v: serde_json::Value) {
        *self.reshape.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }
    fn set_progress(&self, p: Option<Progress>) {
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = p;
    }
    fn set_status(&self, st: ArrayStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
    }
}

/// How often the idle manager looks at the array (its status and the
/// members' states, for `status` and the events).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// How often the status is taken again while a rebuild or a scrub runs
/// (at its progress calls), so that every view follows it.
const LIVE_STATUS_EVERY: Duration = Duration::from_millis(200);

/// A progress callback's status refresher: takes the status from
/// `source` into `live` at most every [`LIVE_STATUS_EVERY`].
fn status_refresher(live: Arc<Live>, source: uraid_core::control::array::StatusSource) -> impl FnMut() {
    let mut last = Instant::now();
    move || {
        if last.elapsed() >= LIVE_STATUS_EVERY {
            last = Instant::now();
            live.set_status(source.status());
        }
    }
}

/// How the manager runs (from `serve`'s flags and the config).
pub(crate) struct ManagerOptions {
    /// Background rebuild rate limit, bytes/s.
    pub rebuild_rate: Option<u64>,
    /// Default scrub rate limit, bytes of a volume per second.
    pub scrub_rate: Option<u64>,
    /// Scheduled check of every redundant volume this often.
    pub scrub_every: Option<Duration>,
    /// With `scrub_every`: the stamp file whose modification time is the
    /// end of the last check (see [`crate::runstate::check_stamp`]); the
    /// schedule counts from it, and every check that ends touches it.
    pub check_stamp: Option<std::path::PathBuf>,
}

/// A scrub under way.
struct Scrub {
    /// Indexes of the volumes to scrub, in order.
    volumes: Vec<usize>,
    /// The volume being scrubbed (index into `volumes`).
    at: usize,
    /// Where to resume in it.
    start_stripe: u64,
    repair: bool,
    rate: Option<u64>,
    report: CheckReport,
    /// Reports of the volumes done, as `uraid check --json` prints them.
    done: Vec<serde_json::Value>,
    /// Who waits for the reports.
    waiters: Vec<Sender<Reply>>,
    /// Bytes done and time when this volume's scrub (re)started, for its rate.
    since: (u64, Instant),
}

/// Default rate of a reshape of a served array, logical bytes moved per
/// second (md's `speed_limit_max` is 200 MB/s of resync; a reshape reads
/// and writes, and users share the members meanwhile).
pub(crate) const DEFAULT_RESHAPE_RATE: u64 = 100_000_000;

/// A reshape of the served array under way.
struct Reshaping {
    grow: uraid_core::control::array::LiveGrow,
    /// Logical bytes per second.
    rate: Option<u64>,
    /// The last ReshapeNN step announced.
    announced: u64,
    /// Position and time when this run (re)started, for the rate.
    since: (u64, Instant),
    /// Why it stopped, when it failed (it is then left where it is).
    failed: Option<String>,
    /// New roles whose failure was announced (Fail).
    reported: Vec<u32>,
}

/// One line on stderr, `uraid serve: MSG` (a closed stderr is not an error).
fn log_line(msg: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "uraid serve: {msg}");
}

/// The thread that owns the array while it is served (see the module docs).
pub(crate) struct Manager {
    arr: Array,
    /// The exports of its volumes.
    exports: exports::Exports,
    opts: ManagerOptions,
    jobs: Receiver<Job>,
    live: Arc<Live>,
    events: Events,
    scrub: Option<Scrub>,
    /// With a schedule (`scrub_every`): when the next check is due, the
    /// interval after the end of the last one (from its stamp at start);
    /// `None` without one, or when that is past what the clock holds.
    next_check: Option<Instant>,
    /// Member states as last seen, to tell what changed.
    seen: Vec<MemberState>,
    degraded: bool,
    /// The volume whose members' details [`Live`] holds (its address).
    details_of: usize,
    /// Per rebuilding role, the last RebuildNN step announced (0: Started).
    announced: Vec<(u32, u64)>,
    journal_lost: Vec<bool>,
    /// Per volume, whether its cache lost writes (CacheLost was sent).
    cache_lost: Vec<bool>,
    /// A reshape under way (`grow` of the served array).
    reshape: Option<Reshaping>,
}

impl Manager {
    /// A manager of `arr`, whose volumes `exports` serve.
    pub(crate) fn new(
        arr: Array,
        exports: exports::Exports,
        opts: ManagerOptions,
        jobs: Receiver<Job>,
        live: Arc<Live>,
        events: Events,
    ) -> Manager {
        let st = arr.status();
        let degraded = is_degraded(&st);
        let journal_lost = st.volumes.iter().map(|v| v.journal_lost).collect();
        // The schedule goes on from the last check's end, as recorded.
        let age = match (&opts.scrub_every, &opts.check_stamp) {
            (Some(every), Some(p)) => match std::fs::metadata(p).and_then(|m| m.modified()) {
                Ok(t) => {
                    let age = std::time::SystemTime::now().duration_since(t).unwrap_or_default();
                    log_line(&format!(
                        "the last check of array '{}' ended {} s ago ({}); the next is due in {} s",
                        arr.name(),
                        age.as_secs(),
                        p.display(),
                        every.saturating_sub(age).as_secs()
                    ));
                    age
                }
                Err(_) => Duration::ZERO,
            },
            _ => Duration::ZERO,
        };
        let next_check = opts.scrub_every.and_then(|every| Instant::now().checked_add(every.saturating_sub(age)));
        // The control socket answers `status` from the first request on.
        *live.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
        let mut m = Manager {
            seen: arr.health().states(),
            arr,
            exports,
            opts,
            jobs,
            live,
            events,
            scrub: None,
            next_check,
            degraded,
            announced: Vec::new(),
            journal_lost,
            cache_lost: Vec::new(),
            details_of: 0,
            reshape: None,
        };
        m.publish_maintenance();
        // The console and `status` show the members' details from the
        // first request on, as they show the status.
        m.publish_members();
        m
    }

    /// Publishes the rates and the check schedule in force for `status`.
    fn publish_maintenance(&self) {
        let next = self.next_check.map(|due| {
            let now = std::time::SystemTime::now() + due.saturating_duration_since(Instant::now());
            now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
        });
        *self.live.maintenance.lock().unwrap_or_else(|p| p.into_inner()) = serde_json::json!({
            "rebuild_rate": self.opts.rebuild_rate,
            "scrub_rate": self.opts.scrub_rate,
            "scrub_every": self.opts.scrub_every.map(|d| d.as_secs()),
            "next_check_unix": next,
        });
    }

    /// The array, for a service that does not start after all.
    pub(crate) fn into_array(self) -> Array {
        self.arr
    }

    /// Runs until the service stops; returns the array for the final stop.
    pub(crate) fn run(mut self) -> Array {
        let st = self.arr.status();
        self.events.emit("NewArray", None, format!("array '{}' ({}) is served, {}", st.name, st.uuid, summary(&st)));
        if self.degraded {
            self.events.emit("DegradedArray", None, summary(&st));
        }
        // What the assemble did (journal records replayed, regions
        // resynced, stripes left unresynced), as `uraid assemble` prints it.
        for w in self.arr.take_warnings() {
            self.events.emit("AssembleWarning", None, w);
        }
        self.look();
        while !self.stopping() {
            self.live.interrupt.store(false, Ordering::Relaxed);
            while let Ok(job) = self.jobs.try_recv() {
                self.handle(job);
            }
            if self.reshape.as_ref().is_some_and(|r| r.failed.is_none()) {
                self.look();
                self.reshape_step();
                continue;
            }
            if self.reshape.is_none() {
                self.take_over();
            }
            self.look();
            if !self.arr.rebuilding().is_empty() {
                self.rebuild();
                continue;
            }
            if self.scrub.is_none() {
                if let (Some(every), Some(due)) = (self.opts.scrub_every, self.next_check) {
                    if Instant::now() >= due {
                        let vols = self.redundant();
                        if !vols.is_empty() {
                            self.events.emit("CheckStarted", None, format!("scheduled check (every {} s)", every.as_secs()));
                            self.scrub = Some(new_scrub(vols, false, self.opts.scrub_rate));
                        }
                        self.next_check = Instant::now().checked_add(every);
                        self.publish_maintenance();
                    }
                }
            }
            if self.scrub.is_some() {
                self.scrub_step();
                continue;
            }
            // Idle: a look a second (member faults met by the data path,
            // the scheduled check); a job or the stop's wake-up job at once.
            match self.jobs.recv_timeout(IDLE_LOOK) {
                Ok(job) => self.handle(job),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(IDLE_LOOK),
            }
        }
        if let Some(s) = self.scrub.take() {
            for w in s.waiters {
                let _ = w.send(Reply::failed(ErrorBody::new(
                    "Interrupted",
                    "the array is stopping; the scrub was not finished (run it again after the next start)",
                )));
            }
        }
        self.live.set_progress(None);
        if let Some(r) = self.reshape.take() {
            // The users quiet, the reshape is left recorded for the next
            // assemble (the frozen array's own stop writes nothing).
            let _ = self.quiet_export(Duration::from_secs(30));
            match r.grow.stop() {
                Ok(()) => self.log("the reshape stops where it is; the next assemble goes on from there".to_string()),
                Err(e) => self.log(format!("the reshape could not record its stop ({e}); the next assemble resyncs once it has finished it")),
            }
        }
        self.arr
    }

    /// Pauses the export and waits until its requests are answered, at
    /// most `limit` (see [`quiet_export`]).
    fn quiet_export(&self, limit: Duration) -> Result<bool, String> {
        Ok(self.exports.quiet(limit))
    }

    /// Waits until only `holders` handles on the export's former volume
    /// `old` are left: every connection moved on (they move between
    /// requests; a stop ends them).
    fn wait_unused(&self, old: &Arc<uraid_core::Volume>, holders: usize) {
        while Arc::strong_count(old) > holders && !self.exports.stopping() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts a reshape of the served array onto `add`, to `level` and
    /// `chunk` (see `uraid_core::control::array::Array::grow_live`): the
    /// export moves to the reshaping volume; the windows move in the
    /// background. A takeover (no data moves) pauses the export, swaps the
    /// array and moves the export to its volume; its new roles are then
    /// rebuilt in the background.
    fn grow(&mut self, add: &[String], force: bool, rate: Option<u64>, chunk: Option<u64>, level: Option<u32>) -> Result<serde_json::Value, ErrorBody> {
        let name = self.arr.name();
        if self.reshape.is_some() {
            return Err(ErrorBody::new("Busy", format!("array '{name}' is being reshaped already; 'uraid status {name}' shows how far")));
        }
        if !self.arr.rebuilding().is_empty() || self.scrub.is_some() {
            return Err(ErrorBody::new(
                "Busy",
                format!("array '{name}' runs a rebuild or a scrub; a reshape starts once it has ended ('uraid status {name}'). Nothing was written"),
            ));
        }
        if rate == Some(0) {
            return Err(ErrorBody::new("InvalidInput", "a reshape rate of 0 would never finish; give a positive rate or none"));
        }
        let specs = add.iter().map(|d| d.parse()).collect::<Result<Vec<MemberSpec>, uraid_core::Error>>()?;
        let opts = uraid_core::control::array::GrowOptions { add: specs, force, rate: None, level, chunk };
        // A live reshape routes the first volume's users alone; the
        // others would be restriped under their own exports' users.
        let served = self.exports.volumes();
        if served.len() > 1 {
            let names: Vec<String> = served.iter().map(|(_, n)| format!("'{n}'")).collect();
            return Err(ErrorBody::new(
                "Unsupported",
                format!(
                    "array '{name}' holds {} volumes, each exported ({}): a served Matrix array is not restriped under its \
                     users. Stop it ('uraid stop {name}'), grow it stopped ('uraid grow --add DEVICE MEMBER...'), then serve \
                     it again. Nothing was written",
                    served.len(),
                    names.join(", ")
                ),
            ));
        }
        let old = self.arr.volumes().to_vec();
        let (n0, level0) = (self.arr.member_count(), self.arr.volume_entries()[0].level);
        let exports = &self.exports;
        let mut paused = false;
        let mut quiet = || -> uraid_core::Result<()> {
            paused = true;
            match exports.quiet(Duration::from_secs(30)) {
                true => Ok(()),
                false => Err(uraid_core::Error::new(
                    uraid_core::ErrorKind::Busy,
                    "the export's clients did not finish their requests within 30 s; nothing was written, try again",
                )),
            }
        };
        let change = self.arr.grow_live(&opts, &mut quiet);
        let grow = match change {
            Ok(LiveChange::Reshape(grow)) => *grow,
            Ok(LiveChange::Converted(rep)) => {
                let moved = self.exports.replace_volumes(self.arr.volumes());
                self.exports.resume();
                if let Err(e) = moved {
                    self.log(format!("cannot move the export to the converted volume: {e}"));
                }
                self.move_export(old);
                self.seen = self.arr.health().states();
                let what = format!(
                    "RAID {level0} over {n0} members became RAID {} over {} (no data moved){}",
                    rep.level,
                    rep.members.1,
                    if rep.members.1 > n0 { "; the new member(s) are rebuilt now" } else { "" }
                );
                self.log(what.clone());
                self.events.emit("ReshapeStarted", None, what.clone());
                self.events.emit("ReshapeFinished", None, what);
                return Ok(serde_json::json!({"members": [n0, rep.members.1], "capacity": rep.capacity.1, "level": [level0, rep.level], "rebuilding": self.arr.rebuilding()}));
            }
            Err(e) => {
                if paused {
                    self.exports.resume();
                }
                return Err(e.into());
            }
        };
        let vol = grow.volume().clone();
        let n1 = grow.superblock().member_count;
        let level1 = grow.superblock().volumes[0].level;
        let (_, total) = grow.position();
        let rate = rate.or(Some(DEFAULT_RESHAPE_RATE));
        self.reshape = Some(Reshaping { grow, rate, announced: 0, since: (0, Instant::now()), failed: None, reported: Vec::new() });
        if let Err(e) = self.exports.replace_volumes(std::slice::from_ref(&vol)) {
            // Users stay on the old layout; nothing is moved meanwhile.
            self.log(format!("cannot move the export to the reshaping volume: {e}"));
            if let Some(r) = &mut self.reshape {
                r.failed = Some(format!("the export could not be moved to the reshaping volume: {e}"));
            }
            return Err(ErrorBody::new("Io", format!("the export could not be moved to the reshaping volume: {e}; stop the array, and the next assemble reshapes it")));
        }
        // The frozen array and this function hold it.
        self.wait_unused(&old[0], 2);
        self.live.set_reshape(serde_json::json!({"members": [n0, n1], "position": 0, "total": total, "failed": null}));
        let levels = if level1 != level0 { format!(", RAID {level0} to RAID {level1}") } else { String::new() };
        self.events.emit("ReshapeStarted", None, format!("from {n0} to {n1} members{levels}; the volume grows to {total} bytes when it ends"));
        Ok(serde_json::json!({"members": [n0, n1], "capacity": total, "rate": rate, "level": [level0, level1]}))
    }

    /// Grows the last volume into the room past it on every member
    /// (`grow --size`) while the array is served: the new area is zeroed
    /// while clients go on, then the export pauses, the volume's cache
    /// writes back and closes, the volume table and the bitmap grow, and
    /// the export resumes on the larger volume (new connections see it).
    fn resize(&mut self, size: &str) -> Result<serde_json::Value, ErrorBody> {
        let name = self.arr.name();
        if self.reshape.is_some() || !self.arr.rebuilding().is_empty() || self.scrub.is_some() {
            return Err(ErrorBody::new(
                "Busy",
                format!("array '{name}' runs a reshape, a rebuild or a scrub; grow it once that has ended ('uraid status {name}'). Nothing was written"),
            ));
        }
        let size = match size {
            "max" => uraid_core::control::array::NewSize::Max,
            s => uraid_core::control::array::NewSize::Bytes(
                s.parse().map_err(|_| ErrorBody::new("InvalidInput", format!("size {s:?} is neither a number of bytes nor 'max'")))?,
            ),
        };
        let plan = self.arr.plan_resize(size)?;
        self.arr.zero_new_area(&plan, &mut |_, _| {})?;
        if self.quiet_export(Duration::from_secs(30)) == Ok(false) {
            return Err(ErrorBody::new(
                "Busy",
                "the export's clients did not finish their requests within 30 s; the volume was not grown (its new area was zeroed), try again",
            ));
        }
        let old = self.arr.volumes().to_vec();
        let r = (|| -> uraid_core::Result<_> {
            self.arr.volumes()[plan.volume].close_cache()?;
            self.arr.apply_resize(&plan)
        })();
        if let Err(e) = self.exports.replace_volumes(self.arr.volumes()) {
            self.log(format!("cannot move the export to the grown volume: {e}"));
        }
        self.exports.resume();
        self.move_export(old);
        let rep = r?;
        self.log(format!("volume '{}' grew from {} to {} bytes", rep.volume, rep.capacity.0, rep.capacity.1));
        Ok(serde_json::json!({"volume": rep.volume, "capacity": [rep.capacity.0, rep.capacity.1], "member_size": [rep.member_size.0, rep.member_size.1]}))
    }

    /// Moves windows of the reshape until it ends, is paused (a command
    /// waits, the service stops) or fails; at its end, the array is made
    /// whole over every member and the export moves to it.
    fn reshape_step(&mut self) {
        let Some(mut r) = self.reshape.take() else { return };
        let live = self.live.clone();
        let events = self.events.clone();
        let (rate, mut announced, since) = (r.rate, r.announced, r.since);
        let name = self.arr.name();
        let members = [self.arr.member_count(), r.grow.superblock().member_count];
        let note = move |position: u64, total: u64, failed: Option<&str>| {
            serde_json::json!({"members": members, "position": position, "total": total, "failed": failed})
        };
        let res = r.grow.step(rate, &self.live.interrupt, &mut |done, total| {
            live.set_progress(Some(progress("reshape", format!("volume of '{name}'"), done, total, since.0, since.1, rate)));
            live.set_reshape(note(done, total, None));
            let step = (done * 100).checked_div(total).unwrap_or(100) / 20 * 20;
            if step > announced && step < 100 {
                announced = step;
                events.emit(&format!("Reshape{step}"), None, format!("{step}% reshaped"));
            }
        });
        r.announced = announced;
        for (role, dev) in r.grow.failed_new_roles() {
            if !r.reported.contains(&role) {
                r.reported.push(role);
                self.events.emit("Fail", Some(&dev), format!("role {role} (a new member) is faulty: the reshape goes on without it where the level allows"));
            }
        }
        let (position, total) = r.grow.position();
        match res {
            Ok(false) => {
                r.since = (r.grow.position().0, Instant::now());
                self.reshape = Some(r);
            }
            Ok(true) => self.finish_reshape(r),
            Err(e) => {
                self.log(format!("the reshape stopped: {e}"));
                self.events.emit("ReshapeFailed", None, format!("the reshape stopped: {e}"));
                self.live.set_progress(None);
                r.failed = Some(e.to_string());
                self.live.set_reshape(note(position, total, r.failed.as_deref()));
                self.reshape = Some(r);
            }
        }
    }

    /// The reshape has moved every window: the users pause, the array
    /// becomes whole over every member, the export moves to its volume
    /// (new connections see the new size).
    fn finish_reshape(&mut self, r: Reshaping) {
        if self.quiet_export(Duration::from_secs(30)) == Ok(false) {
            // Users on the reshaping volume are fine; try again later.
            self.reshape = Some(r);
            std::thread::sleep(Duration::from_millis(200));
            return;
        }
        let routed = r.grow.volume().clone();
        let (n0, n1) = (self.arr.member_count(), r.grow.superblock().member_count);
        match r.grow.finish(&mut self.arr) {
            Ok(rep) => {
                if let Err(e) = self.exports.replace_volumes(self.arr.volumes()) {
                    self.log(format!("cannot move the export to the grown volume: {e}"));
                }
                self.exports.resume();
                self.move_export(vec![routed]);
                self.live.set_progress(None);
                self.live.set_reshape(serde_json::Value::Null);
                self.seen = self.arr.health().states();
                self.events.emit(
                    "ReshapeFinished",
                    None,
                    format!(
                        "from {n0} to {n1} members in {:.1} s; the volume holds {} bytes now (new connections see it; grow the \
                         filesystem: resize2fs or xfs_growfs)",
                        rep.seconds, rep.capacity.1
                    ),
                );
            }
            Err(e) => {
                self.exports.resume();
                self.log(format!("the reshape could not be finished: {e}"));
                // LiveGrow is gone: the record stays for the next assemble.
                self.events.emit("ReshapeFailed", None, format!("the reshape could not be finished: {e}; stop the array, and the next assemble finishes it"));
                self.live.set_progress(None);
                let members = [n0, n1];
                let total = self.arr.volume().capacity();
                self.live.set_reshape(serde_json::json!({"members": members, "position": total, "total": total, "failed": e.to_string()}));
            }
        }
        self.look();
    }

    fn stopping(&self) -> bool {
        self.live.stop.load(Ordering::Relaxed)
    }

    /// Looks at the array once: events for what changed since the last
    /// look ([`notice`](Self::notice)), the status for the control socket,
    /// and the members' details when the members changed.
    fn look(&mut self) {
        let st = self.arr.status();
        self.notice(&st);
        *self.live.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
        self.publish_members();
    }

    /// Publishes the members' details (identity, sector sizes, shared
    /// device warnings) when the members changed since they were last
    /// published.
    fn publish_members(&mut self) {
        let vol = Arc::as_ptr(self.arr.volume()) as usize;
        if self.details_of != vol {
            self.details_of = vol;
            let infos: Vec<uraid_bench::machine::MemberInfo> =
                self.arr.volume().members().iter().map(uraid_bench::machine::member_info).collect();
            let warnings = uraid_bench::machine::shared_warnings(&infos);
            let sectors: Vec<u32> = self.arr.volume().members().iter().map(|m| m.block_size()).collect();
            let mut members = serde_json::to_value(&infos).unwrap_or_default();
            if let Some(a) = members.as_array_mut() {
                for (m, bs) in a.iter_mut().zip(sectors) {
                    m["logical_block_size"] = bs.into();
                }
            }
            *self.live.members.lock().unwrap_or_else(|p| p.into_inner()) = serde_json::json!({"members": members, "warnings": warnings});
        }
    }

    /// The redundant volumes' indexes.
    fn redundant(&self) -> Vec<usize> {
        let e = self.arr.volume_entries();
        (0..e.len()).filter(|&i| e[i].level != 0).collect()
    }

    /// Events for what changed since the last look, `st` being the
    /// array's status now: a member that became faulty (Fail; FailSpare
    /// when it was being rebuilt), the array becoming degraded
    /// (DegradedArray), a journal lost (JournalLost), a cache that lost
    /// writes (CacheLost).
    fn notice(&mut self, st: &ArrayStatus) {
        let now = self.arr.health().states();
        for (r, (&was, &is)) in self.seen.iter().zip(&now).enumerate() {
            if is == MemberState::Faulty && was != MemberState::Faulty {
                let dev = st.members.get(r).and_then(|m| m.device.clone());
                let ev = if was == MemberState::Rebuilding { "FailSpare" } else { "Fail" };
                self.events.emit(ev, dev.as_deref(), format!("role {r} is faulty: no longer read or written"));
            }
        }
        self.seen = now;
        let degraded = is_degraded(st);
        if degraded && !self.degraded {
            self.events.emit("DegradedArray", None, summary(st));
        }
        self.degraded = degraded;
        for (i, v) in st.volumes.iter().enumerate() {
            if v.journal_lost && !self.journal_lost.get(i).copied().unwrap_or(false) {
                self.events.emit("JournalLost", None, format!("volume '{}': the write journal is lost", v.name));
            }
        }
        self.journal_lost = st.volumes.iter().map(|v| v.journal_lost).collect();
        for (i, v) in self.arr.volumes().iter().enumerate() {
            let lost = v.cache().and_then(|c| c.lost_writes());
            let was = self.cache_lost.get(i).copied().unwrap_or(false);
            if let (Some(why), false) = (&lost, was) {
                let name = st.volumes.get(i).map(|v| v.name.clone()).unwrap_or_default();
                self.events.emit("CacheLost", None, format!("volume '{name}': writes held in its cache were lost: {why}"));
            }
            if self.cache_lost.len() <= i {
                self.cache_lost.resize(i + 1, false);
            }
            self.cache_lost[i] = was || lost.is_some();
        }
    }

    /// Moves spares into faulty or missing roles: new volumes over them,
    /// the export moved to them (requests in flight finish on the old
    /// ones), then the roles start rebuilding.
    fn take_over(&mut self) {
        let down = (0..self.arr.member_count())
            .any(|r| matches!(self.arr.health().state(r), MemberState::Faulty | MemberState::Missing));
        if !down || self.arr.superblock().spares().is_empty() {
            return;
        }
        let old = self.arr.volumes().to_vec();
        match self.arr.attach_spares() {
            Ok(roles) if !roles.is_empty() => {
                self.log(format!("a spare takes over role(s) {roles:?}; moving the connections to it"));
                if !self.move_export(old) {
                    return;
                }
                let started = self.arr.start_rebuilding(&roles);
                for w in self.arr.take_warnings() {
                    self.log(format!("warning: {w}"));
                }
                if let Err(e) = started {
                    self.log(format!("cannot start the rebuild onto the spare: {e}"));
                }
                self.seen = self.arr.health().states();
            }
            Ok(_) => {}
            Err(e) => self.log(format!("a spare could not take over: {e}")),
        }
    }

    /// Moves each export from its volume of `old` (the array's volumes
    /// before a change, in the order of the volume table) to the same
    /// volume of the array now, and waits until no connection uses a
    /// replaced one. False when an export refused it.
    fn move_export(&mut self, old: Vec<Arc<uraid_core::Volume>>) -> bool {
        let replaced: Vec<Arc<uraid_core::Volume>> = old
            .into_iter()
            .enumerate()
            .filter(|(i, o)| !self.arr.volumes().get(*i).is_some_and(|now| Arc::ptr_eq(o, now)))
            .map(|(_, o)| o)
            .collect();
        if replaced.is_empty() {
            return true;
        }
        if let Err(e) = self.exports.replace_volumes(self.arr.volumes()) {
            self.log(format!("cannot move the export to the new volume: {e}"));
            return false;
        }
        for o in &replaced {
            self.wait_unused(o, 1);
        }
        true
    }

    /// Records now as the end of the last check (the stamp's
    /// modification time), when a schedule keeps one. A stamp that cannot
    /// be written is told, and the schedule then counts from this start.
    fn touch_check_stamp(&self) {
        let (Some(_), Some(p)) = (&self.opts.scrub_every, &self.opts.check_stamp) else { return };
        let r = p
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| {
                // Never through a symbolic link planted at the stamp's name.
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_NOFOLLOW).open(p)
            })
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        if let Err(e) = r {
            self.log(format!(
                "cannot record the end of this check in {} ({e}); after a restart the schedule counts from the start (set URAID_STATE_DIR to a writable directory)",
                p.display()
            ));
        }
    }

    fn log(&self, msg: String) {
        log_line(&msg);
    }

    /// Runs the rebuild of the rebuilding roles until it ends or is
    /// paused, with progress and the Rebuild events.
    fn rebuild(&mut self) {
        let roles = self.arr.rebuilding();
        let devices: Vec<String> = {
            let st = self.arr.status();
            (0..self.arr.member_count()).map(|r| device_of(&st, r)).collect()
        };
        for &r in &roles {
            if !self.announced.iter().any(|&(a, _)| a == r) {
                let dev = &devices[r as usize];
                self.events.emit("RebuildStarted", Some(dev), format!("role {r} is being rebuilt"));
                self.announced.push((r, 0));
            }
        }
        let rate = self.opts.rebuild_rate;
        let live = self.live.clone();
        let events = self.events.clone();
        let mut announced = std::mem::take(&mut self.announced);
        let mut since: Option<(u32, u64, Instant)> = None;
        // The status follows the rebuild: member states, recovery
        // offsets, events and cache counters (not only the progress).
        let mut refresh = status_refresher(self.live.clone(), self.arr.status_source());
        let r = self.arr.rebuild_until(rate, Some(&self.live.interrupt), &mut |role, done, total| {
            refresh();
            // The rate is over this role's run so far.
            if !matches!(since, Some((r, _, _)) if r == role) {
                since = Some((role, done, Instant::now()));
            }
            let (_, d0, t0) = since.expect("set above");
            live.set_progress(Some(progress("rebuild", format!("role {role}"), done, total, d0, t0, rate)));
            let step = (done * 100).checked_div(total).unwrap_or(100) / 20 * 20;
            if let Some(a) = announced.iter_mut().find(|(r, _)| *r == role) {
                if step > a.1 && step < 100 {
                    a.1 = step;
                    events.emit(&format!("Rebuild{step}"), devices.get(role as usize).map(String::as_str), format!("role {role}: {step}% rebuilt"));
                }
            }
        });
        self.announced = announced;
        self.live.set_progress(None);
        match r {
            Ok(reports) => {
                for (role, rep) in roles.iter().zip(&reports) {
                    let dev = &devices[*role as usize];
                    self.events.emit(
                        "RebuildFinished",
                        Some(dev),
                        format!(
                            "role {role} rebuilt: {} bytes written, {} zeroed, {} already in sync, in {:.1} s",
                            rep.bytes_written, rep.bytes_skipped, rep.bytes_in_sync, rep.seconds
                        ),
                    );
                    self.events.emit("SpareActive", Some(dev), format!("role {role} is active"));
                    self.announced.retain(|&(a, _)| a != *role);
                }
            }
            Err(e) if e.kind() == uraid_core::ErrorKind::Interrupted => {}
            Err(e) => {
                self.log(format!("the background rebuild failed: {e}"));
                self.look();
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        self.look();
    }

    /// Scrubs until the scrub ends or is paused; at its end, replies to
    /// those waiting and reports mismatches (MismatchesFound).
    fn scrub_step(&mut self) {
        let Some(mut s) = self.scrub.take() else { return };
        let entries = self.arr.volume_entries();
        let Some(&index) = s.volumes.get(s.at) else {
            self.finish_scrub(s);
            return;
        };
        let name = entries[index].name.clone();
        let action = if s.repair { "repair" } else { "check" };
        let opts = CheckOptions { start_stripe: s.start_stripe, rate: s.rate, stop: Some(&self.live.interrupt) };
        let live = self.live.clone();
        let (rate, since) = (s.rate, s.since);
        let mut refresh = status_refresher(self.live.clone(), self.arr.status_source());
        let r = self.arr.check_part(index, s.repair, &opts, &mut s.report, &mut |done, total| {
            refresh();
            live.set_progress(Some(progress(action, name.clone(), done, total, since.0, since.1, rate)));
        });
        match r {
            Ok(Some(stripe)) => {
                // Paused for a command: resume there.
                s.start_stripe = stripe;
                s.since = (self.live.progress().map(|p| p.done).unwrap_or(0), Instant::now());
                self.scrub = Some(s);
            }
            Ok(None) => {
                let report = std::mem::take(&mut s.report);
                self.live.set_mismatches(&name, report.mismatches);
                if report.mismatches > 0 {
                    self.events.emit(
                        "MismatchesFound",
                        None,
                        format!(
                            "volume '{name}': {} stripe(s) whose copies or parity disagree{}",
                            report.mismatches,
                            if s.repair { format!(", {} repaired", report.repaired) } else { String::new() }
                        ),
                    );
                }
                s.done.push(serde_json::json!({
                    "volume": name, "level": entries[index].level, "repair": s.repair,
                    "report": serde_json::to_value(&report).unwrap_or_default(),
                }));
                s.at += 1;
                s.start_stripe = 0;
                s.since = (0, Instant::now());
                if s.at < s.volumes.len() {
                    self.scrub = Some(s);
                } else {
                    self.finish_scrub(s);
                }
            }
            Err(e) => {
                for w in s.waiters {
                    let _ = w.send(Reply::failed(e.clone().into()));
                }
                self.live.set_progress(None);
            }
        }
        self.look();
    }

    fn finish_scrub(&mut self, s: Scrub) {
        self.live.set_progress(None);
        self.next_check = self.opts.scrub_every.and_then(|every| Instant::now().checked_add(every));
        self.publish_maintenance();
        self.touch_check_stamp();
        let result = serde_json::Value::Array(s.done);
        for w in s.waiters {
            let _ = w.send(Reply::done(result.clone()));
        }
    }

    /// The role or slot `m` names: a number, or one of the array's devices.
    fn resolve(&self, m: &str) -> Result<u32, ErrorBody> {
        if let Ok(n) = m.trim().parse::<u32>() {
            return Ok(n);
        }
        let spec: MemberSpec = m.parse().map_err(|e: uraid_core::Error| ErrorBody::from(e))?;
        self.arr.slot_of(&spec).ok_or_else(|| {
            ErrorBody::new(
                "InvalidInput",
                format!("{m} is not a member of array '{}'; give a role number (see 'uraid status') or a member's path", self.arr.name()),
            )
        })
    }

    /// Carries out one command and replies (a scrub replies when it ends).
    /// The status is taken again before the reply, so that a client that
    /// asks for it after the reply (`uraid fail` prints it) sees what the
    /// command did, never the status from before it.
    fn handle(&mut self, job: Job) {
        let r = self.execute(&job);
        self.look();
        if let Some(r) = r {
            let _ = job.reply.send(match r {
                Ok(v) => Reply::done(v),
                Err(e) => Reply::failed(e),
            });
        }
    }

    /// `None` when the reply comes later (a scrub).
    fn execute(&mut self, job: &Job) -> Option<Result<serde_json::Value, ErrorBody>> {
        Some(match &job.cmd {
            Command::Fail { member, force } => (|| {
                let role = self.resolve(member)?;
                self.arr.fail(role, *force)?;
                Ok(serde_json::json!({"role": role, "events": self.arr.events()}))
            })(),
            Command::Remove { member } => (|| {
                let slot = self.resolve(member)?;
                let old = self.arr.volumes().to_vec();
                self.arr.remove(slot)?;
                self.move_export(old);
                Ok(serde_json::json!({"slot": slot, "events": self.arr.events()}))
            })(),
            Command::Add { device, force } => (|| {
                let spec: MemberSpec = device.parse().map_err(|e: uraid_core::Error| ErrorBody::from(e))?;
                let slot = self.arr.add_spare(&spec, *force)?;
                let down = (0..self.arr.member_count())
                    .find(|&r| matches!(self.arr.health().state(r), MemberState::Faulty | MemberState::Missing));
                Ok(serde_json::json!({"slot": slot, "takes_over": down, "events": self.arr.events()}))
            })(),
            Command::Replace { old, new, force } => (|| {
                let role = self.resolve(old)?;
                if role >= self.arr.member_count() {
                    return Err(ErrorBody::new("InvalidInput", format!("slot {role} is a spare, not a role: nothing to replace")));
                }
                let spec: MemberSpec = new.parse().map_err(|e: uraid_core::Error| ErrorBody::from(e))?;
                let slot = self.arr.add_spare(&spec, *force)?;
                if matches!(self.arr.health().state(role), MemberState::Active | MemberState::Rebuilding) {
                    if let Err(e) = self.arr.fail(role, *force) {
                        // Nothing else changes: the new drive goes again.
                        let _ = self.arr.remove(slot);
                        return Err(e.into());
                    }
                }
                Ok(serde_json::json!({"role": role, "events": self.arr.events()}))
            })(),
            Command::Rebuild { rate } => {
                if *rate == Some(0) {
                    Err(ErrorBody::new("InvalidInput", "a rebuild rate of 0 would never finish; give a positive rate or none"))
                } else {
                    self.opts.rebuild_rate = *rate;
                    self.publish_maintenance();
                    Ok(serde_json::json!({"rate": rate, "rebuilding": self.arr.rebuilding()}))
                }
            }
            Command::Check { .. } if self.reshape.is_some() => Err(ErrorBody::new(
                "Busy",
                format!("array '{}' is being reshaped; check it once the reshape has ended", self.arr.name()),
            )),
            Command::Check { volume, repair, rate } => {
                let vols = match volume {
                    Some(name) => match self.arr.volume_index(name) {
                        Ok(i) if self.arr.volume_entries()[i].level != 0 => vec![i],
                        Ok(_) => return Some(Err(ErrorBody::new("InvalidInput", format!("volume '{name}' is RAID 0: it keeps no copies or parity to check")))),
                        Err(e) => return Some(Err(e.into())),
                    },
                    None => self.redundant(),
                };
                if vols.is_empty() {
                    return Some(Err(ErrorBody::new(
                        "InvalidInput",
                        format!("array '{}' has no redundant volume to check (RAID 0 keeps no copies or parity)", self.arr.name()),
                    )));
                }
                if *rate == Some(0) {
                    return Some(Err(ErrorBody::new("InvalidInput", "a scrub rate of 0 would never finish; give a positive rate or none")));
                }
                match &mut self.scrub {
                    Some(s) if s.volumes == vols && s.repair == *repair => s.waiters.push(job.reply.clone()),
                    Some(s) => {
                        return Some(Err(ErrorBody::new(
                            "Busy",
                            format!(
                                "a {} of volume(s) {:?} is running; wait for it ('uraid status {}' shows its progress)",
                                if s.repair { "repair" } else { "check" },
                                s.volumes,
                                self.arr.name()
                            ),
                        )))
                    }
                    None => {
                        let mut s = new_scrub(vols, *repair, rate.or(self.opts.scrub_rate));
                        s.waiters.push(job.reply.clone());
                        self.scrub = Some(s);
                    }
                }
                return None;
            }
            Command::CheckStop => match self.scrub.take() {
                Some(s) => {
                    let p = self.live.progress();
                    self.live.set_progress(None);
                    let at = p.as_ref().map(|p| p.percent()).unwrap_or(0.0);
                    let what = if s.repair { "repair" } else { "check" };
                    for w in s.waiters {
                        let _ = w.send(Reply::failed(ErrorBody::new("Interrupted", format!("the {what} was stopped by request at {at:.1}%"))));
                    }
                    Ok(serde_json::json!({"stopped": what, "percent": at, "found_so_far": serde_json::to_value(&s.report).unwrap_or_default()}))
                }
                None => Err(ErrorBody::new("InvalidInput", format!("array '{}' runs no check or repair", self.arr.name()))),
            },
            Command::Config { volume, mode, cache_size, dirty_limit } => self.config(volume.as_deref(), mode, *cache_size, *dirty_limit),
            Command::Grow { size: Some(size), add, .. } if add.is_empty() => self.resize(size),
            Command::Grow { size: Some(_), .. } => Err(ErrorBody::new("InvalidInput", "grow takes --add or --size, not both: one change at a time")),
            Command::Grow { add, force, rate, size: None, chunk, level } => self.grow(add, *force, *rate, *chunk, *level),
            Command::Takeover { quiet_seconds, by } => {
                takeover::hand_over(&self.exports, &self.live, &self.events, &self.arr.name(), *quiet_seconds, *by)
            }
            Command::Status | Command::Stop | Command::Monitor | Command::TestMessage => {
                Err(ErrorBody::new("Protocol", format!("'{}' is answered by the control socket, not the manager", job.cmd.name())))
            }
        })
    }
}

impl Manager {
    /// Changes the cache of `volume` (every volume when `None`) to `mode`
    /// while it is served: the export pauses (clients wait), the old cache
    /// writes back what it holds and closes, the volume is made anew with
    /// the new cache, the export resumes on it. Refused, changing nothing:
    /// an unknown volume or mode, the journal mode either way (its device
    /// is given at assemble), sizes the cache cannot use, clients that do
    /// not finish their requests within 30 s.
    fn config(&mut self, volume: Option<&str>, mode: &str, size: Option<u64>, dirty: Option<u64>) -> Result<serde_json::Value, ErrorBody> {
        use uraid_core::cache::CacheMode;
        let mode: CacheMode = mode.parse().map_err(|e: uraid_core::Error| ErrorBody::from(e))?;
        let name = self.arr.name();
        let not_live = |why: &str| {
            ErrorBody::new(
                "NotLive",
                format!("{why}: stop the array ('uraid stop {name}'), run 'uraid config {name} ...', then serve it again. Nothing was changed"),
            )
        };
        if mode == CacheMode::Journal {
            return Err(not_live("the journal mode needs its journal device given with the members at assemble"));
        }
        let entries = self.arr.volume_entries();
        let chosen: Vec<usize> = match volume {
            Some(v) => vec![self.arr.volume_index(v)?],
            None => (0..entries.len()).collect(),
        };
        let mut cfgs = Vec::new();
        for &i in &chosen {
            let cur = entries[i].cache_config()?;
            if cur.mode == CacheMode::Journal {
                return Err(not_live(&format!("volume '{}' keeps a write journal, which is left with the array stopped", entries[i].name)));
            }
            let size = size.unwrap_or(cur.size);
            let cfg = uraid_core::cache::CacheConfig { mode, size, dirty_limit: dirty.unwrap_or(cur.dirty_limit).min(size) };
            uraid_core::cache::Cache::check_config(&self.arr.volumes()[i], &cfg)
                .map_err(|e| ErrorBody::new("InvalidInput", format!("volume '{}': {e}", entries[i].name)))?;
            cfgs.push(cfg);
        }
        // The exported volumes: quiet their clients first.
        let exported = self.exports.volumes().iter().any(|(i, _)| chosen.contains(i));
        if exported && !self.quiet_export(Duration::from_secs(30)).map_err(|e| ErrorBody::new("InvalidInput", e))? {
            return Err(ErrorBody::new(
                "Busy",
                "the export's clients did not finish their requests within 30 s; nothing was changed, try again",
            ));
        }
        let old = self.arr.volumes().to_vec();
        let mut result = Ok(());
        for (&i, cfg) in chosen.iter().zip(&cfgs) {
            let r = (|| -> uraid_core::Result<()> {
                self.arr.set_cache(Some(&entries[i].name), cfg)?;
                // Writes back what the old cache holds, then stops it.
                self.arr.volumes()[i].close_cache()?;
                self.arr.renew_volume(i)
            })();
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        if exported {
            if let Err(e) = self.exports.replace_volumes(self.arr.volumes()) {
                self.log(format!("cannot move the export to the new volume: {e}"));
            }
            self.exports.resume();
            self.move_export(old);
        }
        result?;
        let names: Vec<String> = chosen.iter().map(|&i| entries[i].name.clone()).collect();
        self.events.emit("CacheChanged", None, format!("volume(s) {names:?}: cache {} (live)", mode.name()));
        Ok(serde_json::json!({
            "volumes": names,
            "mode": mode.name(),
            "warning": (mode == CacheMode::WriteBack).then_some(uraid_core::control::array::WRITEBACK_WARNING),
        }))
    }
}

/// Pauses `export` of `server` and waits until its requests are answered,
/// at most `limit`; `Ok(false)` when they were not (the export is
/// resumed). Errors: the export cannot be paused (the server's why).

fn new_scrub(volumes: Vec<usize>, repair: bool, rate: Option<u64>) -> Scrub {
    Scrub {
        volumes,
        at: 0,
        start_stripe: 0,
        repair,
        rate,
        report: CheckReport::default(),
        done: Vec::new(),
        waiters: Vec::new(),
        since: (0, Instant::now()),
    }
}

/// Progress of `action` on `target`: `done` of `total` bytes, at the rate
/// since `d0` bytes were done at `t0`.
fn progress(action: &str, target: String, done: u64, total: u64, d0: u64, t0: Instant, limit: Option<u64>) -> Progress {
    let secs = t0.elapsed().as_secs_f64();
    let rate = if secs > 0.5 { done.saturating_sub(d0) as f64 / secs } else { 0.0 };
    Progress {
        action: action.to_string(),
        target,
        done,
        total,
        mb_per_s: rate / 1e6,
        eta_seconds: (rate > 0.0).then(|| total.saturating_sub(done) as f64 / rate),
        rate_limit: limit,
    }
}

/// The device path of slot `slot` in `st`, or "role N" when none holds it.
fn device_of(st: &ArrayStatus, slot: u32) -> String {
    st.members.get(slot as usize).and_then(|m| m.device.clone()).unwrap_or_else(|| format!("role {slot}"))
}

/// Whether a volume of `st` runs without full redundancy.
fn is_degraded(st: &ArrayStatus) -> bool {
    st.volumes.iter().any(|v| matches!(v.state.as_str(), "degraded" | "rebuilding" | "failed"))
}

/// `raid5 [4/3] [UU_U] degraded` for each volume.
fn summary(st: &ArrayStatus) -> String {
    let n = st.member_count as usize;
    let up = st.members.iter().take(n).filter(|m| m.state == "active").count();
    let map: String = st.members.iter().take(n).map(|m| if m.state == "active" { 'U' } else { '_' }).collect();
    st.volumes
        .iter()
        .map(|v| format!("volume '{}' raid{} [{n}/{up}] [{map}] {}", v.name, v.level, v.state))
        .collect::<Vec<_>>()
        .join("; ")
}
