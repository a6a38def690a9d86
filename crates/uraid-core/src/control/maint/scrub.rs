//! Scrub and resync: check (count where copies or parity disagree), repair
//! (rewrite them), and resync after an unclean stop (repair over the
//! regions the bitmap marks dirty).

use std::ops::Range;
use std::sync::Arc;

use super::{
    batch_rows, buf_len, pace, CheckReport, Mismatch, MismatchKind, MismatchPlace, MAX_BATCH_STRIPES,
    MAX_LOCATIONS,
};
use crate::raid::access::{fail_all, lock_stripes, read_all, sync, write_role, Read};
use crate::raid::layout::{Layout, Place, Places};
use crate::raid::level::{Redundancy, StripePlaces};
use crate::raid::parity::Kernel;
use crate::volume::Volume;
use crate::{bail, IoBuf, Result};

/// What a scan does on a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Check,
    Repair,
}

/// Checks (and with `repair`, fixes) every stripe of `vol`: RAID 1 and 10
/// compare the copies with the first readable one, RAID 5 and 6 recompute
/// P (and Q) from the data and compare. Repair rewrites the differing
/// copies from the first readable copy, or P and Q from the data (as md's
/// `repair`: parity is assumed wrong), then syncs the members it wrote.
/// Only readable members are read or written; stripes that cannot be
/// compared are counted as unchecked. `progress(done, total)` is in logical
/// bytes of the volume.
///
/// Errors: `InvalidInput` for a RAID 0 volume (nothing to compare);
/// `Io` from the health hook when a member that fails a read or write
/// cannot be marked faulty durably. A member read or write error fails the
/// member and the scan goes on without it.
pub fn check(vol: &Arc<Volume>, repair: bool, progress: &mut dyn FnMut(u64, u64)) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    check_part(vol, repair, &CheckOptions::default(), &mut report, progress)?;
    Ok(report)
}

/// How a [`check_part`] runs: where it starts, how fast, when it stops.
#[derive(Debug, Default, Clone, Copy)]
pub struct CheckOptions<'a> {
    /// The stripe to start at (0: from the start; the value a stopped
    /// [`check_part`] returned: resume there).
    pub start_stripe: u64,
    /// Most logical bytes of the volume checked per second (md's
    /// `sync_speed_max`, here per volume); `None`: no limit.
    pub rate: Option<u64>,
    /// When set, the scan stops after its current batch (a few MiB).
    pub stop: Option<&'a std::sync::atomic::AtomicBool>,
}

/// [`check`] from `opts.start_stripe`, at most `opts.rate` bytes/s, that
/// stops after the batch during which `opts.stop` is set, adding what it
/// finds to `report`. `progress(done, total)` is in logical bytes of the
/// whole volume. Returns `None` when the scan reached the end, or
/// `Some(stripe)` where it stopped: give it as `start_stripe` to resume
/// (a scrub that a live service pauses to change the array, as md's
/// `sync_action` = `idle` then `check` with `sync_min`).
///
/// Errors: as [`check`]; `InvalidInput` for a rate of 0.
pub fn check_part(
    vol: &Arc<Volume>,
    repair: bool,
    opts: &CheckOptions<'_>,
    report: &mut CheckReport,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<u64>> {
    let Some(l) = vol.raid().geometry().layout() else {
        bail!(InvalidInput, "a RAID 0 volume has no copies or parity to check");
    };
    if opts.rate == Some(0) {
        bail!(InvalidInput, "a scrub rate of 0 bytes/s would never finish; give a positive rate or none");
    }
    let mut scan = Scanner::new(vol, l, if repair { Mode::Repair } else { Mode::Check });
    let width = l.stripe_data_width();
    let total = l.stripes() * width;
    let start = opts.start_stripe.min(l.stripes());
    progress(start * width, total);
    let t0 = crate::clock::now();
    let mut stopped = None;
    let mut s = start;
    while s < l.stripes() {
        pace(t0, (s - start) * width, opts.rate);
        if opts.stop.is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed)) {
            stopped = Some(s);
            break;
        }
        let e = (s + scan.per_batch()).min(l.stripes());
        scan.run(s..e, report, &mut |s| progress(s * width, total))?;
        s = e;
    }
    scan.finish()?;
    if stopped.is_none() {
        progress(total, total);
    }
    Ok(stopped)
}

/// Makes the copies or parity of `vol` agree again over `ranges` (absolute
/// member byte ranges, e.g. [`Bitmap::dirty`](crate::raid::bitmap::Bitmap::dirty)
/// after an unclean stop; parts outside the volume are ignored): RAID 1 and
/// 10 copy the first readable copy over the others, RAID 5 and 6 recompute
/// P (and Q) from the data, where they differ. Stripes that cannot be
/// resynced (degraded: see the module docs on the write hole) are left as
/// they are. Returns the member bytes covered (rows times chunk, summed over
/// the ranges). A RAID 0 volume has nothing to resync: 0.
///
/// Errors: as [`check`]; the members written are synced before returning.
pub fn resync(vol: &Arc<Volume>, ranges: &[Range<u64>]) -> Result<u64> {
    resync_report(vol, ranges).map(|(bytes, _)| bytes)
}

/// [`resync`], also returning what it found: the stripes compared, those
/// rewritten (`mismatches`, `repaired`, `locations`), and those it could
/// not resync because the volume is degraded (`stripes_unchecked`: the
/// write hole, see the module docs).
pub fn resync_report(vol: &Arc<Volume>, ranges: &[Range<u64>]) -> Result<(u64, CheckReport)> {
    let mut report = CheckReport::default();
    let Some(l) = vol.raid().geometry().layout() else {
        return Ok((0, report));
    };
    let mut scan = Scanner::new(vol, l, Mode::Repair);
    let (base, chunk) = (vol.raid().data_offset(), l.chunk());
    let mut bytes = 0;
    for r in ranges {
        let lo = r.start.max(base);
        let hi = r.end.min(base + l.member_size());
        if lo >= hi {
            continue;
        }
        let (ra, rb) = ((lo - base) / chunk, (hi - base).div_ceil(chunk));
        let stripes = l.stripes_of_rows(ra, rb);
        if stripes.is_empty() {
            continue;
        }
        bytes += (rb - ra) * chunk;
        scan.run(stripes, &mut report, &mut |_| {})?;
    }
    scan.finish()?;
    Ok((bytes, report))
}

/// The state of a check, repair or resync of one volume.
pub(super) struct Scanner<'v> {
    vol: &'v Volume,
    l: &'v Layout,
    mode: Mode,
    kernel: Kernel,
    bufs: Vec<IoBuf>,
    p: IoBuf,
    q: IoBuf,
    /// Members written (to sync at the end).
    dirty: Vec<bool>,
}

impl<'v> Scanner<'v> {
    fn new(vol: &'v Volume, l: &'v Layout, mode: Mode) -> Scanner<'v> {
        let n = l.members();
        let cap = buf_len(l);
        Scanner {
            vol,
            l,
            mode,
            kernel: Kernel::detect(),
            bufs: (0..n).map(|_| IoBuf::new(cap)).collect(),
            p: IoBuf::new(l.chunk() as usize),
            q: IoBuf::new(l.chunk() as usize),
            dirty: vec![false; n],
        }
    }

    /// Stripes per batch.
    fn per_batch(&self) -> u64 {
        self.l.stripes_in_rows(batch_rows(self.l)).clamp(1, MAX_BATCH_STRIPES)
    }

    /// Scans stripes `stripes` in batches; `done(s)` after each batch with
    /// the next stripe.
    fn run(&mut self, stripes: Range<u64>, report: &mut CheckReport, done: &mut dyn FnMut(u64)) -> Result<()> {
        let per = self.per_batch();
        let mut s = stripes.start;
        while s < stripes.end {
            let e = (s + per).min(stripes.end);
            self.batch(s, e, report)?;
            done(e);
            s = e;
        }
        Ok(())
    }

    /// One batch: stripes `[s0, s1)` under their locks.
    fn batch(&mut self, s0: u64, s1: u64, report: &mut CheckReport) -> Result<()> {
        let l = self.l;
        let rows = l.rows_of_stripes(s0, s1);
        let _guards = lock_stripes(self.vol.raid(), s0..s1);
        // Decided under the locks, as the rebuild does.
        if self.live_rows(&rows) == 0 {
            report.bytes_skipped += (s1 - s0) * l.stripe_data_width();
            return Ok(());
        }
        let readable = self.read_rows(&rows)?;
        for s in s0..s1 {
            if self.dead_stripe(s) {
                report.bytes_skipped += l.stripe_data_width();
                continue;
            }
            let mut places: Vec<MismatchPlace> = Vec::new();
            let checked = match l.redundancy(s) {
                Redundancy::Copies(copies) => self.compare_copies(copies, rows.start, &readable, &mut places),
                Redundancy::Parity { places: chunks, parity } => self.compare_parity(&chunks, parity, rows.start, &readable, &mut places),
                Redundancy::None => None,
            };
            let Some(reference) = checked else {
                report.stripes_unchecked += 1;
                continue;
            };
            report.stripes_checked += 1;
            report.bytes_checked += l.stripe_data_width();
            if places.is_empty() {
                continue;
            }
            report.mismatches += 1;
            if self.mode == Mode::Repair && self.repair(&places, reference)? {
                report.repaired += 1;
            }
            if report.locations.len() < MAX_LOCATIONS {
                report.locations.push(Mismatch { stripe: s, logical: s * l.stripe_data_width(), places });
            }
        }
        Ok(())
    }

    /// Live member bytes of member rows `rows` (all of them without a
    /// live-data map).
    fn live_rows(&self, rows: &Range<u64>) -> u64 {
        let (base, chunk) = (self.vol.raid().data_offset(), self.l.chunk());
        let (a, e) = (base + rows.start * chunk, base + rows.end * chunk);
        self.vol.raid().bitmap().map_or(e - a, |b| b.live_bytes(a, e))
    }

    /// True when a row of stripe `s` is in a region not live: the stripe
    /// was never written (a write makes every place's region live), so its
    /// bytes may be anything and are not compared.
    fn dead_stripe(&self, s: u64) -> bool {
        let rows = self.l.rows_of_stripes(s, s + 1);
        self.live_rows(&rows) < (rows.end - rows.start) * self.l.chunk()
    }

    /// Reads member rows `rows` of every readable member into the
    /// buffers (failing the members whose reads fail, and reading again
    /// without them); which members were read.
    fn read_rows(&mut self, rows: &Range<u64>) -> Result<Vec<bool>> {
        let (vol, l) = (self.vol, self.l);
        let health = vol.raid().health();
        let chunk = l.chunk();
        let (abs, len) = (vol.raid().data_offset() + rows.start * chunk, (rows.end - rows.start) * chunk);
        loop {
            let readable: Vec<bool> = (0..l.members() as u32).map(|m| health.readable(m, abs, len)).collect();
            let reads: Vec<Read> = (0..l.members())
                .filter(|&m| readable[m])
                .map(|m| Read { member: m as u32, offset: abs, len: len as usize, into: m, at: 0 })
                .collect();
            let errors = read_all(self.vol.raid().members(), self.vol.raid().health(), &reads, &mut self.bufs);
            if errors.is_empty() {
                return Ok(readable);
            }
            fail_all(health, errors)?;
        }
    }

    /// A stripe kept as `copies` (RAID 1, 10): compares its readable
    /// copies with the first (the buffers hold rows from `row0`), adding
    /// those that differ to `places`. `Some(reference copy: member, buffer
    /// offset)` when two copies could be compared.
    fn compare_copies(&self, copies: Places, row0: u64, readable: &[bool], places: &mut Vec<MismatchPlace>) -> Option<Option<(u32, usize)>> {
        let c = self.l.chunk() as usize;
        let at = |member_offset: u64| (member_offset - row0 * self.l.chunk()) as usize;
        let copies: Vec<(u32, u64)> = copies.iter().filter(|p| readable[p.member as usize]).map(|p| (p.member, p.member_offset)).collect();
        if copies.len() < 2 {
            return None;
        }
        let (rm, ro) = (copies[0].0, at(copies[0].1));
        for &(m, mo) in &copies[1..] {
            let o = at(mo);
            if self.bufs[m as usize][o..o + c] != self.bufs[rm as usize][ro..ro + c] {
                places.push(MismatchPlace { member: m, offset: self.vol.raid().data_offset() + mo, kind: MismatchKind::Copy });
            }
        }
        Some(Some((rm, ro)))
    }

    /// A stripe of data chunks and `parity` parity chunks at `chunks`
    /// (RAID 5, 6): recomputes its P (and Q) from its data (the buffers
    /// hold rows from `row0`) and compares, adding the parity chunks that
    /// differ to `places`. `Some(None)` when the stripe could be checked
    /// (every data chunk and P or Q readable).
    fn compare_parity(
        &mut self,
        chunks: &StripePlaces,
        parity: usize,
        row0: u64,
        readable: &[bool],
        places: &mut Vec<MismatchPlace>,
    ) -> Option<Option<(u32, usize)>> {
        let c = self.l.chunk() as usize;
        let at = |p: Place| (p.member_offset - row0 * self.l.chunk()) as usize;
        let chunks = chunks.as_slice();
        let d = chunks.len() - parity;
        let (p, q) = (chunks[d], chunks.get(d + 1).copied());
        let p_ok = readable[p.member as usize];
        let q_ok = q.is_some_and(|q| readable[q.member as usize]);
        if !chunks[..d].iter().all(|x| readable[x.member as usize]) || !(p_ok || q_ok) {
            return None;
        }
        let data: Vec<&[u8]> = chunks[..d].iter().map(|&x| &self.bufs[x.member as usize][at(x)..at(x) + c]).collect();
        match parity {
            1 => self.kernel.gen_p(&data, &mut self.p),
            _ => self.kernel.gen_pq(&data, &mut self.p, &mut self.q),
        }
        let base = self.vol.raid().data_offset();
        if p_ok && self.bufs[p.member as usize][at(p)..at(p) + c] != self.p[..] {
            places.push(MismatchPlace { member: p.member, offset: base + p.member_offset, kind: MismatchKind::P });
        }
        if let Some(q) = q.filter(|_| q_ok) {
            if self.bufs[q.member as usize][at(q)..at(q) + c] != self.q[..] {
                places.push(MismatchPlace { member: q.member, offset: base + q.member_offset, kind: MismatchKind::Q });
            }
        }
        Some(None)
    }

    /// Rewrites the mismatching `places` from the reference copy
    /// (`reference`: member, buffer offset) or the computed P and Q; a
    /// member whose write fails is failed. True when every write landed.
    fn repair(&mut self, places: &[MismatchPlace], reference: Option<(u32, usize)>) -> Result<bool> {
        let c = self.l.chunk() as usize;
        let mut ok = true;
        for p in places {
            let src: &[u8] = match (p.kind, reference) {
                (MismatchKind::Copy, Some((rm, ro))) => &self.bufs[rm as usize][ro..ro + c],
                (MismatchKind::P, _) => &self.p,
                (MismatchKind::Q, _) => &self.q,
                (MismatchKind::Copy, None) => unreachable!("a copy mismatch has a reference copy"),
            };
            let (members, health) = (self.vol.raid().members(), self.vol.raid().health());
            match write_role(members, health, p.member, src, p.offset) {
                Ok(()) => self.dirty[p.member as usize] = true,
                Err((x, _)) => {
                    ok = false;
                    health.fail(x)?;
                }
            }
        }
        Ok(ok)
    }

    /// Syncs the members written by a repair.
    fn finish(&mut self) -> Result<()> {
        for (m, d) in self.dirty.iter_mut().enumerate() {
            if std::mem::take(d) {
                sync(&self.vol.raid().members()[m], self.vol.raid().health(), m as u32)?;
            }
        }
        Ok(())
    }
}
