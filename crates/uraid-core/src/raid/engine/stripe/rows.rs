//! Rows writes: the journal flusher's write of whole rows of a RAID 5/6
//! stripe whose every data chunk it already holds ([`RaidQueue::push_rows`]),
//! checked and planned as one stripe operation that computes P and Q
//! without reading.

use super::{eio, Kind, Part};
use crate::io::buf::IoBuf;
use crate::io::request::{Op, Rejected, Request};
use crate::raid::engine::{RaidQueue, RowsWrite};
use crate::raid::layout::Layout;
use crate::{Error, ErrorKind};

impl RaidQueue {
    /// Plans a rows write (slot `si`, filled by [`push_rows`](Self::push_rows)):
    /// one stripe operation over its rows with every data index's new
    /// data given, so P and Q come from it and nothing is read.
    pub(super) fn plan_rows(&mut self, si: usize, l: &Layout) {
        if let Some(msg) = self.volume_failed(l) {
            self.slots[si].error = Some(eio(msg));
            return;
        }
        let RowsWrite { stripe, start, end, written } = self.slots[si].rows.expect("a rows write");
        let d = l.data_chunks();
        let piece = (end - start) as usize;
        let base = self.slots[si].buf.as_mut().expect("checked").as_mut_ptr();
        let idx = self.new_sop(si, Kind::Write, stripe, start, end);
        let sop = &mut self.raid.sops[idx as usize];
        sop.first = 0;
        sop.count = d;
        sop.skip = !written & ((1u64 << d) - 1);
        for i in 0..d {
            // SAFETY: the buffer holds d pieces of `piece` bytes (checked
            // by push_rows).
            let ptr = unsafe { base.add(i as usize * piece) };
            sop.parts.push(Part { index: i, start, end, ptr });
        }
        self.raid.started.push(idx);
    }

    /// Queues a *rows write* on a RAID 5/6 volume: rows `[start, end)`
    /// (byte offsets inside a chunk, multiples of the block size) of every
    /// data chunk of `stripe`, whose new data `buf` holds: data index i at
    /// `i * (end - start)` (it may be longer). P and Q are computed from it (nothing is read:
    /// md's reconstruct-write with every data chunk in hand), and only the
    /// data indices set in `written` (bit i for index i) are written, with
    /// P and Q; the others' data must be what their members hold (the
    /// caller read it), as it only feeds the parity. One request: its
    /// completion carries `tag` and the buffer back. The cache's flusher
    /// uses it for a journal rows record's write-back (see
    /// `cache::flusher`), which would otherwise read the rows twice.
    ///
    /// Errors (the request handed back): `Busy` when the queue is full,
    /// `InvalidInput` for a level without parity, rows out of the chunk or
    /// unaligned, a short buffer or an empty `written`, `OutOfRange` past
    /// the last stripe.
    pub fn push_rows(&mut self, tag: u64, stripe: u64, start: u64, end: u64, written: u64, buf: IoBuf) -> std::result::Result<(), Rejected> {
        let offset = self.layout_opt().map_or(0, |l| stripe.saturating_mul(l.stripe_data_width()).saturating_add(start));
        // The bytes written (the buffer may be longer).
        let len = self.layout_opt().map_or(0, |l| l.data_chunks() as usize * end.saturating_sub(start) as usize);
        let have = buf.len();
        let req = Request { op: Op::Write, offset, len, buf: Some(buf), tag, fua: false };
        let checked = (|| {
            if let Some(e) = self.broken.clone() {
                return Err(e);
            }
            if !self.has_room() {
                return Err(Error::new(ErrorKind::Busy, format!("queue is full ({} requests in flight); wait for completions first", self.slots.len())));
            }
            let l = match self.layout_opt() {
                Some(l) if l.level().has_parity() => l,
                _ => return Err(Error::new(ErrorKind::InvalidInput, "a rows write needs a RAID 5 or 6 volume".to_string())),
            };
            let d = l.data_chunks();
            let bs = self.vol.block_size() as u64;
            if start >= end || end > l.chunk() || !start.is_multiple_of(bs) || !end.is_multiple_of(bs) {
                return Err(Error::new(ErrorKind::InvalidInput, format!("rows {start}..{end} are not whole blocks inside a chunk of {} bytes", l.chunk())));
            }
            if stripe.checked_add(1).is_none_or(|n| n.saturating_mul(l.stripe_data_width()) > self.vol.capacity()) {
                return Err(Error::new(ErrorKind::OutOfRange, format!("stripe {stripe} is past the end of the volume ({} bytes)", self.vol.capacity())));
            }
            if written == 0 || written >> d != 0 || have < req.len {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("a rows write needs data for {d} data chunks ({} bytes, got {have}) and at least one of them to write", req.len),
                ));
            }
            Ok(())
        })();
        if let Err(error) = checked {
            return Err(Rejected { error, request: req });
        }
        let si = self.free.pop().expect("checked") as usize;
        self.slots[si].fill(req, Some(RowsWrite { stripe, start, end, written }));
        self.plan(si);
        Ok(())
    }
}
