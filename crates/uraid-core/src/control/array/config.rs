//! Per-volume settings of an array: the cache mode and the write journal
//! (on its own device or on a member), and moving a journal when the member
//! that holds it fails or is replaced.

use std::sync::Arc;

use super::{open_journal_device, Array, VOLUME_ALIGN};
use crate::control::superblock;
use crate::io::member::{Member, MemberSpec};
use crate::raid::health::MemberState;
use crate::units::fmt_size;
use crate::{bail, Error, ErrorKind, Result, Volume};

/// What `uraid status` says of a volume whose journal is lost.
pub const JOURNAL_LOST_WARNING: &str =
    "the write journal is lost (a write to it failed, its device was not given, or the member holding it failed or \
     was replaced): each write is acknowledged only once it is on the members and flushed, and RAID 5/6 stripes \
     written in part have the write hole again, until a member takes the journal's role or 'uraid config --cache \
     journal --journal DEVICE' gives it another place";

/// A journal size asked for on a member, in whole 4 KiB. Errors:
/// `InvalidInput` below 64 MiB + 4 KiB or above 1 PiB.
pub fn check_member_journal_size(size: u64) -> Result<u64> {
    let min = crate::cache::journal::HEADER_SIZE + crate::cache::journal::MIN_LOG;
    if !(min..=1 << 50).contains(&size) {
        bail!(InvalidInput, "a journal of {size} bytes cannot be: give from 64M + 4K ({min} bytes) to 1P");
    }
    Ok(size.next_multiple_of(4096))
}

/// Bytes of a journal on a member when no size is given (256 MiB and the
/// 4 KiB header).
pub const DEFAULT_MEMBER_JOURNAL: u64 = (256 << 20) + crate::cache::journal::HEADER_SIZE;

/// What `uraid status` and `create` say of a write-back cache.
pub const WRITEBACK_WARNING: &str =
    "write-back cache: writes are acknowledged from memory; those not yet flushed are lost on power loss or a crash \
     (filesystems that send FLUSH/FUA keep their own consistency)";

impl Array {
    /// Sets the cache of volume `volume` (every volume when `None`) in the
    /// volume table and the superblocks (`uraid config`, `create --cache`);
    /// it takes effect at the next assemble. A volume leaving the journal
    /// mode has its journal replayed onto the members first (so nothing
    /// it held is lost; see [`warnings`](Self::warnings)). Returns the
    /// names of the volumes changed.
    ///
    /// Errors, before anything is written: `InvalidInput` for an unknown
    /// volume or sizes that cannot hold one line (one stripe's data).
    pub fn set_cache(&mut self, volume: Option<&str>, cfg: &crate::cache::CacheConfig) -> Result<Vec<String>> {
        self.not_frozen()?;
        let entries = self.volume_entries();
        let chosen: Vec<usize> = match volume {
            Some(name) => vec![self.volume_index(name)?],
            None => (0..entries.len()).collect(),
        };
        if cfg.mode == crate::cache::CacheMode::Journal {
            bail!(InvalidInput, "the journal mode needs a journal device: give --journal DEVICE");
        }
        for &i in &chosen {
            crate::cache::Cache::check_config(self.vols.all()[i].raid(), cfg)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("volume '{}': {e}", entries[i].name)))?;
        }
        // A journal left behind would take its records with it: they go to
        // the members first.
        if !self.inspect {
            for &i in &chosen {
                self.replay_journal(i)?;
            }
        }
        {
            let mut m = self.meta();
            for &i in &chosen {
                m.sb.volumes[i].set_cache_config(cfg);
            }
        }
        self.persist()?;
        Ok(chosen.iter().map(|&i| entries[i].name.clone()).collect())
    }

    /// The index of the volume named `name` in the volume table (and in
    /// [`volumes`](Self::volumes)). Errors: `InvalidInput` naming the
    /// volumes there are.
    pub fn volume_index(&self, name: &str) -> Result<usize> {
        let entries = self.volume_entries();
        match entries.iter().position(|v| v.name == name) {
            Some(i) => Ok(i),
            None => bail!(
                InvalidInput,
                "array '{}' has no volume '{name}'; its volumes: {}",
                self.name(),
                entries.iter().map(|v| format!("'{}'", v.name)).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Sets volume `volume` (by name; `None`: the only volume) to the
    /// journal cache mode with `cfg`'s sizes, and formats its journal:
    /// on `spec`, a device of its own (the whole device, see
    /// [`crate::cache::journal`]; give it with the members at every assemble), or,
    /// when `spec` is a member of this array, in a region of `member_size`
    /// bytes (default [`DEFAULT_MEMBER_JOURNAL`]) at the end of that
    /// member past every volume (`member_journal_start`).
    /// Kept in the superblocks, used from the next assemble. A journal the
    /// volume had is replayed onto the members first. Returns the volume's
    /// name.
    ///
    /// Errors, before anything is written: `InvalidInput` (no such volume,
    /// several volumes and none named, the device is a spare of this array
    /// or a member not in service, `member_size` given for a device of its
    /// own, sizes that do not fit); `WouldDestroy` when a device of its own
    /// holds a filesystem, an array or a journal, unless `force`;
    /// `TooSmall` (a device below 64 MiB + 4 KiB; no room on the member:
    /// the volumes use it up); `Io`, `Busy`.
    pub fn set_journal(
        &mut self,
        volume: Option<&str>,
        spec: &MemberSpec,
        cfg: &crate::cache::CacheConfig,
        member_size: Option<u64>,
        force: bool,
    ) -> Result<String> {
        self.not_frozen()?;
        let entries = self.volume_entries();
        let i = match volume {
            Some(name) => self.volume_index(name)?,
            None if entries.len() == 1 => 0,
            None => bail!(InvalidInput, "a journal serves one volume and array '{}' has {}; name it with --volume", self.name(), entries.len()),
        };
        let cfg = crate::cache::CacheConfig { mode: crate::cache::CacheMode::Journal, ..*cfg };
        crate::cache::Cache::check_config(self.vols.all()[i].raid(), &cfg)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("volume '{}': {e}", entries[i].name)))?;
        let id = crate::cache::journal::JournalId { array: self.meta().sb.array_uuid, volume: entries[i].uuid, journal: superblock::new_uuid() };
        let (member, region, host) = match self.slot_of(spec) {
            Some(s) if s >= self.member_count() => {
                bail!(InvalidInput, "{spec} is a spare (slot {s}) of array '{}'; put the journal on a member or a device of its own", self.name())
            }
            Some(role) => {
                let state = self.health.state(role);
                if !matches!(state, MemberState::Active) {
                    bail!(
                        InvalidInput,
                        "{spec} (role {role}) is {}; a journal goes on a member in service. Nothing was written",
                        state.name()
                    );
                }
                let size = check_member_journal_size(member_size.unwrap_or(DEFAULT_MEMBER_JOURNAL))?;
                let start = self.member_journal_start(i, size)?;
                let m = self.meta().devices[role as usize].as_ref().expect("an active role has a device").try_clone()?;
                let host = crate::cache::journal::Host { health: self.health.clone(), role };
                (m, Some(superblock::JournalRegion { role, start, size }), Some(host))
            }
            None => {
                if member_size.is_some() {
                    bail!(InvalidInput, "--journal-size is for a journal on a member; a device of its own is a journal whole");
                }
                (open_journal_device(spec, force)?, None, None)
            }
        };
        if !self.inspect {
            self.replay_journal(i)?;
        }
        let j = match region {
            Some(r) => crate::cache::journal::Journal::format_region(member, r.start, r.size, id, host)?,
            None => crate::cache::journal::Journal::format(member, id)?,
        };
        {
            let mut g = self.meta();
            g.sb.volumes[i].set_cache_config(&cfg);
            g.sb.volumes[i].journal_uuid = id.journal;
            g.sb.volumes[i].journal_region = region;
            g.sb.volumes[i].journal_lost = false;
        }
        let j = Arc::new(j);
        self.watch_journal(&j);
        self.vols.add_journal(j);
        self.persist()?;
        Ok(entries[i].name.clone())
    }

    /// Where a journal region of `size` bytes for volume `i` goes on a
    /// member: at the end of the smallest device of the array (members and
    /// spares), below the other volumes' journal regions, 1 MiB aligned, past
    /// every volume. Errors: `TooSmall` when the volumes leave no such room.
    pub(super) fn member_journal_start(&self, i: usize, size: u64) -> Result<u64> {
        let g = self.meta();
        let smallest = g.devices.iter().flatten().map(Member::size).min().unwrap_or(0);
        let limit = g
            .sb
            .volumes
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != i)
            .filter_map(|(_, v)| v.journal_region.map(|r| r.start))
            .fold(smallest, u64::min);
        let end = g.sb.data_end();
        match limit.checked_sub(size).map(|s| s / VOLUME_ALIGN * VOLUME_ALIGN) {
            Some(start) if start >= end => Ok(start),
            _ => bail!(
                TooSmall,
                "no room for a journal of {} on a member of array '{}': the volumes use the members up to byte {end} \
                 and {} is free below byte {limit}. Nothing was written. Create the array with the journal on a member \
                 (room is kept for it), give a smaller --journal-size (at least 64M + 4K), or a journal device of its own",
                fmt_size(size),
                g.sb.name,
                fmt_size(limit.saturating_sub(end))
            ),
        }
    }

    /// The journals of the volumes that lie on role `role`.
    pub(super) fn journals_on(&self, role: u32) -> Vec<Arc<crate::cache::journal::Journal>> {
        self.vols.all()
            .iter()
            .filter_map(|v| v.cache().and_then(|c| c.journal()).cloned())
            .filter(|j| j.host_role() == Some(role))
            .collect()
    }

    /// Role `role` is about to lose its device (failed) or get another one:
    /// every write its journals hold goes to the members first (records of
    /// a crash not yet replayed, then what the caches hold), then the
    /// journals are lost (their devices let go). Errors: from the replay
    /// or the write-back; the journals are then still in use.
    pub(super) fn lose_journals_on(&mut self, role: u32) -> Result<()> {
        let on_role = |v: &Arc<Volume>| v.cache().and_then(|c| c.journal()).is_some_and(|j| j.host_role() == Some(role));
        if !self.vols.replayed() && !self.inspect {
            for i in 0..self.vols.all().len() {
                if on_role(&self.vols.all()[i]) {
                    self.replay_journal(i)?;
                }
            }
        }
        for v in self.vols.all().iter().filter(|v| on_role(v)) {
            v.cache().expect("a journal has a cache").drain()?;
        }
        for j in self.journals_on(role) {
            j.mark_lost();
        }
        // Writes that came meanwhile, recorded in the journal just lost.
        for v in self.vols.all().iter().filter(|v| on_role(v)) {
            v.cache().expect("a journal has a cache").drain()?;
        }
        Ok(())
    }

    /// Role `role` holds a new device: the lost journals that lay on it are
    /// formatted in their regions there and taken back in use (a warning
    /// says so).
    pub(super) fn rehome_journals_on(&mut self, role: u32) -> Result<()> {
        let journals = self.journals_on(role);
        if journals.is_empty() {
            return Ok(());
        }
        let dev = match self.meta().devices[role as usize].as_ref() {
            Some(m) => m.try_clone()?,
            None => return Ok(()),
        };
        for j in journals {
            if !j.is_lost() {
                continue;
            }
            j.rehome(dev.try_clone()?)?;
            self.warnings.push(format!(
                "the write journal on role {role} was formatted on {} (byte {}) and is in use again",
                dev.name(),
                j.base()
            ));
        }
        Ok(())
    }
}
