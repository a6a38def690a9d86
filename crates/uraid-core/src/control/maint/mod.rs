//! Maintenance of redundant volumes: rebuild of a member, scrub (check and
//! repair), and resync after an unclean stop.
//!
//! All three walk a volume stripe by stripe in batches of a few MiB of
//! member rows, holding the stripe locks of a batch
//! ([`RaidVolume::locks`](crate::raid::engine::RaidVolume::locks)) while they read and write it, so they can run
//! while the volume serves I/O: a write to a stripe waits for the batch
//! that holds it, and the batch sees either none or all of a write's member
//! pieces. Member I/O is the blocking kind (`pread`/`pwrite` on the
//! members' descriptors), one thread per member for the reads of a batch.
//! Offsets called *absolute* are byte offsets on the member device
//! (a volume's data area starts at [`RaidVolume::data_offset`](crate::raid::engine::RaidVolume::data_offset)).
//!
//! Every step comes from the volume's level, not from its name: a stripe's
//! [`Redundancy`](crate::raid::level::Redundancy) (its chunks' places,
//! copies or data with P and Q) and, for a lost chunk, its
//! [`Recover`] steps ([`Layout::recover`]); a new level that fills them
//! is rebuilt and scrubbed with no change here.
//!
//! - [`rebuild`]: reconstructs one member (state
//!   [`Rebuilding`](crate::raid::health::MemberState::Rebuilding)) from the others, as md's
//!   recovery does (`md_do_sync` with `MD_RECOVERY_RECOVER`): a copy from
//!   another readable copy (RAID 1's mirrors, RAID 10's other copy), or
//!   the lost chunk recomputed from the rest of its stripe (RAID 5 and 6,
//!   [`parity`](crate::raid::parity)). It resumes from the member's recovery
//!   offset, moves it forward after every batch, and hands it to a
//!   checkpoint callback every 64 MiB so a stopped rebuild resumes where it
//!   was. Regions the write-intent bitmap says were never written are
//!   skipped: with a live-data map nothing is written there, without one
//!   (older arrays) they are zeroed. `check` and `repair` skip them too.
//! - [`check`]: md's `check` / `repair` sync actions: every stripe's copies
//!   (RAID 1, 10) or parity (RAID 5, 6) are compared; `repair` rewrites the
//!   copies from the first readable copy, or P and Q from the data.
//! - [`resync`]: the same repair over the ranges the bitmap says are dirty
//!   after an unclean stop (md's resync with a bitmap).
//!
//! # Locking
//!
//! Stripe numbering is the layout's ([`crate::raid::layout`]): RAID 5/6 stripe =
//! member row, RAID 1 stripe = row, RAID 10 stripe = logical chunk. A batch
//! takes the locks of its stripes in increasing order, blocking
//! ([`crate::raid::locks::StripeLocks::lock`]); this is deadlock-free as long as
//! the data path never holds one stripe lock while waiting for a lower one.
//! Batches hold at most [`MAX_BATCH_STRIPES`] stripes, and a rebuild holds
//! up to three batches at once (being read, reconstructed, written), so at
//! most about 3072 consecutive stripes are held by one caller: the lock
//! table's Fibonacci hash never puts two of them on one lock word (by the
//! three-gap theorem, `k` consecutive multiples of the golden ratio modulo
//! 1 are at least `1 / (sqrt(5) * 2584)` apart for `k <= 4181`, more than
//! the table's `2^-14` slot width; tested below), which would otherwise make
//! a batch wait for itself. (A `StripeLocks` call that takes a range of
//! stripes would remove this dependence on the hash.)
//!
//! # Degraded arrays and the write hole
//!
//! Only readable members ([`Health::readable`](crate::raid::health::Health::readable)) are read and repaired. A
//! RAID 5 stripe with a member missing, or a RAID 6 stripe with a data
//! member missing, cannot be checked (there is nothing left to compare
//! with) and is counted in [`CheckReport::stripes_unchecked`]; resync skips
//! it too. This is the RAID 5/6 write hole: if a degraded array stops
//! uncleanly in the middle of a write, the data chunk of the missing member
//! that the stripe's parity reconstructs may be wrong, and nothing on the
//! members can tell. md closes it with a journal or PPL; uraid counts the
//! stripes it could not resync ([`resync_report`]'s
//! [`CheckReport::stripes_unchecked`]) so the caller can report them.


use crate::volume::Volume;
use crate::raid::health::Health;
use crate::raid::layout::{Layout, Place};
use crate::raid::level::Recover;
use crate::raid::parity::Kernel;
use crate::{Error, ErrorKind, IoBuf, Result};


mod draid_spare;
mod rebuild;
mod scrub;

pub use rebuild::*;
pub use scrub::*;
use crate::raid::access::*;

/// Sleeps until `bytes` at `rate` bytes/s would have taken since `t0`:
/// the rate limit of rebuild, scrub and reshape, called before (or after)
/// each batch with the bytes done so far. Nothing for no `rate`; the
/// callers refuse a rate of 0.
pub(crate) fn pace(t0: std::time::Instant, bytes: u64, rate: Option<u64>) {
    let Some(rate) = rate.filter(|&r| r > 0) else { return };
    let due = crate::clock::since(t0).as_nanos();
    let want = bytes as u128 * 1_000_000_000 / rate as u128;
    if want > due {
        crate::clock::sleep(std::time::Duration::from_nanos((want - due).min(u64::MAX as u128) as u64));
    }
}

/// Member bytes per batch (per member), before the stripe cap.
const BATCH_BYTES: u64 = 4 << 20;
/// Most stripes one batch locks at once.
pub const MAX_BATCH_STRIPES: u64 = 1024;
/// Rebuild progress between two checkpoints, in member bytes.
pub const CHECKPOINT_BYTES: u64 = 64 << 20;

/// Bytes of rebuild progress between two checkpoints:
/// [`CHECKPOINT_BYTES`], or with the `failpoints` feature the
/// `URAID_FAILPOINT_CHECKPOINT_BYTES` variable's positive number (end-to-end
/// tests of a kill -9 mid-rebuild on members of a few MiB).
fn checkpoint_bytes() -> u64 {
    #[cfg(feature = "failpoints")]
    if let Some(n) = std::env::var("URAID_FAILPOINT_CHECKPOINT_BYTES").ok().and_then(|v| v.parse::<u64>().ok()).filter(|&n| n > 0) {
        return n;
    }
    CHECKPOINT_BYTES
}
/// Most mismatch locations a [`CheckReport`] lists.
pub const MAX_LOCATIONS: usize = 1000;

/// How a rebuild runs.
pub struct RebuildOptions<'a> {
    /// Most bytes per second written to the rebuilt member (reconstructed
    /// data; zeroed never-written regions do not count); `None` for no
    /// limit. `Some(0)` is refused.
    pub rate: Option<u64>,
    /// Called with the new recovery offset (absolute member bytes, below
    /// which the rebuilt member is valid and durable) every
    /// [`CHECKPOINT_BYTES`] and at the end; the caller persists it in the
    /// superblocks. An error stops the rebuild with that error.
    pub checkpoint: &'a (dyn Fn(u64) -> Result<()> + Sync),
    /// A resync from the write-intent bitmap (md's re-add): the member
    /// came back after missing only the writes since it left, all of which
    /// the bitmap marks dirty (a degraded array keeps its bits); only
    /// dirty regions are reconstructed, the rest is left as it is. Needs a
    /// bitmap.
    pub only_dirty: bool,
}

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RebuildReport {
    /// Bytes reconstructed and written to the member.
    pub bytes_written: u64,
    /// Bytes of regions not live (never written, or discarded whole),
    /// not reconstructed: left alone with a live-data map, zeroed without.
    pub bytes_skipped: u64,
    /// Bytes left as they were by a resync from the bitmap (regions not
    /// dirty: the member already holds them).
    pub bytes_in_sync: u64,
    /// Bytes of the member in RAID 0 volumes, which cannot be rebuilt.
    pub bytes_lost: u64,
    /// Indices (into the `vols` given) of the RAID 0 volumes on the member:
    /// their data is lost.
    pub lost_volumes: Vec<usize>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Which place of a stripe disagrees (see [`Mismatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum MismatchKind {
    /// A copy (RAID 1, 10) that differs from the first readable copy.
    Copy,
    /// Parity P differs from the XOR of the stripe's data.
    P,
    /// Syndrome Q differs from the one computed from the stripe's data.
    Q,
}

/// One place of a mismatching stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MismatchPlace {
    /// Member role.
    pub member: u32,
    /// Absolute member byte offset of the chunk.
    pub offset: u64,
    /// What it holds.
    pub kind: MismatchKind,
}

/// A stripe whose copies or parity disagree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// Stripe number (see the module docs).
    pub stripe: u64,
    /// Volume logical byte offset where the stripe's data starts.
    pub logical: u64,
    /// The chunks that disagree with the reference (the first readable
    /// copy, or the parity computed from the data).
    pub places: Vec<MismatchPlace>,
}

/// What a check or repair found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Logical bytes of the stripes checked.
    pub bytes_checked: u64,
    /// Stripes compared.
    pub stripes_checked: u64,
    /// Stripes that could not be compared: too few readable members.
    pub stripes_unchecked: u64,
    /// Stripes whose copies or parity disagreed.
    pub mismatches: u64,
    /// Logical bytes of the stripes skipped because their regions are not
    /// live (live-data map): they hold no data, nothing to compare.
    #[serde(default)]
    pub bytes_skipped: u64,
    /// Mismatching stripes rewritten (repair).
    pub repaired: u64,
    /// The first [`MAX_LOCATIONS`] mismatches, in stripe order.
    pub locations: Vec<Mismatch>,
}

/// Rows a batch of `l` covers: [`BATCH_BYTES`] per member, at most
/// [`MAX_BATCH_STRIPES`] stripes, at least one row.
fn batch_rows(l: &Layout) -> u64 {
    (BATCH_BYTES / l.chunk()).min(MAX_BATCH_STRIPES / l.stripes_per_row()).max(1)
}

/// `&mut bufs[a]` and `&bufs[b]`, `a != b`.
fn pair(bufs: &mut [IoBuf], a: usize, b: usize) -> (&mut IoBuf, &IoBuf) {
    assert_ne!(a, b);
    if a < b {
        let (x, y) = bufs.split_at_mut(b);
        (&mut x[a], &y[0])
    } else {
        let (x, y) = bufs.split_at_mut(a);
        (&mut y[0], &x[b])
    }
}

/// Where a rebuild stands, for error messages.
fn lost_error(vol_index: usize, l: &Layout, target: u32, at: u64, why: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "rebuild of member {target} stopped at member offset {at}: {why}, so volume {vol_index} ({}) \
             cannot be reconstructed there; member {target} stays rebuilding with its last checkpoint. \
             Bring the failed member back (assemble with it) and rebuild again, or restore from backup",
            l.level()
        ),
    )
}

/// Reads what the reconstruction of `target`'s chunks in member rows
/// `[ra, rb)` of a volume needs from the other members, each into its own
/// buffer in `bufs` (one thread per member), and returns the reads made
/// and how each row is found (see [`plan_sources`]). A member whose read fails is failed in the
/// health and the batch is planned again without it. Errors: `Io` when
/// too few readable members are left (see [`lost_error`]), or the health
/// hook's error.
#[allow(clippy::too_many_arguments)]
fn read_sources(
    vol: &Volume,
    vol_index: usize,
    l: &Layout,
    target: u32,
    ra: u64,
    rb: u64,
    bufs: &mut [IoBuf],
) -> Result<(Vec<Read>, Vec<RowSource>)> {
    let health = vol.raid().health();
    let base = vol.raid().data_offset();
    loop {
        let at = |why: &str| lost_error(vol_index, l, target, base + ra * l.chunk(), why);
        let (reads, rows) = plan_sources(health, l, base, target, ra, rb).map_err(|e| at(&e))?;
        for r in &reads {
            let cap = bufs[r.into].len();
            assert!(r.at + r.len <= cap, "{} reads {} bytes of member {} for a buffer of {cap}: straddle_rows too small", l.level(), r.len, r.member);
        }
        let errors = read_all(vol.raid().members(), health, &reads, bufs);
        if errors.is_empty() {
            return Ok((reads, rows));
        }
        fail_all(health, errors)?;
    }
}

/// The member reads that rebuild `target`'s chunks in member rows
/// `[ra, rb)` of a volume at data offset `base`, as its level says
/// ([`Layout::recover`]): for each row, the first other readable copy,
/// or every other readable chunk of the stripe; one read per run of
/// adjacent chunks a member gives (one for a RAID 5 batch; a declustered
/// volume reads only the chunks of the groups the target is in), each into
/// the member's buffer at its place from the member's first chunk on;
/// and per row how [`reconstruct`] finds it ([`RowSource`]: a rebalanced
/// role's row is copied from its spare chunk where that can be read, see
/// [`copy_from`]; a row whose chunk is a spare chunk holding another role
/// is that role's, see [`content_of`](draid_spare::content_of)). The
/// error says why some row cannot be
/// rebuilt (no copy readable, more chunks of a stripe lost than it has
/// parity for, no redundancy).
fn plan_sources(health: &Health, l: &Layout, base: u64, target: u32, ra: u64, rb: u64) -> std::result::Result<(Vec<Read>, Vec<RowSource>), String> {
    let chunk = l.chunk();
    let readable = |p: Place| health.readable(p.member, base + p.member_offset, chunk);
    let mut given: Vec<Vec<u64>> = vec![Vec::new(); l.members()];
    let mut take = |p: Place| given[p.member as usize].push(p.member_offset);
    let rebalance = rebalanced(health, target);
    let mut rows = Vec::with_capacity((rb - ra) as usize);
    for r in ra..rb {
        if let Some(x) = rebalance.and_then(|sm| copy_from(sm, health, target, base, r, chunk)) {
            take(Place { member: x, member_offset: r * chunk });
            rows.push(RowSource::Copy(x));
            continue;
        }
        let whose = draid_spare::content_of(health, target, r);
        rows.push(RowSource::Recover(whose));
        match l.recover(whose, r) {
            Recover::Zero => {}
            Recover::Copy { from, lost } => match from.iter().find(|&p| p != lost && p.member != target && readable(p)) {
                Some(p) => take(p),
                None => return Err(format!("no other member holding a copy of its chunk in row {r} is readable")),
            },
            Recover::Parity { places, parity, index } => {
                let mut gone = 1;
                for (_, p) in places.iter().enumerate().filter(|&(i, _)| i != index) {
                    if readable(p) {
                        take(p);
                    } else {
                        gone += 1;
                    }
                }
                if gone > parity {
                    return Err(format!("{} other members holding chunks of its stripe in row {r} are not readable", gone - 1));
                }
            }
            Recover::Lost => return Err(format!("{} keeps no copy or parity", l.level())),
        }
    }
    let mut reads = Vec::new();
    for (m, offs) in given.iter_mut().enumerate() {
        offs.sort_unstable();
        offs.dedup();
        let Some(&first) = offs.first() else { continue };
        let mut run = (first, first + chunk);
        for &o in &offs[1..] {
            if o != run.1 {
                reads.push(Read { member: m as u32, offset: base + run.0, len: (run.1 - run.0) as usize, into: m, at: (run.0 - first) as usize });
                run.0 = o;
            }
            run.1 = o + chunk;
        }
        reads.push(Read { member: m as u32, offset: base + run.0, len: (run.1 - run.0) as usize, into: m, at: (run.0 - first) as usize });
    }
    Ok((reads, rows))
}

/// How a rebuild finds its target's chunk of one member row (planned by
/// [`plan_sources`], followed by [`reconstruct`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowSource {
    /// As the level recovers this role's chunk of the row
    /// ([`Layout::recover`]): the target's own, or the role a distributed
    /// spare holds in the target's spare chunk of the row.
    Recover(u32),
    /// Copied from the spare chunk on this member (a rebalance).
    Copy(u32),
}

/// The spare map when `target` is being rebalanced (rebuilt onto its
/// device while a distributed spare still holds it): its rows are copied
/// from their spare chunks where those can be read.
fn rebalanced(health: &Health, target: u32) -> Option<&crate::raid::spare::SpareMap> {
    health.spare_map().map(|sm| &**sm).filter(|_| health.rebalancing(target))
}

/// The member whose spare chunk of member row `r` holds rebalanced role
/// `target`'s chunk and can be read (the member is active: a member
/// rebuilt since holds no copy there), for a copy instead of a
/// reconstruction; `None`: reconstruct the row.
fn copy_from(sm: &crate::raid::spare::SpareMap, health: &Health, target: u32, base: u64, r: u64, chunk: u64) -> Option<u32> {
    let x = sm.holder(target, base + r * chunk)?;
    (x != target && health.state(x) == crate::raid::health::MemberState::Active).then_some(x)
}

/// Computes `target`'s chunks in member rows `[ra, rb)` into
/// `bufs[target][..(rb - ra) * chunk]` from the sources `reads` read
/// (see [`read_sources`]), as the level says ([`Layout::recover`]): a
/// copy, zeros, or the stripe's parity arithmetic over the chunks read
/// (a chunk not read is recomputed too, into scratch). `base` is the
/// volume's data offset. Each row as `rows` (one per row) says: a copy
/// of the spare chunk read, or the level's recovery of that role's chunk.
#[allow(clippy::too_many_arguments)]
fn reconstruct(
    l: &Layout,
    base: u64,
    target: u32,
    ra: u64,
    rb: u64,
    reads: &[Read],
    rows: &[RowSource],
    bufs: &mut [IoBuf],
    kernel: Kernel,
) {
    let chunk = l.chunk();
    let c = chunk as usize;
    let t = target as usize;
    // The buffer and offset that place `p` was read into, if it was.
    let read_at = |p: Place| {
        let (lo, hi) = (base + p.member_offset, base + p.member_offset + chunk);
        let x = reads.iter().find(|x| x.member == p.member && x.offset <= lo && hi <= x.offset + x.len as u64)?;
        Some((x.into, x.at + (lo - x.offset) as usize))
    };
    let mut scratch = IoBuf::new(c * l.level().parity_chunks().max(1));
    for r in ra..rb {
        let o = ((r - ra) * chunk) as usize;
        let whose = match rows[(r - ra) as usize] {
            RowSource::Copy(x) => {
                let (b, at) = read_at(Place { member: x, member_offset: r * chunk }).expect("the spare chunk was read");
                let (dst, src) = pair(bufs, t, b);
                dst[o..o + c].copy_from_slice(&src[at..at + c]);
                continue;
            }
            RowSource::Recover(whose) => whose,
        };
        match l.recover(whose, r) {
            // `Lost` was refused by the planning.
            Recover::Zero | Recover::Lost => bufs[t][o..o + c].fill(0),
            Recover::Copy { from, lost } => {
                let (b, at) = from.iter().filter(|&p| p != lost && p.member != target).find_map(read_at).expect("a copy was read");
                let (dst, src) = pair(bufs, t, b);
                dst[o..o + c].copy_from_slice(&src[at..at + c]);
            }
            Recover::Parity { places, parity, index } => {
                let mut parts: Vec<Option<&mut IoBuf>> = bufs.iter_mut().map(Some).collect();
                let mut spare = scratch.chunks_mut(c);
                let mut lost = vec![index];
                let mut stripe: Vec<&mut [u8]> = Vec::with_capacity(places.len());
                for (i, p) in places.iter().enumerate() {
                    let (b, at) = match read_at(p) {
                        _ if i == index => (t, o),
                        Some(x) => x,
                        None => {
                            lost.push(i);
                            stripe.push(spare.next().expect("no more chunks lost than parity"));
                            continue;
                        }
                    };
                    let buf = parts[b].take().expect("a member twice in a stripe");
                    stripe.push(&mut buf[at..at + c]);
                }
                match parity {
                    1 => kernel.recover_raid5(&mut stripe, lost[0]),
                    _ => kernel.recover_raid6(&mut stripe, &lost),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;