//! The manager's background maintenance: the rebuild of rebuilding roles
//! and the scrubs (checks and repairs, asked for or scheduled), with their
//! progress, the status kept current while they run, their events, and
//! the scheduled check's stamp.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uraid_core::control::array::ArrayStatus;
use uraid_core::control::maint::{CheckOptions, CheckReport};

use super::proto::{Progress, Reply};
use super::{Live, Manager};

/// How often the status is taken again while a rebuild or a scrub runs
/// (at its progress calls), so that every view follows it.
const LIVE_STATUS_EVERY: Duration = Duration::from_millis(200);

/// A progress callback's status refresher: takes the status from
/// `source` into `live` at most every [`LIVE_STATUS_EVERY`].
pub(super) fn status_refresher(live: Arc<Live>, source: uraid_core::control::array::StatusSource) -> impl FnMut() {
    let mut last = Instant::now();
    move || {
        if last.elapsed() >= LIVE_STATUS_EVERY {
            last = Instant::now();
            live.set_status(source.status());
        }
    }
}

/// A scrub under way.
pub(super) struct Scrub {
    /// Indexes of the volumes to scrub, in order.
    pub(super) volumes: Vec<usize>,
    /// The volume being scrubbed (index into `volumes`).
    at: usize,
    /// Where to resume in it.
    start_stripe: u64,
    pub(super) repair: bool,
    rate: Option<u64>,
    pub(super) report: CheckReport,
    /// Reports of the volumes done, as `uraid check --json` prints them.
    done: Vec<serde_json::Value>,
    /// Who waits for the reports.
    pub(super) waiters: Vec<std::sync::mpsc::Sender<Reply>>,
    /// Bytes done and time when this volume's scrub (re)started, for its rate.
    since: (u64, Instant),
}

impl Manager {
    /// Records now as the end of the last check (the stamp's
    /// modification time), when a schedule keeps one. A stamp that cannot
    /// be written is told, and the schedule then counts from this start.
    pub(super) fn touch_check_stamp(&self) {
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

    /// Runs the rebuild of the rebuilding roles until it ends or is
    /// paused, with progress and the Rebuild events.
    pub(super) fn rebuild(&mut self) {
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
                            "role {role} rebuilt: {} bytes written, {} skipped (no data there), {} already in sync, in {:.1} s",
                            rep.bytes_written, rep.bytes_skipped, rep.bytes_in_sync, rep.seconds
                        ),
                    );
                    let held = self.arr.spare_space().into_iter().find(|u| u.role == *role);
                    match held {
                        Some(u) => self.events.emit("SpareActive", Some(dev), format!("role {role} is active in distributed spare {}", u.spare)),
                        None => self.events.emit("SpareActive", Some(dev), format!("role {role} is active")),
                    }
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
    pub(super) fn scrub_step(&mut self) {
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
}

/// A scrub of `volumes` (indexes, in order), a repair when `repair`, at
/// `rate` bytes/s (none: no limit), from their start.
pub(super) fn new_scrub(volumes: Vec<usize>, repair: bool, rate: Option<u64>) -> Scrub {
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
pub(super) fn progress(action: &str, target: String, done: u64, total: u64, d0: u64, t0: Instant, limit: Option<u64>) -> Progress {
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
