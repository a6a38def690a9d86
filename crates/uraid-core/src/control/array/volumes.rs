//! The array's volumes: one per entry of the volume table, built over the
//! current member handles with the shared member states and bitmap, each
//! with its cache (adopted from the volume it replaces, or as its entry
//! says) and its journal; made again when the membership changes; the
//! journals watched for loss and replayed.

use std::sync::Arc;

use super::assemble::journal_id;
use super::survival::describe_volume;
use super::Array;
use crate::control::superblock::{fmt_uuid, VolumeEntry};
use crate::raid::bitmap::Bitmap;
use crate::raid::engine::Shared;
use crate::raid::geometry::{Geometry, Level};
use crate::{bail, Result, Volume};

impl Array {
    /// A journal device of its own that a write fails is lost for good:
    /// once the cache has written back and flushed what it held (and
    /// before anything written after the loss is acknowledged: see
    /// [`crate::cache::journal::Journal::drained_after_loss`]), its volume entry
    /// says so (`journal_lost`, persisted then), so that no later assemble
    /// replays its records, stale from then on (the volume's writes go to
    /// the members without it). A journal on a member is lost with its
    /// member, which [`Health`] records.
    pub(super) fn watch_journal(&self, j: &Arc<crate::cache::journal::Journal>) {
        if j.host_role().is_some() || self.inspect {
            return;
        }
        let meta = Arc::downgrade(&self.meta);
        let health = self.health.clone();
        j.set_on_lost(move |j| {
            let Some(m) = meta.upgrade() else { return };
            let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
            let array = m.sb.array_uuid;
            let Some(v) = m.sb.volumes.iter_mut().find(|v| journal_id(array, v) == j.id()) else { return };
            v.journal_lost = true;
            if let Err(e) = m.persist(&health) {
                eprintln!("uraid: cannot record that the journal on {} is lost: {e}", j.name());
            }
        });
    }

    pub(super) fn build_volumes(&mut self) -> Result<()> {
        // Volumes made again over new members keep their caches (and the
        // dirty data in them).
        let old = std::mem::take(&mut self.volumes);
        let n = self.meta().sb.volumes.len();
        self.volumes = (0..n).map(|i| self.make_volume(i, old.get(i))).collect::<Result<_>>()?;
        Ok(())
    }

    /// Volume `i` of the volume table over the current members, with the
    /// cache of `old` (adopted, dirty data and all) or else the one its
    /// entry says.
    pub(super) fn make_volume(&self, i: usize, old: Option<&Arc<Volume>>) -> Result<Arc<Volume>> {
        let (roles, v) = {
            let m = self.meta();
            (m.roles.clone(), m.sb.volumes[i].clone())
        };
        let shared = Shared { health: self.health.clone(), bitmap: self.bitmap.clone() };
        let variant = crate::raid::layout::Variant::from_u8(v.layout).unwrap_or_default();
        let g = Geometry::new(Level::from_number(v.level)?, roles.len(), v.chunk, v.member_size)?.with_variant(variant)?;
        let vol = Volume::with_state(roles, g, v.member_start, shared)?;
        let cfg = v.cache_config()?;
        match old.and_then(|o| o.cache().map(|c| (o, c.clone()))) {
            Some((o, c)) => vol.adopt_cache(c, o)?,
            None if cfg.mode == crate::cache::CacheMode::Journal => match self.journal_of(&v) {
                Some(j) => vol.enable_journaled_cache(cfg, j)?,
                // Looking only: reads go to the members as they are.
                None if self.inspect => {}
                None => bail!(
                    Membership,
                    "volume '{}' keeps a write journal (journal UUID {}) and it was not given; give the \
                     journal device with the members (its records may hold acknowledged writes). Nothing \
                     was written. If the device is gone, 'uraid assemble --without-journal' or 'uraid config \
                     --without-journal' go on without it",
                    v.name,
                    fmt_uuid(&v.journal_uuid)
                ),
            },
            None => vol.enable_cache(cfg)?,
        }
        Ok(vol)
    }

    /// Makes volume `i` anew over the same members with a fresh cache of
    /// the mode its entry says now (nothing of the old cache is kept): the
    /// second half of a cache mode change on a served array. Before it,
    /// [`set_cache`](Self::set_cache); the users of the old volume paused
    /// and its cache closed ([`Volume::close_cache`], which writes back
    /// what it holds); after it, the users take [`volumes`](Self::volumes)`[i]`.
    ///
    /// Errors: `InvalidInput` for no such volume; from the cache's setup.
    pub fn renew_volume(&mut self, i: usize) -> Result<()> {
        if i >= self.volumes.len() {
            bail!(InvalidInput, "array '{}' has no volume {i}", self.name());
        }
        self.volumes[i] = self.make_volume(i, None)?;
        Ok(())
    }

    /// Replays the journal of volume `i` if it has one (its records not yet
    /// retired: acknowledged writes and whole lines written when the array
    /// stopped) onto the members, then empties it; a warning says how much.
    pub(super) fn replay_journal(&mut self, i: usize) -> Result<()> {
        let vol = &self.volumes[i];
        if let Some(j) = vol.cache().and_then(|c| c.journal()) {
            let (n, bytes) = j.replay(vol.raid(), crate::cache::Cache::line_for(vol))?;
            if n > 0 {
                let what = describe_volume(&self.meta().sb.volumes[i]);
                self.warnings.push(format!(
                    "{what}: replayed {n} record(s) of the write journal on {} ({bytes} bytes written to the members)",
                    j.name()
                ));
            }
        }
        Ok(())
    }

    /// The journal given or opened for volume entry `v`, if any.
    pub(super) fn journal_of(&self, v: &VolumeEntry) -> Option<Arc<crate::cache::journal::Journal>> {
        let id = journal_id(self.meta().sb.array_uuid, v);
        self.journals.iter().find(|j| j.id() == id).cloned()
    }

    /// After a device joined or left a role: new member handles, bitmap
    /// (reloaded over the new members) and volumes.
    pub(super) fn rebuild_after_membership_change(&mut self) -> Result<()> {
        let running = self.daemon.take().is_some();
        let (roles, region, end) = {
            let mut m = self.meta();
            m.rebuild_roles()?;
            (m.roles.clone(), m.sb.bitmap_region, m.sb.data_end())
        };
        if region > 0 {
            self.bitmap = None;
            self.bitmap = Some(Arc::new(Bitmap::load(roles, self.health.clone(), region, end)?));
        }
        self.build_volumes()?;
        if running {
            self.start_daemon();
        }
        Ok(())
    }

    /// The first volume (the only one of an array made without volumes).
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volumes[0]
    }

    /// Every volume, in the order of the volume table.
    pub fn volumes(&self) -> &[Arc<Volume>] {
        &self.volumes
    }

    /// The volume named `name`, if any.
    pub fn volume_named(&self, name: &str) -> Option<&Arc<Volume>> {
        let m = self.meta();
        let i = m.sb.volumes.iter().position(|v| v.name == name)?;
        self.volumes.get(i)
    }

    /// The volume table.
    pub fn volume_entries(&self) -> Vec<VolumeEntry> {
        self.meta().sb.volumes.clone()
    }
}
