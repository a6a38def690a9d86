//! The commands the manager carries out for the control socket (and the
//! console): fail, remove, add, replace, the rebuild rate, check and
//! repair (replied to when the scrub ends), a live cache change, grow and
//! takeover, each replied to with the status taken after it.

use std::time::Duration;

use uraid_core::control::array::Replacement;
use uraid_core::raid::health::MemberState;
use uraid_core::MemberSpec;

use super::maintenance::new_scrub;
use super::proto::{Command, ErrorBody, Reply};
use super::{takeover, Job, Manager};

impl Manager {
    /// Carries out one command and replies (a scrub replies when it ends).
    /// The status is taken again before the reply, so that a client that
    /// asks for it after the reply (`uraid fail` prints it) sees what the
    /// command did, never the status from before it.
    pub(super) fn handle(&mut self, job: Job) {
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
                let role = self.arr.resolve(member)?;
                self.arr.fail(role, *force)?;
                Ok(serde_json::json!({"role": role, "events": self.arr.events()}))
            })(),
            Command::Remove { member } => (|| {
                let slot = self.arr.resolve(member)?;
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
                let role = self.arr.resolve(old)?;
                let spec: MemberSpec = new.parse().map_err(|e: uraid_core::Error| ErrorBody::from(e))?;
                // The spare goes in once the users run on its volumes (`take_over`).
                self.arr.replace(role, &spec, *force, Replacement::AsSpare)?;
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
            Command::Check { volume, repair, rate } => return self.check(job, volume.as_deref(), *repair, *rate),
            Command::CheckStop => self.check_stop(),
            Command::Config { volume, mode, cache_size, dirty_limit } => self.config(volume.as_deref(), mode, *cache_size, *dirty_limit),
            Command::Grow { size: Some(size), add, .. } if add.is_empty() => self.resize(size),
            Command::Grow { size: Some(_), .. } => Err(ErrorBody::new("InvalidInput", "grow takes --add or --size, not both: one change at a time")),
            Command::Grow { add, force, rate, size: None, chunk, level } => self.grow(add, *force, *rate, *chunk, *level),
            Command::Takeover { quiet_seconds, by } => {
                takeover::hand_over(&self.exports, &self.live, &self.events, &self.arr.name(), *quiet_seconds, *by)
            }
            Command::Status | Command::Stop | Command::Monitor | Command::TestMessage | Command::Iostat => {
                Err(ErrorBody::new("Protocol", format!("'{}' is answered by the control socket, not the manager", job.cmd.name())))
            }
        })
    }

    /// `check` / `repair` of `volume` (every redundant one when `None`) at
    /// `rate`: starts a scrub, or joins the same one running; `None` (the
    /// reply comes when it ends) unless refused.
    fn check(&mut self, job: &Job, volume: Option<&str>, repair: bool, rate: Option<u64>) -> Option<Result<serde_json::Value, ErrorBody>> {
        let vols = match volume {
            Some(name) => match self.arr.volume_index(name) {
                Ok(i) if self.arr.volume_entries()[i].redundant() => vec![i],
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
        if rate == Some(0) {
            return Some(Err(ErrorBody::new("InvalidInput", "a scrub rate of 0 would never finish; give a positive rate or none")));
        }
        match &mut self.scrub {
            Some(s) if s.volumes == vols && s.repair == repair => s.waiters.push(job.reply.clone()),
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
                let mut s = new_scrub(vols, repair, rate.or(self.opts.scrub_rate));
                s.waiters.push(job.reply.clone());
                self.scrub = Some(s);
            }
        }
        None
    }

    /// `check --stop`: ends the scrub running (those waiting for it are
    /// told it was stopped) and says how far it got.
    fn check_stop(&mut self) -> Result<serde_json::Value, ErrorBody> {
        match self.scrub.take() {
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
        }
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
            uraid_core::cache::Cache::check_config(self.arr.volumes()[i].raid(), &cfg)
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
