//! What `uraid status` shows of an array: per volume its state, size and
//! rebuild progress, per slot its role and state, live or as recorded in
//! the superblocks.

use std::sync::{Arc, Mutex};

use super::meta::Meta;
use super::survival::{down_roles, down_slots, is_redundant, level_tolerance, volume_survives};
use super::{Array, Released, JOURNAL_LOST_WARNING, WRITEBACK_WARNING};
use crate::control::superblock::{self, fmt_uuid, State, Superblock, VolumeEntry};
use crate::raid::bitmap::Bitmap;
use crate::raid::health::{Health, MemberState};
use crate::Volume;

/// A member of an array as `uraid status` shows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MemberStatus {
    /// Slot: the role when below the member count, else a spare slot.
    pub slot: u32,
    /// The role, `None` for a spare.
    pub role: Option<u32>,
    /// The device as given, `None` when no device holds the slot.
    pub device: Option<String>,
    /// The device's UUID (zero when none).
    pub uuid: String,
    /// State name (active, faulty, rebuilding, spare, missing).
    pub state: String,
    /// For a rebuilding member: absolute member byte offset rebuilt so far.
    pub recovery_offset: Option<u64>,
    /// For a faulty device whose role a spare took over (listed after the
    /// spares, `role` `None`, until `uraid remove`): the role it held.
    #[serde(default)]
    pub former_role: Option<u32>,
    /// This process's I/O counters of the member (reads, writes, bytes,
    /// errors by kind, latencies) since the array was brought up here,
    /// summed over its volumes; `None` when not live (superblocks only)
    /// or for a spare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<crate::raid::engine::counters::MemberIo>,
    /// Read errors of the member repaired from redundancy since the array
    /// was assembled (the range rewritten, the member kept).
    #[serde(default)]
    pub read_errors_corrected: u64,
    /// Read errors of the member that failed the read (nothing left to
    /// repair them from: RAID 0, or a degraded stripe).
    #[serde(default)]
    pub read_errors_uncorrected: u64,
}

/// A volume as `uraid status` shows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct VolumeStatus {
    /// Name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// RAID level number.
    pub level: u32,
    /// Chunk in bytes.
    pub chunk: u64,
    /// Where RAID 5 and 6 keep their parity: `left-symmetric` (md's
    /// default) or `parity-last` (after a RAID 0 -> 5 or 5 -> 6 takeover:
    /// md's `parity-last`, `left-symmetric-6`); empty for other levels.
    #[serde(default)]
    pub layout: String,
    /// Usable bytes.
    pub capacity: u64,
    /// Absolute byte offset of the volume's area on every member.
    pub member_start: u64,
    /// Bytes of every member the volume uses.
    pub member_size: u64,
    /// clean, degraded, rebuilding, resyncing (not stopped cleanly: the
    /// dirty regions are resynced at assemble) or failed (more members lost
    /// than it tolerates).
    pub state: String,
    /// Members that may fail without data loss.
    pub tolerance: usize,
    /// Rebuild progress in percent of the volume's member area (the least
    /// advanced rebuilding member), when rebuilding.
    pub rebuild_percent: Option<f64>,
    /// Logical bytes of the volume that may hold data (its regions live
    /// in the live-data map, see `raid::bitmap`): what a rebuild, resync
    /// or check goes through; the rest reads as zeros and is skipped. The
    /// capacity without a map (RAID 0, `--no-bitmap`, older arrays);
    /// `None` when not known (status read from the superblock alone).
    #[serde(default)]
    pub live_bytes: Option<u64>,
    /// Cache mode (off, writethrough, writeback), size and dirty limit in
    /// bytes as the volume table says.
    pub cache: crate::cache::CacheConfig,
    /// What the mode risks, for write-back: un-flushed writes are lost on
    /// power loss or a crash; for the journal mode, a lost journal.
    pub cache_warning: Option<String>,
    /// Journal mode with the journal on a member: where it lies.
    pub journal_region: Option<superblock::JournalRegion>,
    /// Journal mode: the journal is lost (see [`JOURNAL_LOST_WARNING`]).
    pub journal_lost: bool,
    /// This process's cache counters (dirty bytes, hit ratio, merged
    /// writes), when the volume has a cache here.
    pub cache_stats: Option<crate::cache::CacheStats>,
}

impl VolumeStatus {
    /// True when the volume's level keeps copies or parity (it may lose a
    /// member); false for RAID 0.
    pub fn redundant(&self) -> bool {
        crate::raid::geometry::Level::from_number(self.level).is_ok_and(|l| l.desc().redundant())
    }
}

/// One volume's status, from its entry `v` over `n` roles: `down[r]` when
/// role r is not active, `rebuilding` the recovery offsets (absolute member
/// bytes) of the rebuilding roles, `resyncing` when its dirty regions await
/// a resync, its usable `capacity` (bytes) and its cache's counters.
#[allow(clippy::too_many_arguments)]
pub(super) fn volume_status(
    v: &VolumeEntry,
    n: usize,
    down: &[bool],
    rebuilding: &[u64],
    resyncing: bool,
    capacity: u64,
    cache_stats: Option<crate::cache::CacheStats>,
    journal_lost: bool,
) -> VolumeStatus {
    let state: &str = if !volume_survives(v, n, down) {
        "failed"
    } else if !rebuilding.is_empty() && is_redundant(v) {
        "rebuilding"
    } else if down.iter().any(|&d| d) && is_redundant(v) {
        "degraded"
    } else if resyncing {
        "resyncing"
    } else {
        "clean"
    };
    // The least advanced rebuilding member, in percent of the volume's area.
    let rebuild_percent = rebuilding.iter().copied().min().filter(|_| is_redundant(v) && v.member_size > 0).map(|least| {
        let done = least.saturating_sub(v.member_start).min(v.member_size);
        (done as f64 * 1000.0 / v.member_size as f64).floor() / 10.0
    });
    let cache = v.cache_config().unwrap_or_default();
    VolumeStatus {
        name: v.name.clone(),
        uuid: fmt_uuid(&v.uuid),
        level: v.level,
        chunk: v.chunk,
        layout: match v.draid {
            Some(d) => draid_layout_name(v.level, d),
            None => layout_name(v).to_string(),
        },
        capacity,
        member_start: v.member_start,
        member_size: v.member_size,
        state: state.to_string(),
        tolerance: level_tolerance(v, n),
        rebuild_percent,
        live_bytes: None,
        cache,
        cache_warning: match cache.mode {
            crate::cache::CacheMode::WriteBack => Some(WRITEBACK_WARNING.to_string()),
            crate::cache::CacheMode::Journal if journal_lost => Some(JOURNAL_LOST_WARNING.to_string()),
            _ => None,
        },
        journal_region: v.journal_region,
        journal_lost,
        cache_stats,
    }
}

/// The status the superblock `sb` records, for a process that cannot open
/// the members because another one (`uraid serve`) holds them: the role
/// states and recovery offsets as last persisted, no resync state, no
/// bitmap (0 dirty bytes) and no cache counters. `devices` are the devices
/// read, each with the member UUID its superblock carries.
pub fn recorded_status(sb: &Superblock, devices: &[(String, [u8; 16])]) -> ArrayStatus {
    let n = sb.member_count as usize;
    let roles = &sb.slots[..n.min(sb.slots.len())];
    let down = down_slots(sb, roles);
    let rebuilding: Vec<u64> = roles
        .iter()
        .filter(|s| s.state == MemberState::Rebuilding || (s.state == MemberState::Spared && s.recovery_offset.is_some()))
        .map(|s| s.recovery_offset.unwrap_or(0))
        .collect();
    let volumes = sb
        .volumes
        .iter()
        .map(|v| {
            let lost = v.journal_region.is_some_and(|r| matches!(roles[r.role as usize].state, MemberState::Faulty | MemberState::Missing));
            volume_status(v, n, &down, &rebuilding, false, v.capacity(n), None, lost)
        })
        .collect();
    let members = sb
        .slots
        .iter()
        .enumerate()
        .map(|(s, slot)| MemberStatus {
            slot: s as u32,
            role: (s < n).then_some(s as u32),
            device: devices.iter().find(|(_, uuid)| !slot.is_empty() && *uuid == slot.uuid).map(|(name, _)| name.clone()),
            uuid: fmt_uuid(&slot.uuid),
            state: slot.state.name().to_string(),
            recovery_offset: if matches!(slot.state, MemberState::Rebuilding | MemberState::Spared) { slot.recovery_offset } else { None },
            former_role: None,
            io: None,
            read_errors_corrected: 0,
            read_errors_uncorrected: 0,
        })
        .collect();
    ArrayStatus {
        name: sb.name.clone(),
        uuid: fmt_uuid(&sb.array_uuid),
        events: sb.events,
        state: match sb.state {
            State::Clean => "clean",
            State::Active => "active",
        }
        .to_string(),
        member_count: sb.member_count,
        bitmap_region: sb.bitmap_region,
        bitmap_dirty_bytes: 0,
        volumes,
        members,
        stale_members: Vec::new(),
        distributed_spares: sb
            .volumes
            .first()
            .and_then(|v| v.draid)
            .map(|d| {
                (0..d.spares)
                    .filter_map(|k| {
                        let role = d.role_of(k)?;
                        let slot = roles.get(role as usize)?;
                        // A rebuilding role keeps its spare: the rebalance.
                        Some(match slot.state {
                            MemberState::Rebuilding => super::SpareUse { spare: k, role, recovery_offset: None, rebalanced_to: Some(slot.recovery_offset.unwrap_or(0)) },
                            _ => super::SpareUse { spare: k, role, recovery_offset: slot.recovery_offset, rebalanced_to: None },
                        })
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// What `uraid status` shows of an array (like /proc/mdstat).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ArrayStatus {
    /// Array name.
    pub name: String,
    /// Array UUID.
    pub uuid: String,
    /// Event counter.
    pub events: u64,
    /// "clean" or "active" as the superblock says.
    pub state: String,
    /// Roles (members, not spares).
    pub member_count: u32,
    /// Bitmap region size in bytes (0: no bitmap).
    pub bitmap_region: u64,
    /// Bytes of the members the bitmap marks dirty (0 without a bitmap).
    pub bitmap_dirty_bytes: u64,
    /// The volumes, in member-offset order.
    pub volumes: Vec<VolumeStatus>,
    /// Every slot: roles, then spares.
    pub members: Vec<MemberStatus>,
    /// Devices given that are no longer members of the array (removed or
    /// replaced: their superblock is older than the array's), left out.
    #[serde(default)]
    pub stale_members: Vec<String>,
    /// A declustered volume's distributed spares in use: which role each
    /// holds and how far the rebuild into it has come.
    #[serde(default)]
    pub distributed_spares: Vec<super::SpareUse>,
}

/// What [`Array::status`] reads, held apart from the [`Array`]: for a
/// service that shows the live status while a long operation (a rebuild,
/// a scrub) has the array borrowed. It follows the member states, the
/// recovery offsets, the event counter and the caches' counters as they
/// move; take it again after a membership change (new volumes).
#[derive(Clone)]
pub struct StatusSource {
    meta: Arc<Mutex<Meta>>,
    health: Arc<Health>,
    bitmap: Option<Arc<Bitmap>>,
    volumes: Vec<Arc<Volume>>,
    replayed: bool,
    stale: Vec<String>,
    released: Arc<Mutex<Vec<Released>>>,
}

impl Array {
    /// Where every volume and member stands (see [`ArrayStatus`]).
    pub fn status(&self) -> ArrayStatus {
        self.status_source().status()
    }

    /// A [`StatusSource`] of the array as it is now.
    pub fn status_source(&self) -> StatusSource {
        StatusSource {
            meta: self.meta.clone(),
            health: self.health.clone(),
            bitmap: self.bitmap.clone(),
            volumes: self.vols.all().to_vec(),
            replayed: self.vols.replayed(),
            stale: self.stale.clone(),
            released: self.membership.shared_released(),
        }
    }
}

/// Where the members' I/O counters of an array's volumes are read, without
/// keeping those volumes: a holder (the service's live status) must not
/// delay the drop of a volume that a grow or a replace swapped out, whose
/// users it waits for.
#[derive(Debug, Clone, Default)]
pub struct MemberIoSource {
    volumes: Vec<std::sync::Weak<Volume>>,
}

impl MemberIoSource {
    /// Each role's I/O counters, summed over the volumes still up (and a
    /// reshape's target layout); empty when none is.
    pub fn member_io(&self) -> Vec<crate::raid::engine::counters::MemberIo> {
        let live: Vec<Arc<Volume>> = self.volumes.iter().filter_map(std::sync::Weak::upgrade).collect();
        member_io_of(&live)
    }
}

fn member_io_of(volumes: &[Arc<Volume>]) -> Vec<crate::raid::engine::counters::MemberIo> {
    let mut out: Vec<crate::raid::engine::counters::MemberIo> = Vec::new();
    for v in volumes {
        for raid in std::iter::once(v.raid()).chain(v.reshape_target()) {
            for (i, c) in raid.member_io().iter().enumerate() {
                if out.len() <= i {
                    out.resize(i + 1, Default::default());
                }
                out[i].add(c);
            }
        }
    }
    out
}

impl StatusSource {
    /// Where the members' I/O counters are read without holding the
    /// volumes (see [`MemberIoSource`]).
    pub fn io_source(&self) -> MemberIoSource {
        MemberIoSource { volumes: self.volumes.iter().map(Arc::downgrade).collect() }
    }

    /// Each role's I/O counters, summed over the volumes (and a reshape's
    /// target layout); none when no volume is up.
    pub fn member_io(&self) -> Vec<crate::raid::engine::counters::MemberIo> {
        member_io_of(&self.volumes)
    }
}

impl StatusSource {
    /// Where every volume and member stands now (see [`ArrayStatus`]).
    pub fn status(&self) -> ArrayStatus {
        let m = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.n();
        let down = down_roles(&self.health);
        let states = self.health.states();
        let dirty = match &self.bitmap {
            Some(b) => b.dirty(),
            None => Vec::new(),
        };
        let rebuilding: Vec<u64> = (0..n as u32)
            .filter(|&r| states[r as usize] == MemberState::Rebuilding || (states[r as usize] == MemberState::Spared && self.health.recovery(r) != u64::MAX))
            .map(|r| self.health.recovery(r))
            .collect();
        let volumes = m
            .sb
            .volumes
            .iter()
            .zip(&self.volumes)
            .map(|(v, vol)| {
                // Active in the superblock and not brought up by this
                // process (which resyncs at activation): stopped uncleanly.
                let unclean = m.sb.state == State::Active && !self.replayed && is_redundant(v);
                let resyncing =
                    unclean && (self.bitmap.is_none() || dirty.iter().any(|r| r.start < v.member_end() && r.end > v.member_start));
                let stats = vol.cache().map(|c| c.stats()).filter(|c| c.writes + c.read_hits + c.read_misses > 0);
                let lost = vol.cache().and_then(|c| c.journal()).is_some_and(|j| j.is_lost());
                let mut st = volume_status(v, n, &down, &rebuilding, resyncing, vol.capacity(), stats, lost);
                st.live_bytes = Some(live_bytes(self.bitmap.as_deref(), v, vol.capacity()));
                st
            })
            .collect();
        let io = self.member_io();
        let members = m
            .sb
            .slots
            .iter()
            .enumerate()
            .map(|(s, slot)| {
                let state = if s < n { states[s] } else { slot.state };
                MemberStatus {
                    slot: s as u32,
                    role: (s < n).then_some(s as u32),
                    device: m.devices[s].as_ref().map(|d| d.name().to_string()),
                    uuid: fmt_uuid(&slot.uuid),
                    state: state.name().to_string(),
                    recovery_offset: matches!(state, MemberState::Rebuilding | MemberState::Spared)
                        .then(|| self.health.recovery(s as u32))
                        .filter(|&o| o != u64::MAX),
                    former_role: None,
                    io: if s < n { io.get(s).cloned() } else { None },
                    read_errors_corrected: if s < n { self.health.read_errors().corrected(s as u32) } else { 0 },
                    read_errors_uncorrected: if s < n { self.health.read_errors().uncorrected(s as u32) } else { 0 },
                }
            })
            .collect::<Vec<_>>();
        let total = members.len();
        let mut members = members;
        members.extend(self.released.lock().unwrap_or_else(|e| e.into_inner()).iter().enumerate().map(|(i, r)| MemberStatus {
            slot: (total + i) as u32,
            role: None,
            device: Some(r.name.clone()),
            uuid: fmt_uuid(&r.uuid),
            state: MemberState::Faulty.name().to_string(),
            recovery_offset: None,
            former_role: Some(r.role),
            io: None,
            read_errors_corrected: 0,
            read_errors_uncorrected: 0,
        }));
        ArrayStatus {
            name: m.sb.name.clone(),
            uuid: fmt_uuid(&m.sb.array_uuid),
            events: m.sb.events,
            state: match m.sb.state {
                State::Clean => "clean",
                State::Active => "active",
            }
            .to_string(),
            member_count: m.sb.member_count,
            bitmap_region: m.sb.bitmap_region,
            bitmap_dirty_bytes: dirty.iter().map(|r| r.end - r.start).sum(),
            volumes,
            members,
            stale_members: self.stale.clone(),
            distributed_spares: super::spare_space::spare_uses(&self.health),
        }
    }
}

/// Logical bytes of volume `v` (of `capacity` bytes) in live regions of
/// `bitmap`'s live-data map: its live member bytes scaled to the volume
/// (every member holds the same share); `capacity` without a map.
fn live_bytes(bitmap: Option<&Bitmap>, v: &VolumeEntry, capacity: u64) -> u64 {
    match bitmap {
        Some(b) if b.live_map() && is_redundant(v) && v.member_size > 0 => {
            let live = b.live_bytes(v.member_start, v.member_end());
            (live as u128 * capacity as u128 / v.member_size as u128) as u64
        }
        _ => capacity,
    }
}

/// A declustered volume's layout as status shows it:
/// `draid5 4d+1p, 1 distributed spare, layout 1`.
pub fn draid_layout_name(level: u32, d: crate::control::superblock::DraidEntry) -> String {
    let (name, p) = crate::raid::geometry::Level::from_number(level).map_or((format!("level {level}"), 0), |l| (l.to_string(), l.desc().parity));
    format!("{name} {}d+{p}p, {} distributed spare{}, layout {}", d.data, d.spares, if d.spares == 1 { "" } else { "s" }, d.version)
}

/// The parity placement of volume `v` by md's name (`mdadm --detail`'s
/// "Layout"): `left-symmetric` or `parity-last` for RAID 5 and 6, empty
/// for other levels.
pub fn layout_name(v: &VolumeEntry) -> &'static str {
    match (v.level, crate::raid::layout::Variant::from_u8(v.layout)) {
        (5 | 6, Some(crate::raid::layout::Variant::ParityLast)) => "parity-last",
        (5 | 6, _) => "left-symmetric",
        _ => "",
    }
}
