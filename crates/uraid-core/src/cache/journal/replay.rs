//! Replaying the journal at assemble: the valid records from the tail on,
//! laid over each other per cache line in their write order and written to
//! the RAID layer below the cache, then the members flushed and the log
//! emptied.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache::journal::{new_nonce, rows_shape_ok, u32_at, u64_at, Found, Journal, RecordKind, HEADER_SIZE, RECORD_MAGIC};
use crate::io::request::{BlockQueue, Request};
use crate::raid::engine::{RaidQueue, RaidVolume};
use crate::{Error, IoBuf, Result};

impl Journal {
    /// Reads the valid records from the tail on, then writes their data to
    /// `vol` (a queue that bypasses the cache): per cache line of
    /// `line` bytes, the records' data laid over each other in the order of
    /// their cache write sequence numbers (see the format); a line the
    /// records cover whole is written as one full-line write (a
    /// full-stripe write on RAID 5/6, which sets parity right whatever a
    /// torn write left), otherwise each covered run. Then flushes the
    /// members and empties the log. Returns (records, bytes) replayed; a
    /// lost journal replays nothing. Errors: `Io`; on error nothing is
    /// retired, so the next assemble replays again.
    pub fn replay(&self, vol: &Arc<RaidVolume>, line: u64) -> Result<(u64, u64)> {
        if self.is_lost() {
            return Ok((0, 0));
        }
        let (mut pos, mut seq) = {
            let s = self.lock();
            (s.tail, s.tail_seq)
        };
        let mut found: Vec<Found> = Vec::new();
        let mut hdr = IoBuf::new(self.unit() as usize);
        while let Some(f) = self.read_record(&mut hdr, pos, seq)?.or_else(|| {
            let next = pos.div_ceil(self.log_size) * self.log_size;
            (next != pos).then_some(next).and_then(|p| self.read_record(&mut hdr, p, seq).ok().flatten())
        }) {
            let end = f.pieces().last().map_or(0, |(o, n, _)| o + n);
            if f.pos + self.record_span(f.len) - self.lock().tail > self.log_size || end > vol.capacity() {
                break;
            }
            pos = f.pos + self.record_span(f.len);
            seq += 1;
            found.push(f);
        }
        // Per line: the records touching it, in log order; zeroes records
        // only where others touch (a zeroing of the whole range comes first).
        let mut lines: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, f) in found.iter().enumerate().filter(|(_, f)| !f.zeroes()) {
            // A valid record has data (see read_record).
            for (o, n, _) in f.pieces() {
                for idx in o / line..=(o + n - 1) / line {
                    let v = lines.entry(idx).or_default();
                    if v.last() != Some(&i) {
                        v.push(i);
                    }
                }
            }
        }
        for (i, f) in found.iter().enumerate().filter(|(_, f)| f.zeroes()) {
            let (first, last) = (f.offset / line, (f.offset + f.piece - 1) / line);
            for (_, v) in lines.range_mut(first..=last) {
                v.push(i);
            }
        }
        let mut q = vol.queue(1)?;
        for f in found.iter().filter(|f| f.zeroes()) {
            let r = Request { op: crate::io::request::Op::WriteZeroes { no_hole: false }, offset: f.offset, len: f.piece as usize, buf: None, tag: 0, fua: false };
            q.run(r).result?;
        }
        let mut bytes = 0;
        let mut img = IoBuf::new(line as usize);
        for (idx, recs) in lines.iter_mut() {
            bytes += self.replay_line(&mut q, &found, recs, *idx * line, &mut img)?;
        }
        q.run(Request::flush(0)).result?;
        {
            let mut s = self.lock();
            s.tail = pos;
            s.head = pos;
            s.tail_seq = seq;
            s.next_seq = seq;
            s.written_below = seq;
            s.held.clear();
            s.early.clear();
            // Records of this life of the log that were written but not
            // replayed (after the first invalid one) must never count.
            s.nonce = new_nonce();
        }
        match self.write_header(pos, seq) {
            // The records are on the members; the journal went (its member
            // failed): nothing is left to retire.
            Err(_) if self.is_lost() => {}
            r => r?,
        }
        Ok((found.len() as u64, bytes))
    }

    /// Replays the records `recs` (indexes into `found`) of the line at
    /// byte `base` of the volume: lays them over each other in `img` (a
    /// line's bytes) in the order of their cache writes, then writes each
    /// run they cover through `q`. Returns the bytes written. Errors:
    /// `Io` (a journal read, a member write).
    fn replay_line(&self, q: &mut RaidQueue, found: &[Found], recs: &mut [usize], base: u64, img: &mut IoBuf) -> Result<u64> {
        let line = img.len() as u64;
        let sectors = (line / 512) as usize;
        let mut bytes = 0;
        recs.sort_by_key(|&i| (found[i].cache_seq, found[i].kind));
        let mut covered = vec![false; sectors];
        for &i in recs.iter() {
            let f = found[i];
            for (o, n, at) in f.pieces() {
                let a = o.max(base);
                let b = (o + n).min(base + line);
                if a >= b {
                    continue;
                }
                if f.zeroes() {
                    img[(a - base) as usize..(b - base) as usize].fill(0);
                } else {
                    let mut part = IoBuf::new((b - a) as usize);
                    self.read_at(&mut part, HEADER_SIZE + (f.pos % self.log_size) + self.unit() + at + (a - o))?;
                    img[(a - base) as usize..(b - base) as usize].copy_from_slice(&part);
                }
                covered[((a - base) / 512) as usize..((b - base) / 512) as usize].iter_mut().for_each(|c| *c = true);
            }
        }
        let mut s = 0;
        while s < sectors {
            if !covered[s] {
                s += 1;
                continue;
            }
            let e = (s..sectors).find(|&k| !covered[k]).unwrap_or(sectors);
            let len = (e - s) * 512;
            let mut buf = IoBuf::new(len);
            buf.copy_from_slice(&img[s * 512..e * 512]);
            q.run(Request::write(base + (s * 512) as u64, len, buf, 0)).result?;
            bytes += len as u64;
            s = e;
        }
        Ok(bytes)
    }

    /// The record at `pos` if it is the valid record number `seq`.
    pub(super) fn read_record(&self, hdr: &mut IoBuf, pos: u64, seq: u64) -> Result<Option<Found>> {
        let at = HEADER_SIZE + pos % self.log_size;
        let unit = self.unit();
        if pos % self.log_size + unit > self.log_size {
            return Ok(None);
        }
        self.read_at(hdr, at)?;
        let h = &hdr[..];
        let nonce = self.lock().nonce;
        if &h[..8] != RECORD_MAGIC
            || u32_at(h, 508) != crc32c::crc32c(&h[..508])
            || u64_at(h, 8) != seq
            || u64_at(h, 16) != pos
            || u64_at(h, 56) != nonce
        {
            return Ok(None);
        }
        let (offset, len, crc, kind, cache_seq) = (u64_at(h, 32), u64_at(h, 40), u32_at(h, 48), u32_at(h, 24), u64_at(h, 64));
        let zeroes = kind == RecordKind::Zeroes as u32;
        // The record must fit the log after its header (the check above
        // keeps this subtraction in range; a sum could wrap for a crafted
        // length near 2^64).
        // The log and every record position are whole units, so a length
        // within the room is within it padded too.
        let room = self.log_size - (pos % self.log_size + unit);
        if (len == 0) != zeroes || len % 512 != 0 || offset % 512 != 0 || len > room {
            return Ok(None);
        }
        if zeroes {
            // One range and no data.
            let bytes = u64_at(h, 80);
            let ok = bytes != 0 && bytes.is_multiple_of(512) && offset.checked_add(bytes).is_some();
            return Ok(ok.then_some(Found { pos, offset, len, kind, cache_seq, stride: 0, piece: bytes }));
        }
        let (stride, piece) = if kind == RecordKind::Rows as u32 {
            let (stride, piece) = (u64_at(h, 72), u64_at(h, 80));
            if !rows_shape_ok(len, stride, piece) {
                return Ok(None);
            }
            (stride, piece)
        } else {
            (0, len)
        };
        // Every piece must lie in u64 (replay checks the volume's end).
        if (len / piece - 1).checked_mul(stride).and_then(|x| x.checked_add(offset)).and_then(|x| x.checked_add(piece)).is_none() {
            return Ok(None);
        }
        let mut data = IoBuf::try_new(len.div_ceil(unit) as usize * unit as usize).map_err(|e| {
            Error::new(
                crate::ErrorKind::Superblock,
                format!("{}: journal record {seq} at log byte {pos} holds {len} bytes: {e}", self.name()),
            )
        })?;
        self.read_at(&mut data, at + unit)?;
        if crc32c::crc32c(&data[..len as usize]) != crc {
            return Ok(None);
        }
        Ok(Some(Found { pos, offset, len, kind, cache_seq, stride, piece }))
    }
}
