//! Rebuild: writes the contents of a member being rebuilt (a replacement,
//! a spare taking a role, a returning member) from the other members,
//! batch by batch under stripe locks while clients write, checkpointing
//! its progress in the member states.

use super::*;

/// A batch read by the first stage of a rebuild, for the second.
pub(super) struct ReadBatch<'v> {
    l: &'v Layout,
    base: u64,
    rows: Range<u64>,
    /// The sources read into `bufs`, or `None` for a never-written batch
    /// (to be zeroed).
    read: Option<(Vec<Read>, Vec<IoBuf>)>,
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
/// zeroed instead (they are zeros on every member); with
/// [`RebuildOptions::only_dirty`] only the bitmap's dirty regions are
/// reconstructed and the rest is left as it is. RAID 0 volumes cannot
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
    let Some(first) = vols.first() else {
        bail!(InvalidInput, "no volume given to rebuild");
    };
    let health = first.health().clone();
    let n = first.members().len();
    if vols.iter().any(|v| !Arc::ptr_eq(v.health(), &health) || v.members().len() != n) {
        bail!(InvalidInput, "the volumes given to rebuild do not belong to one array (different member states)");
    }
    if member as usize >= n {
        bail!(InvalidInput, "member role {member} is out of range: the array has {n} roles (0 to {})", n - 1);
    }
    let state = health.state(member);
    if state != MemberState::Rebuilding {
        bail!(
            InvalidInput,
            "member {member} is {}, not rebuilding; add a spare or replace the member to start a rebuild",
            state.name()
        );
    }
    if opts.rate == Some(0) {
        bail!(InvalidInput, "a rebuild rate of 0 bytes/s would never finish; give a positive rate or none");
    }
    if opts.only_dirty && vols.iter().any(|v| v.bitmap().is_none()) {
        bail!(InvalidInput, "a resync from the bitmap needs a write-intent bitmap, and the array has none; rebuild in full");
    }
    let t0 = crate::clock::now();
    let target = &first.members()[member as usize];
    let kernel = Kernel::detect();
    let mut order: Vec<usize> = (0..vols.len()).collect();
    order.sort_by_key(|&i| vols[i].data_offset());
    let start = health.recovery(member);
    let span = |v: &Volume| v.data_offset()..v.data_offset() + v.geometry().member_size();
    let total: u64 = vols.iter().map(|v| v.geometry().member_size()).sum();
    let final_end = vols.iter().map(|v| span(v).end).max().unwrap_or(0);
    let done = AtomicU64::new(vols.iter().map(|v| start.clamp(span(v).start, span(v).end) - span(v).start).sum());
    let mut report = RebuildReport::default();
    let cap = vols.iter().filter_map(|v| v.geometry().layout()).map(buf_len).max().unwrap_or(0);
    progress(done.load(Ordering::Relaxed), total);

    let (written, skipped, kept) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let result: Result<()> = std::thread::scope(|s| {
        let (read_tx, read_rx) = mpsc::sync_channel::<ReadBatch<'_>>(0);
        let (job_tx, job_rx) = mpsc::sync_channel::<Job<'_>>(0);
        let (set_tx, set_rx) = mpsc::channel::<Vec<IoBuf>>();
        let (out_tx, out_rx) = mpsc::channel::<IoBuf>();
        let (health, done, written, skipped, kept) = (&health, &done, &written, &skipped, &kept);

        // Stage 3: writes to the member, moves the recovery offset,
        // releases the locks, checkpoints.
        let writer = s.spawn(move || -> Result<()> {
            let mut since = 0u64;
            for job in job_rx {
                let len = job.range.end - job.range.start;
                let r = match &job.data {
                    _ if job.keep => Ok(()),
                    Some(buf) => write_member(target, &buf[..len as usize], job.range.start),
                    None => zero_member(target, job.range.start, len),
                };
                if let Err(e) = r {
                    health.fail(member)?;
                    return Err(e);
                }
                match job.data {
                    Some(buf) => {
                        written.fetch_add(len, Ordering::Relaxed);
                        let _ = out_tx.send(buf);
                    }
                    None if job.keep => {
                        kept.fetch_add(len, Ordering::Relaxed);
                    }
                    None => {
                        skipped.fetch_add(len, Ordering::Relaxed);
                    }
                }
                health.set_recovery(member, job.range.end);
                drop(job.guards);
                done.fetch_add(len, Ordering::Relaxed);
                since += len;
                if since >= CHECKPOINT_BYTES {
                    since = 0;
                    sync(target, health, member)?;
                    (opts.checkpoint)(job.range.end)?;
                }
            }
            Ok(())
        });

        // Stage 2: reconstructs; hands the source buffers back to stage 1
        // and the member's bytes to stage 3.
        let computer = s.spawn(move || {
            for b in read_rx {
                let (ra, rb) = (b.rows.start, b.rows.end);
                let range = b.base + ra * b.l.chunk()..b.base + rb * b.l.chunk();
                let data = b.read.map(|(reads, mut bufs)| {
                    reconstruct(b.l, b.base, member, ra, rb, &reads, &mut bufs, kernel);
                    let fresh = out_rx.try_recv().unwrap_or_else(|_| IoBuf::new(cap));
                    let out = std::mem::replace(&mut bufs[member as usize], fresh);
                    let _ = set_tx.send(bufs);
                    out
                });
                if job_tx.send(Job { range, data, keep: b.keep, guards: b.guards }).is_err() {
                    return; // the writer failed
                }
            }
        });

        // Stage 1 (this thread): locks each batch and reads the sources.
        // Two buffer sets: one being read, one being reconstructed.
        let mut sets: Vec<Vec<IoBuf>> = (0..2).map(|_| (0..n).map(|_| IoBuf::new(cap)).collect()).collect();
        let mut sent_bytes = 0u64;
        let mut read_result: Result<()> = Ok(());
        'vols: for &vi in &order {
            let vol = &vols[vi];
            let Some(l) = vol.geometry().layout() else {
                report.lost_volumes.push(vi);
                report.bytes_lost += vol.geometry().member_size();
                continue;
            };
            let base = vol.data_offset();
            if span(vol).end <= start {
                continue;
            }
            let chunk = l.chunk();
            let rows = l.member_chunks();
            let per = batch_rows(l);
            let mut row = (start.max(base) - base) / chunk;
            while row < rows {
                let mut rb = (row + per).min(rows);
                if let Some(b) = vol.bitmap() {
                    // End the batch where the written (for a resync from the
                    // bitmap: the dirty) state changes, so that regions that
                    // need nothing are passed whole.
                    let state = |r: u64| {
                        let (a, e) = (base + r * chunk, base + (r + 1) * chunk);
                        if opts.only_dirty { b.dirty_range(a, e) } else { b.written_range(a, e) }
                    };
                    let w0 = state(row);
                    rb = (row + 1..rb).find(|&r| state(r) != w0).unwrap_or(rb);
                }
                let range = base + row * chunk..base + rb * chunk;
                pace(t0, sent_bytes, opts.rate);
                let guards = lock_stripes(vol, stripes_of_rows(l, row, rb));
                // Decided under the locks: a write that set the bit first has
                // either finished or not started on these stripes.
                let written = match vol.bitmap() {
                    Some(b) => b.written_range(range.start, range.end),
                    None => true,
                };
                let keep = opts.only_dirty && !vol.bitmap().is_some_and(|b| b.dirty_range(range.start, range.end));
                let read = if written && !keep {
                    let Some(mut bufs) = sets.pop().or_else(|| set_rx.recv().ok()) else {
                        break 'vols; // stage 2 stopped: the writer's error is returned below
                    };
                    match read_sources(vol, vi, l, member, row, rb, &mut bufs) {
                        Ok(reads) => {
                            sent_bytes += range.end - range.start;
                            Some((reads, bufs))
                        }
                        Err(e) => {
                            read_result = Err(e);
                            break 'vols;
                        }
                    }
                } else {
                    None
                };
                if read_tx.send(ReadBatch { l, base, rows: row..rb, read, keep, guards }).is_err() {
                    break 'vols;
                }
                progress(done.load(Ordering::Relaxed), total);
                row = rb;
            }
        }
        drop(read_tx);
        computer.join().expect("rebuild reconstruction thread panicked");
        let wrote = writer.join().expect("rebuild writer thread panicked");
        wrote.and(read_result)
    });
    report.bytes_written = written.load(Ordering::Relaxed);
    report.bytes_skipped = skipped.load(Ordering::Relaxed);
    report.bytes_in_sync = kept.load(Ordering::Relaxed);
    if let Err(e) = result {
        if health.state(member) == MemberState::Rebuilding && sync(target, &health, member).is_ok() {
            let _ = (opts.checkpoint)(health.recovery(member));
        }
        return Err(e);
    }
    sync(target, &health, member)?;
    health.set_recovery(member, final_end);
    (opts.checkpoint)(final_end)?;
    health.set_state(member, MemberState::Active);
    progress(total, total);
    report.seconds = crate::clock::since(t0).as_secs_f64();
    Ok(report)
}

/// Bytes of one member's buffer for a batch of `l`: the batch's rows, plus
/// one row at each end for RAID 10 (whose stripes and copies straddle
/// rows with an odd member count).
pub(super) fn buf_len(l: &Layout) -> usize {
    let extra = if l.level() == RedundantLevel::Raid10 { 2 } else { 0 };
    ((batch_rows(l) + extra) * l.chunk()) as usize
}
