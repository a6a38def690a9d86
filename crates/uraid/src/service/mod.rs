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
//!   Its parts: `commands` (what each command does), `maintenance`
//!   (rebuild, scrubs, their progress), `reshape` (grow while served);
//!   [`live`]: what it shares with the other threads.
//! - [`events`]: mdadm's events to the system log, a program, mail and
//!   the monitors.
//! - [`console`], [`metrics`] (over [`http`]), [`figures`]: the web
//!   console, the Prometheus metrics, the exports' I/O figures;
//!   [`takeover`]: the hand-over to a new `serve`.
//!
//! The manager reaches the array only through `uraid_core::control`'s
//! `Array` and the exports only through [`exports::Exports`] (each export
//! moved to its own volume's replacement).

pub(crate) mod client;
mod commands;
pub(crate) mod console;
mod console_bench;
mod console_create;
mod drives;
pub(crate) mod ctl;
pub(crate) mod exports;
pub(crate) mod events;
pub(crate) mod figures;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod live;
mod maintenance;
pub(crate) mod metrics;
pub(crate) mod proto;
pub(crate) mod reload;
mod reshape;
pub(crate) mod takeover;
pub(crate) mod wake;

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uraid_core::control::array::{Array, ArrayStatus};
use uraid_core::raid::health::MemberState;

pub(crate) use self::live::Live;
use self::events::Events;
use self::maintenance::{new_scrub, Scrub};
use self::proto::{Command, ErrorBody, Reply};
use self::reshape::Reshaping;

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

/// How often the idle manager looks at the array (its status and the
/// members' states, for `status` and the events).
const IDLE_LOOK: Duration = Duration::from_secs(1);

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
    /// Per role, the read errors repaired from redundancy as last seen
    /// (ReadErrorCorrected for each rise).
    read_errors_seen: Vec<u64>,
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
            read_errors_seen: Vec::new(),
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
    /// most `limit` (see [`Self::quiet_export`]).
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
        *self.live.io_source.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.arr.status_source().io_source());
        self.publish_members();
    }

    /// Publishes the members' details (identity, sector sizes, shared
    /// device warnings) when the members changed since they were last
    /// published.
    fn publish_members(&mut self) {
        let vol = Arc::as_ptr(self.arr.volume()) as usize;
        if self.details_of != vol {
            self.details_of = vol;
            let infos: Vec<uraid_core::io::facts::MemberInfo> =
                self.arr.volume().raid().members().iter().map(uraid_core::io::facts::member_info).collect();
            let warnings = uraid_core::io::facts::shared_warnings(&infos);
            let sectors: Vec<u32> = self.arr.volume().raid().members().iter().map(|m| m.block_size()).collect();
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
        (0..e.len()).filter(|&i| e[i].redundant()).collect()
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
                // Failed for its read errors: say so (md's "too many read errors").
                let why = self.arr.health().read_errors().failed_reason(r as u32).map(|w| format!(" ({w})")).unwrap_or_default();
                self.events.emit(ev, dev.as_deref(), format!("role {r} is faulty: no longer read or written{why}"));
            }
        }
        self.seen = now;
        // Read errors repaired from redundancy since the last look.
        for m in &st.members {
            let Some(r) = m.role.map(|r| r as usize) else { continue };
            let was = self.read_errors_seen.get(r).copied().unwrap_or(0);
            if m.read_errors_corrected > was {
                let n = m.read_errors_corrected;
                let detail = format!(
                    "role {r}: {} read error(s) repaired from redundancy ({n} since assembled): the range was rewritten and the member stays in",
                    n - was
                );
                self.events.emit("ReadErrorCorrected", m.device.as_deref(), detail);
            }
        }
        self.read_errors_seen = st.members.iter().filter(|m| m.role.is_some()).map(|m| m.read_errors_corrected).collect();
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
        if down && self.arr.superblock().spares().is_empty() && self.arr.distributed_spare_due() {
            // A declustered volume's distributed spare: the volumes stay,
            // the data path sends the role's I/O to the spare chunks.
            match self.arr.take_distributed_spares() {
                Ok(roles) if !roles.is_empty() => {
                    self.log(format!("distributed spare space takes over role(s) {roles:?}; rebuilding into it"));
                    self.seen = self.arr.health().states();
                }
                Ok(_) => {}
                Err(e) => self.log(format!("a distributed spare could not take over: {e}")),
            }
            return;
        }
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

    fn log(&self, msg: String) {
        log_line(&msg);
    }

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
        .map(|v| format!("volume '{}' {} [{n}/{up}] [{map}] {}", v.name, crate::common::level_name(v.level), v.state))
        .collect::<Vec<_>>()
        .join("; ")
}
