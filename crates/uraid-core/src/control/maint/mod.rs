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
//! - [`rebuild`]: reconstructs one member (state
//!   [`Rebuilding`](MemberState::Rebuilding)) from the others, as md's
//!   recovery does (`md_do_sync` with `MD_RECOVERY_RECOVER`): RAID 1 copies
//!   a readable mirror, RAID 10 the other copy of each chunk, RAID 5 and 6
//!   recompute the lost chunk from the rest of its stripe
//!   ([`parity`](crate::raid::parity)). It resumes from the member's recovery
//!   offset, moves it forward after every batch, and hands it to a
//!   checkpoint callback every 64 MiB so a stopped rebuild resumes where it
//!   was. Regions the write-intent bitmap says were never written are
//!   zeroed instead of reconstructed.
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
use crate::raid::layout::{Layout, Role};
use crate::raid::level::Copies;
use crate::raid::parity::Kernel;
use crate::{Error, ErrorKind, IoBuf, Result};


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
    /// Bytes of never-written regions, zeroed instead of reconstructed.
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

/// The members of stripe `s` of a RAID 5/6 layout in stripe order (data
/// 0 .., P, Q).
fn stripe_members(l: &Layout, s: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..l.data_chunks()).map(|i| l.data_member(s, i)).collect();
    v.push(l.parity_member(s));
    v.extend(l.q_member(s));
    debug_assert!(v.iter().enumerate().all(|(i, m)| !v[..i].contains(m)), "stripe {s}: a member twice in {v:?}");
    v
}

/// How the lost chunks of a level are found again, from its descriptor's
/// data (not its name): a copy on any other member (every member holds
/// the volume), the other copy of each chunk (a fixed number of copies),
/// or the rest of the stripe and its parity.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Recovery {
    AnyCopy,
    OtherCopy,
    Parity,
}

fn recovery(l: &Layout) -> Recovery {
    match l.level().desc().copies {
        Copies::All => Recovery::AnyCopy,
        Copies::Fixed(_) => Recovery::OtherCopy,
        Copies::One => Recovery::Parity,
    }
}

/// Slices `[o, o+len)` of the buffers in the order of `order`.
fn gather<'b>(bufs: &'b mut [IoBuf], order: &[u32], o: usize, len: usize) -> Vec<&'b mut [u8]> {
    let mut parts: Vec<Option<&'b mut [u8]>> = bufs.iter_mut().map(|b| Some(&mut b[o..o + len])).collect();
    order.iter().map(|&m| parts[m as usize].take().expect("a member is listed twice in a stripe")).collect()
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
/// buffer in `bufs` (one thread per member), and returns the reads made. A
/// member whose read fails is failed in the health and the batch is
/// planned again without it. Errors: `Io` when too few readable members
/// are left (see [`lost_error`]), or the health hook's error.
#[allow(clippy::too_many_arguments)]
fn read_sources(
    vol: &Volume,
    vol_index: usize,
    l: &Layout,
    target: u32,
    ra: u64,
    rb: u64,
    bufs: &mut [IoBuf],
) -> Result<Vec<Read>> {
    let health = vol.raid().health();
    let chunk = l.chunk();
    let base = vol.raid().data_offset();
    let (abs, len) = (base + ra * chunk, ((rb - ra) * chunk) as usize);
    let n = l.members() as u32;
    loop {
        let at = |why: &str| lost_error(vol_index, l, target, abs, why);
        let reads = match recovery(l) {
            Recovery::AnyCopy => any_copy_source(health, n, target, abs, len).map_err(|e| at(&e))?,
            Recovery::OtherCopy => other_copy_sources(health, l, base, target, ra, rb).map_err(|e| at(&e))?,
            Recovery::Parity => stripe_sources(health, l, target, abs, len).map_err(|e| at(&e))?,
        };
        let errors = read_all(vol.raid().members(), &reads, bufs);
        if errors.is_empty() {
            return Ok(reads);
        }
        fail_all(health, errors)?;
    }
}

/// The first other member readable over `[abs, abs + len)` (RAID 1);
/// the error says why there is none.
fn any_copy_source(health: &Health, n: u32, target: u32, abs: u64, len: usize) -> std::result::Result<Vec<Read>, String> {
    match (0..n).find(|&m| m != target && health.readable(m, abs, len as u64)) {
        Some(src) => Ok(vec![Read { member: src, offset: abs, len, into: src as usize }]),
        None => Err("no other member is readable".into()),
    }
}

/// Each member holding the other copy of a chunk of `target`'s rows
/// `[ra, rb)`, over its span of them (RAID 10's other copy may sit one
/// row up or down with an odd member count).
fn other_copy_sources(health: &Health, l: &Layout, base: u64, target: u32, ra: u64, rb: u64) -> std::result::Result<Vec<Read>, String> {
    let chunk = l.chunk();
    let mut span: Vec<Option<(u64, u64)>> = vec![None; l.members()];
    for r in ra..rb {
        if let Some(p) = partner(l, target, r) {
            let e = span[p.0 as usize].get_or_insert((p.1, p.1 + chunk));
            *e = (e.0.min(p.1), e.1.max(p.1 + chunk));
        }
    }
    let mut reads = Vec::new();
    for (m, s) in span.iter().enumerate() {
        if let Some((lo, hi)) = *s {
            if !health.readable(m as u32, base + lo, hi - lo) {
                return Err(format!("member {m}, which holds the other copy, is not readable"));
            }
            reads.push(Read { member: m as u32, offset: base + lo, len: (hi - lo) as usize, into: m });
        }
    }
    Ok(reads)
}

/// Every other member readable over `[abs, abs + len)` (RAID 5 and 6),
/// when no more are lost than the stripe keeps parity for.
fn stripe_sources(health: &Health, l: &Layout, target: u32, abs: u64, len: usize) -> std::result::Result<Vec<Read>, String> {
    let mut reads = Vec::new();
    let mut lost = 1;
    for m in (0..l.members() as u32).filter(|&m| m != target) {
        if health.readable(m, abs, len as u64) {
            reads.push(Read { member: m, offset: abs, len, into: m as usize });
        } else {
            lost += 1;
        }
    }
    if lost > l.level().parity_chunks() {
        return Err(format!("{} members besides it are not readable", lost - 1));
    }
    Ok(reads)
}

/// Computes `target`'s chunks in member rows `[ra, rb)` into
/// `bufs[target][..(rb - ra) * chunk]` from the sources `reads` read
/// (see [`read_sources`]); `base` is the volume's data offset.
#[allow(clippy::too_many_arguments)]
fn reconstruct(l: &Layout, base: u64, target: u32, ra: u64, rb: u64, reads: &[Read], bufs: &mut [IoBuf], kernel: Kernel) {
    let chunk = l.chunk();
    let c = chunk as usize;
    let t = target as usize;
    match recovery(l) {
        Recovery::AnyCopy => {
            let len = ((rb - ra) * chunk) as usize;
            let (dst, src) = pair(bufs, t, reads[0].into);
            dst[..len].copy_from_slice(&src[..len]);
        }
        Recovery::OtherCopy => {
            for r in ra..rb {
                let o = ((r - ra) * chunk) as usize;
                match partner(l, target, r) {
                    Some((m, off)) => {
                        let start = reads.iter().find(|x| x.member == m).expect("read planned").offset - base;
                        let from = (off - start) as usize;
                        let (dst, src) = pair(bufs, t, m as usize);
                        dst[o..o + c].copy_from_slice(&src[from..from + c]);
                    }
                    None => bufs[t][o..o + c].fill(0),
                }
            }
        }
        Recovery::Parity => {
            let unread: Vec<u32> = (0..l.members() as u32).filter(|&m| !reads.iter().any(|r| r.member == m)).collect();
            for r in ra..rb {
                let order = stripe_members(l, r);
                let lost: Vec<usize> =
                    unread.iter().map(|m| order.iter().position(|x| x == m).expect("every member is in a stripe")).collect();
                let o = ((r - ra) * chunk) as usize;
                let mut stripe = gather(bufs, &order, o, c);
                match l.level().parity_chunks() {
                    1 => kernel.recover_raid5(&mut stripe, lost[0]),
                    _ => kernel.recover_raid6(&mut stripe, &lost),
                }
            }
        }
    }
}

/// Where another copy of `target`'s chunk in row `r` is (member,
/// data-area offset), or `None` for an unused slot (RAID 10).
fn partner(l: &Layout, target: u32, r: u64) -> Option<(u32, u64)> {
    match l.role(target, r * l.chunk()) {
        Role::Data(lo) => l.data_locations(lo).iter().find(|p| p.member != target).map(|p| (p.member, p.member_offset)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;