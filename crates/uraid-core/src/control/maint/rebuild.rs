//! Rebuild: writes the contents of a member being rebuilt (a replacement,
//! a spare taking a role, a returning member) from the other members,
//! batch by batch under stripe locks while clients write, checkpointing
//! its progress in the member states.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;

use super::{batch_rows, checkpoint_bytes, pace, read_sources, reconstruct, RebuildOptions, RebuildReport, RowSource};
use super::draid_spare::Target;
use crate::raid::access::{lock_stripes, Read};
use crate::raid::health::{Health, MemberState};
use crate::raid::layout::Layout;
use crate::raid::locks::StripeGuard;
use crate::raid::parity::Kernel;
use crate::volume::Volume;
use crate::{bail, IoBuf, Result};

/// A batch read by the first stage of a rebuild, for the second.
pub(super) struct ReadBatch<'v> {
    l: &'v Layout,
    base: u64,
    rows: Range<u64>,
    /// The sources read into `bufs`, or `None` for a never-written batch
    /// (to be zeroed).
    read: Option<(Vec<Read>, Vec<RowSource>, Vec<IoBuf>)>,
    /// Already in sync (a resync from the bitmap): nothing to write.
    keep: bool,
    guards: Vec<StripeGuard<'v>>,
}

/// A batch handed to the writer of a rebuild.
pub(super) struct Job<'v> {
    range: Range<u64>,
    /// Reconstructed bytes, or `None` to zero the range.
    data: Option<IoBuf>,
    /// Leave the range as it is (already in sync).
    keep: bool,
    guards: Vec<StripeGuard<'v>>,
}

/// Rebuilds role `member` of the array whose volumes are `vols` (all of
/// them, sharing one [`Health`](crate::raid::health::Health)) from the other members.
///
/// The member must be [`Rebuilding`](MemberState::Rebuilding) in the
/// volumes' health, with its recovery offset (absolute member bytes) where
/// to resume (0 for a fresh start). Volumes are walked in member order;
/// each batch of member rows is locked and read from the readable members
/// (one thread each), reconstructed by a second thread and written to the
/// member by a third, so the reads of one batch overlap the reconstruction
/// and the write of the two before it; after the write the recovery offset
/// moves to the batch's end and its locks are released. Regions the volume's bitmap says were never written are
/// skipped: nothing is written there with a live-data map (their bytes
/// may be anything; their first write zeroes them on every member), and
/// without one (older arrays) they are zeroed (zeros on every member); with
/// [`RebuildOptions::only_dirty`] only the bitmap's dirty regions are
/// reconstructed and the rest is left as it is. A role a distributed
/// spare still holds (the rebalance: a device took the role over, see
/// [`Health::rebalancing`](crate::raid::health::Health::rebalancing)) is
/// copied row by row from its spare chunks instead, and reconstructed
/// only in the rows whose spare chunk's member is not active; the data
/// path reads and writes its bytes at and above the recovery offset in
/// the spare chunks until the end, when the caller frees the spare.
/// RAID 0 volumes cannot
/// be rebuilt and are listed as lost. `progress(done, total)` is called
/// after every batch with member bytes. At the end the member is synced, the
/// checkpoint is called with the end of the last volume, and the member is
/// set [`Active`](MemberState::Active) (the caller persists that).
///
/// Errors (nothing written on the first three): `InvalidInput` when `vols`
/// is empty, do not share one health, the role is out of range or not
/// rebuilding, or `rate` is 0. `Io` when a read fails on a source member
/// (it is failed in the health, and the rebuild goes on if the volume can
/// still be reconstructed without it) and leaves too few members, when the
/// write to the member fails (the member is then failed), or the error of
/// the checkpoint callback. After an error the member stays Rebuilding (or
/// Faulty if its own write failed) with the recovery offset of the last
/// batch written; the checkpoint is called once more with it (after a sync)
/// when the member is still rebuilding, so a later rebuild resumes there.
pub fn rebuild(
    vols: &[Arc<Volume>],
    member: u32,
    opts: &RebuildOptions<'_>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RebuildReport> {
    let health = check_rebuild(vols, member, opts)?;
    let first = &vols[0];
    let t0 = crate::clock::now();
    let target = Target::of(first.raid().members(), &health, member);
    let kernel = Kernel::detect();
    let start = health.recovery(member);
    let total: u64 = vols.iter().map(|v| v.raid().geometry().member_size()).sum();
    let final_end = vols.iter().map(|v| span(v).end).max().unwrap_or(0);
    let done = AtomicU64::new(vols.iter().map(|v| start.clamp(span(v).start, span(v).end) - span(v).start).sum());
    let mut report = RebuildReport::default();
    let cap = vols.iter().filter_map(|v| v.raid().geometry().layout()).map(buf_len).max().unwrap_or(0);
    progress(done.load(Ordering::Relaxed), total);

    let counts = Counts::default();
    let result: Result<()> = std::thread::scope(|s| {
        let (read_tx, read_rx) = mpsc::sync_channel::<ReadBatch<'_>>(0);
        let (job_tx, job_rx) = mpsc::sync_channel::<Job<'_>>(0);
        let (set_tx, set_rx) = mpsc::channel::<Vec<IoBuf>>();
        let (out_tx, out_rx) = mpsc::channel::<IoBuf>();
        let skip_dead = first.raid().bitmap().is_some_and(|b| b.live_map());
        // A rebalance checkpoints every batch, under its locks: the data
        // path writes the role's rows below the recovery offset to the
        // device only, so after a crash the recorded offset must cover
        // every row written there (its spare chunks did not get them).
        let every = if health.rebalancing(member) { 1 } else { checkpoint_bytes() };
        let writer = Writer { target: &target, health: &health, member, opts, counts: &counts, done: &done, skip_dead, every };
        let writer = s.spawn(move || writer.run(job_rx, out_tx));
        let computer = s.spawn(move || compute(read_rx, job_tx, set_tx, out_rx, member, cap, kernel));
        let mut reader = Reader { vols, member, opts, t0, start, sent_bytes: 0, sets: Vec::new(), set_rx };
        reader.sets = (0..2).map(|_| (0..first.raid().members().len()).map(|_| IoBuf::new(cap)).collect()).collect();
        let read_result = reader.run(read_tx, &mut report, &mut |d| progress(d, total), &done);
        computer.join().expect("rebuild reconstruction thread panicked");
        let wrote = writer.join().expect("rebuild writer thread panicked");
        wrote.and(read_result)
    });
    report.bytes_written = counts.written.load(Ordering::Relaxed);
    report.bytes_skipped = counts.skipped.load(Ordering::Relaxed);
    report.bytes_in_sync = counts.kept.load(Ordering::Relaxed);
    if let Err(e) = result {
        if matches!(health.state(member), MemberState::Rebuilding | MemberState::Spared) && target.sync(&health, member).is_ok() {
            let _ = (opts.checkpoint)(health.recovery(member));
        }
        return Err(e);
    }
    target.sync(&health, member)?;
    if target.spread() {
        // The role stays held by its spare, now in sync.
        health.set_recovery(member, u64::MAX);
        (opts.checkpoint)(u64::MAX)?;
    } else {
        health.set_recovery(member, final_end);
        (opts.checkpoint)(final_end)?;
        health.set_state(member, MemberState::Active);
    }
    progress(total, total);
    report.seconds = crate::clock::since(t0).as_secs_f64();
    Ok(report)
}

/// The absolute member bytes of `v`'s data area.
fn span(v: &Volume) -> Range<u64> {
    v.raid().data_offset()..v.raid().data_offset() + v.raid().geometry().member_size()
}

/// Checks what [`rebuild`] is given (see its errors); the array's shared
/// health.
fn check_rebuild(vols: &[Arc<Volume>], member: u32, opts: &RebuildOptions<'_>) -> Result<Arc<Health>> {
    let Some(first) = vols.first() else {
        bail!(InvalidInput, "no volume given to rebuild");
    };
    let health = first.raid().health().clone();
    let n = first.raid().members().len();
    if vols.iter().any(|v| !Arc::ptr_eq(v.raid().health(), &health) || v.raid().members().len() != n) {
        bail!(InvalidInput, "the volumes given to rebuild do not belong to one array (different member states)");
    }
    if member as usize >= n {
        bail!(InvalidInput, "member role {member} is out of range: the array has {n} roles (0 to {})", n - 1);
    }
    let state = health.state(member);
    if !matches!(state, MemberState::Rebuilding | MemberState::Spared) || health.recovery(member) == u64::MAX {
        bail!(
            InvalidInput,
            "member {member} is {}, not rebuilding; add a spare or replace the member to start a rebuild",
            state.name()
        );
    }
    if opts.rate == Some(0) {
        bail!(InvalidInput, "a rebuild rate of 0 bytes/s would never finish; give a positive rate or none");
    }
    if opts.only_dirty && vols.iter().any(|v| v.raid().bitmap().is_none()) {
        bail!(InvalidInput, "a resync from the bitmap needs a write-intent bitmap, and the array has none; rebuild in full");
    }
    Ok(health)
}

/// Member bytes a rebuild wrote, zeroed, and left in sync.
#[derive(Default)]
struct Counts {
    written: AtomicU64,
    skipped: AtomicU64,
    kept: AtomicU64,
}

/// Stage 3 of a rebuild: writes to the member, moves the recovery
/// offset, releases the locks, checkpoints.
struct Writer<'a> {
    target: &'a Target<'a>,
    health: &'a Health,
    member: u32,
    opts: &'a RebuildOptions<'a>,
    counts: &'a Counts,
    done: &'a AtomicU64,
    /// The array has a live-data map: regions not live get no write.
    skip_dead: bool,
    /// Bytes of progress between two checkpoints (1: after every batch).
    every: u64,
}

impl Writer<'_> {
    /// Writes every job until the channel closes; hands the written
    /// buffers back to stage 2 on `out_tx`.
    fn run(self, job_rx: Receiver<Job<'_>>, out_tx: Sender<IoBuf>) -> Result<()> {
        let mut since = 0u64;
        for job in job_rx {
            let len = job.range.end - job.range.start;
            // A region the live-data map says was never written is
            // left as it is (reads of it return zeros; its first write
            // zeroes it on every member).
            if !job.keep && !(job.data.is_none() && self.skip_dead) {
                self.target.write(self.health, self.member, job.data.as_deref(), job.range.start, len)?;
            }
            let count = match job.data {
                Some(buf) => {
                    let _ = out_tx.send(buf);
                    &self.counts.written
                }
                None if job.keep => &self.counts.kept,
                None => &self.counts.skipped,
            };
            count.fetch_add(len, Ordering::Relaxed);
            debug_assert!(self.health.recovery(self.member) <= job.range.end, "the recovery offset moves back");
            self.health.set_recovery(self.member, job.range.end);
            self.done.fetch_add(len, Ordering::Relaxed);
            since += len;
            if since >= self.every {
                since = 0;
                self.target.sync(self.health, self.member)?;
                (self.opts.checkpoint)(job.range.end)?;
            }
            // Released after the checkpoint: a rebalanced role's writes
            // past it go to its device only once the superblocks say so.
            drop(job.guards);
        }
        Ok(())
    }
}

/// Stage 2 of a rebuild: reconstructs (or copies a rebalanced role's
/// rows read from their spare chunks); hands the source buffers back to
/// stage 1 and the member's bytes to stage 3.
fn compute<'v>(
    read_rx: Receiver<ReadBatch<'v>>,
    job_tx: SyncSender<Job<'v>>,
    set_tx: Sender<Vec<IoBuf>>,
    out_rx: Receiver<IoBuf>,
    member: u32,
    cap: usize,
    kernel: Kernel,
) {
    for b in read_rx {
        let (ra, rb) = (b.rows.start, b.rows.end);
        let range = b.base + ra * b.l.chunk()..b.base + rb * b.l.chunk();
        let data = b.read.map(|(reads, rows, mut bufs)| {
            reconstruct(b.l, b.base, member, ra, rb, &reads, &rows, &mut bufs, kernel);
            let fresh = out_rx.try_recv().unwrap_or_else(|_| IoBuf::new(cap));
            let out = std::mem::replace(&mut bufs[member as usize], fresh);
            let _ = set_tx.send(bufs);
            out
        });
        if job_tx.send(Job { range, data, keep: b.keep, guards: b.guards }).is_err() {
            return; // the writer failed
        }
    }
}

/// Stage 1 of a rebuild (the caller's thread): locks each batch and reads
/// the sources. Two buffer sets: one being read, one being reconstructed.
struct Reader<'a> {
    vols: &'a [Arc<Volume>],
    member: u32,
    opts: &'a RebuildOptions<'a>,
    t0: std::time::Instant,
    /// The recovery offset the rebuild started from (absolute bytes).
    start: u64,
    /// Bytes read so far (paced by the rate).
    sent_bytes: u64,
    sets: Vec<Vec<IoBuf>>,
    set_rx: Receiver<Vec<IoBuf>>,
}

impl<'a> Reader<'a> {
    /// Walks the volumes in member order, sending each batch to stage 2;
    /// RAID 0 volumes are listed as lost in `report`. Closes the channel
    /// at the end (or at the first error, returned).
    fn run(
        &mut self,
        read_tx: SyncSender<ReadBatch<'a>>,
        report: &mut RebuildReport,
        progress: &mut dyn FnMut(u64),
        done: &AtomicU64,
    ) -> Result<()> {
        let mut order: Vec<usize> = (0..self.vols.len()).collect();
        order.sort_by_key(|&i| self.vols[i].raid().data_offset());
        for vi in order {
            let vol = &self.vols[vi];
            let Some(l) = vol.raid().geometry().layout() else {
                report.lost_volumes.push(vi);
                report.bytes_lost += vol.raid().geometry().member_size();
                continue;
            };
            if span(vol).end <= self.start {
                continue;
            }
            let chunk = l.chunk();
            let mut row = (self.start.max(vol.raid().data_offset()) - vol.raid().data_offset()) / chunk;
            while row < l.member_chunks() {
                let Some(batch) = self.batch(vi, l, row)? else {
                    return Ok(()); // stage 2 stopped: the writer's error is returned
                };
                let rb = batch.rows.end;
                if read_tx.send(batch).is_err() {
                    return Ok(());
                }
                progress(done.load(Ordering::Relaxed));
                row = rb;
            }
        }
        Ok(())
    }

    /// The batch of volume `vi` from member row `row`: its rows, locked,
    /// and read unless never written (or in sync). `None` when stage 2
    /// stopped.
    fn batch(&mut self, vi: usize, l: &'a Layout, row: u64) -> Result<Option<ReadBatch<'a>>> {
        let vol = &self.vols[vi];
        let (base, chunk) = (vol.raid().data_offset(), l.chunk());
        let rb = self.batch_end(vol, l, row);
        let range = base + row * chunk..base + rb * chunk;
        pace(self.t0, self.sent_bytes, self.opts.rate);
        let guards = lock_stripes(vol.raid(), l.stripes_of_rows(row, rb));
        // Decided under the locks: a write that set the bit first has
        // either finished or not started on these stripes.
        let written = match vol.raid().bitmap() {
            Some(b) => b.written_range(range.start, range.end),
            None => true,
        };
        let keep = self.opts.only_dirty && !vol.raid().bitmap().is_some_and(|b| b.dirty_range(range.start, range.end));
        let read = if written && !keep {
            let Some(mut bufs) = self.sets.pop().or_else(|| self.set_rx.recv().ok()) else {
                return Ok(None);
            };
            let (reads, rows) = read_sources(vol, vi, l, self.member, row, rb, &mut bufs)?;
            self.sent_bytes += range.end - range.start;
            Some((reads, rows, bufs))
        } else {
            None
        };
        Ok(Some(ReadBatch { l, base, rows: row..rb, read, keep, guards }))
    }

    /// Where the batch from `row` ends: [`batch_rows`] on, or earlier
    /// where the written (for a resync from the bitmap: the dirty) state
    /// changes, so that regions that need nothing are passed whole.
    fn batch_end(&self, vol: &Volume, l: &Layout, row: u64) -> u64 {
        let (base, chunk) = (vol.raid().data_offset(), l.chunk());
        let rb = (row + batch_rows(l)).min(l.member_chunks());
        let Some(b) = vol.raid().bitmap() else { return rb };
        let state = |r: u64| {
            let (a, e) = (base + r * chunk, base + (r + 1) * chunk);
            if self.opts.only_dirty { b.dirty_range(a, e) } else { b.written_range(a, e) }
        };
        let w0 = state(row);
        (row + 1..rb).find(|&r| state(r) != w0).unwrap_or(rb)
    }
}

/// Bytes of one member's buffer for a batch of `l`: the batch's rows, plus
/// the rows its stripes reach past either end (RAID 10's copies straddle
/// rows with an odd member count).
pub(super) fn buf_len(l: &Layout) -> usize {
    ((batch_rows(l) + l.straddle_rows()) * l.chunk()) as usize
}
