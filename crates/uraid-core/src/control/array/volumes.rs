//! The array's volumes: one per entry of the volume table, built over the
//! current member handles with the shared member states and bitmap, each
//! with its cache (adopted from the volume it replaces, or as its entry
//! says) and its journal; made again when the membership changes; the
//! journals watched for loss and replayed.

use std::sync::Arc;

use super::assemble::journal_id;
use super::survival::describe_volume;
use super::Array;
use crate::cache::journal::Journal;
use crate::control::superblock::{fmt_uuid, VolumeEntry};
use crate::io::member::Member;
use crate::raid::bitmap::Bitmap;
use crate::raid::engine::Shared;

use crate::raid::health::Health;
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
    pub(super) fn watch_journal(&self, j: &Arc<Journal>) {
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

    /// What the volumes are built over now: the member handles, the volume
    /// table, the member states and the bitmap.
    pub(super) fn over(&self) -> Over {
        let m = self.meta();
        Over {
            roles: m.roles.clone(),
            entries: m.sb.volumes.clone(),
            array_uuid: m.sb.array_uuid,
            health: self.health.clone(),
            bitmap: self.bitmap.clone(),
            inspect: self.inspect,
        }
    }

    /// Every volume made again over the current members (after a device
    /// joined or left a role), each keeping the cache of the one it
    /// replaces (and the dirty data in it).
    pub(super) fn build_volumes(&mut self) -> Result<()> {
        let over = self.over();
        self.vols.rebuild(&over, None)
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
        if i >= self.vols.all().len() {
            bail!(InvalidInput, "array '{}' has no volume {i}", self.name());
        }
        let over = self.over();
        self.vols.renew(&over, i)
    }

    /// Replays the journal of volume `i` if it has one (its records not yet
    /// retired: acknowledged writes and whole lines written when the array
    /// stopped) onto the members, then empties it; a warning says how much.
    pub(super) fn replay_journal(&mut self, i: usize) -> Result<()> {
        let vol = &self.vols.all()[i];
        if let Some(j) = vol.cache().and_then(|c| c.journal()) {
            let (n, bytes) = j.replay(vol.raid(), crate::cache::Cache::line_for(vol.raid()))?;
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

    /// After a device joined or left a role: new member handles, bitmap
    /// (reloaded over the new members) and volumes.
    pub(super) fn rebuild_after_membership_change(&mut self) -> Result<()> {
        let running = self.daemon.take().is_some();
        let (roles, region, end, sb) = {
            let mut m = self.meta();
            m.rebuild_roles()?;
            (m.roles.clone(), m.sb.bitmap_region, m.sb.data_end(), m.sb.clone())
        };
        if region > 0 {
            self.bitmap = None;
            self.bitmap = Some(Arc::new(Bitmap::load(roles, self.health.clone(), region, end)?.with_live_map_areas(sb.live_map, sb.redundant_areas())));
        }
        self.build_volumes()?;
        if running {
            self.start_daemon();
        }
        Ok(())
    }

    /// The first volume (the only one of an array made without volumes).
    pub fn volume(&self) -> &Arc<Volume> {
        &self.vols.all()[0]
    }

    /// Every volume, in the order of the volume table.
    pub fn volumes(&self) -> &[Arc<Volume>] {
        self.vols.all()
    }

    /// The volume named `name`, if any.
    pub fn volume_named(&self, name: &str) -> Option<&Arc<Volume>> {
        let m = self.meta();
        let i = m.sb.volumes.iter().position(|v| v.name == name)?;
        self.vols.all().get(i)
    }

    /// The volume table.
    pub fn volume_entries(&self) -> Vec<VolumeEntry> {
        self.meta().sb.volumes.clone()
    }
}

/// What the volumes of an array are built over (see [`Array::over`]).
pub(super) struct Over {
    /// One member per role (a placeholder where no device is held).
    roles: Arc<Vec<Member>>,
    /// The volume table.
    entries: Vec<VolumeEntry>,
    /// The array's UUID (journals are named by it).
    array_uuid: [u8; 16],
    /// The member states shared by every volume.
    health: Arc<Health>,
    /// The write-intent bitmap, if any.
    bitmap: Option<Arc<Bitmap>>,
    /// Opened for looking only: a journal not given is no error.
    inspect: bool,
}

/// The array's volumes, one per entry of the volume table, with the
/// journals their caches write through and whether those were replayed.
/// Built and made again from an [`Over`]; the array reads them through
/// [`all`](Self::all).
pub(super) struct VolumeSet {
    /// The volumes, in the order of the volume table.
    list: Vec<Arc<Volume>>,
    /// The journal devices given or opened (journal cache mode), each
    /// named by a volume entry's journal UUID.
    journals: Vec<Arc<Journal>>,
    /// The journals were replayed (by [`Array::activate`], or the array is
    /// new): their records are all in the caches now.
    replayed: bool,
}

impl VolumeSet {
    /// No volume yet, over `journals`.
    pub(super) fn new(journals: Vec<Arc<Journal>>) -> VolumeSet {
        VolumeSet { list: Vec::new(), journals, replayed: false }
    }

    /// The volumes, in the order of the volume table.
    pub(super) fn all(&self) -> &[Arc<Volume>] {
        &self.list
    }

    /// The journals given or opened.
    pub(super) fn journals(&self) -> &[Arc<Journal>] {
        &self.journals
    }

    /// Adds a journal (a volume's journal was set).
    pub(super) fn add_journal(&mut self, j: Arc<Journal>) {
        self.journals.push(j);
    }

    /// Whether the journals were replayed.
    pub(super) fn replayed(&self) -> bool {
        self.replayed
    }

    /// Records that the journals were replayed (or that there was nothing
    /// to replay: a new array).
    pub(super) fn set_replayed(&mut self) {
        self.replayed = true;
    }

    /// Every volume of `over`'s table made again; each keeps the cache of
    /// the volume it replaces, but for volume `fresh` (which gets the cache
    /// its entry says, empty). On an error no volume is left.
    pub(super) fn rebuild(&mut self, over: &Over, fresh: Option<usize>) -> Result<()> {
        let old = std::mem::take(&mut self.list);
        self.list = (0..over.entries.len()).map(|i| self.make(over, i, if fresh == Some(i) { None } else { old.get(i) })).collect::<Result<_>>()?;
        Ok(())
    }

    /// Volume `i` (which exists) made again with a fresh cache of the mode
    /// its entry says.
    pub(super) fn renew(&mut self, over: &Over, i: usize) -> Result<()> {
        self.list[i] = self.make(over, i, None)?;
        Ok(())
    }

    /// Volume `i` of the volume table over the current members, with the
    /// cache of `old` (adopted, dirty data and all) or else the one its
    /// entry says. Errors: `Membership` for a journal that was not given;
    /// from the geometry and the cache's setup.
    fn make(&self, over: &Over, i: usize, old: Option<&Arc<Volume>>) -> Result<Arc<Volume>> {
        let (roles, v) = (over.roles.clone(), &over.entries[i]);
        let shared = Shared { health: over.health.clone(), bitmap: over.bitmap.clone() };
        let g = v.geometry(roles.len())?;
        let vol = Volume::with_state(roles, g, v.member_start, shared)?;
        let cfg = v.cache_config()?;
        match old.and_then(|o| o.cache().map(|c| (o, c.clone()))) {
            Some((o, c)) => vol.adopt_cache(c, o)?,
            None if cfg.mode == crate::cache::CacheMode::Journal => match self.journal_of(over.array_uuid, v) {
                Some(j) => vol.enable_journaled_cache(cfg, j)?,
                // Looking only: reads go to the members as they are.
                None if over.inspect => {}
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

    /// The journal given or opened for volume entry `v` of array
    /// `array_uuid`, if any.
    fn journal_of(&self, array_uuid: [u8; 16], v: &VolumeEntry) -> Option<Arc<Journal>> {
        let id = journal_id(array_uuid, v);
        self.journals.iter().find(|j| j.id() == id).cloned()
    }
}
