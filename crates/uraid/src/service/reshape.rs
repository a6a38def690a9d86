//! A reshape of the served array (`grow` while it is served): started
//! onto new members or to a new level or chunk (a takeover when no data
//! moves), its windows moved in the background, finished with the export
//! moved to the array made whole; and `grow --size` of the last volume.

use std::time::{Duration, Instant};

use uraid_core::control::array::LiveChange;
use uraid_core::MemberSpec;

use super::maintenance::progress;
use super::proto::ErrorBody;
use super::Manager;

/// Default rate of a reshape of a served array, logical bytes moved per
/// second (md's `speed_limit_max` is 200 MB/s of resync; a reshape reads
/// and writes, and users share the members meanwhile).
pub(crate) const DEFAULT_RESHAPE_RATE: u64 = 100_000_000;

/// A reshape of the served array under way.
pub(super) struct Reshaping {
    pub(super) grow: uraid_core::control::array::LiveGrow,
    /// Logical bytes per second.
    rate: Option<u64>,
    /// The last ReshapeNN step announced.
    announced: u64,
    /// Position and time when this run (re)started, for the rate.
    since: (u64, Instant),
    /// Why it stopped, when it failed (it is then left where it is).
    pub(super) failed: Option<String>,
    /// New roles whose failure was announced (Fail).
    reported: Vec<u32>,
}

impl Manager {
    /// Starts a reshape of the served array onto `add`, to `level` and
    /// `chunk` (see `uraid_core::control::array::Array::grow_live`): the
    /// export moves to the reshaping volume; the windows move in the
    /// background. A takeover (no data moves) pauses the export, swaps the
    /// array and moves the export to its volume; its new roles are then
    /// rebuilt in the background.
    pub(super) fn grow(&mut self, add: &[String], force: bool, rate: Option<u64>, chunk: Option<u64>, level: Option<u32>) -> Result<serde_json::Value, ErrorBody> {
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
    pub(super) fn resize(&mut self, size: &str) -> Result<serde_json::Value, ErrorBody> {
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
    pub(super) fn reshape_step(&mut self) {
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
}
