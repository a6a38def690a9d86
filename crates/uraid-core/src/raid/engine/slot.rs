//! One request in flight in a [`RaidQueue`](super::RaidQueue): its slot
//! in the queue's table (tag, op, buffer, its member pieces and how many
//! are pending, its error), and the RAID 0 splitter that cuts it into
//! member pieces, merging those contiguous on one member.

use crate::io::buf::IoBuf;
use crate::io::request::{Op, Request};
use crate::raid::chunk::MAX_MEMBERS;
use crate::raid::geometry::Geometry;
use crate::Error;

use super::piece::{new_piece, Piece};

const IOV_MAX: usize = 1024;

pub(super) struct Slot {
    pub(super) tag: u64,
    pub(super) op: Op,
    pub(super) fua: bool,
    pub(super) len: usize,
    pub(super) buf: Option<IoBuf>,
    pub(super) pieces: Vec<Piece>,
    pub(super) npieces: usize,
    pub(super) pending: usize,
    pub(super) error: Option<Error>,
    /// Byte offset of the request in the volume.
    pub(super) offset: u64,
    /// A member failed a piece: plan the request again once the rest is in.
    pub(super) replan: bool,
    /// Plans so far (bounded by the member count).
    pub(super) plans: u8,
    /// A FUA zeroing or discard: once done, a flush of the members
    /// (fallocate(2) has no FUA; see [`RaidQueue::sync_members`]).
    pub(super) sync_after: bool,
    /// That flush is in flight.
    pub(super) syncing: bool,
    /// A rows write ([`RaidQueue::push_rows`]), not a range of the volume.
    pub(super) rows: Option<RowsWrite>,
    /// Member ranges whose read failed, rewritten once the request has
    /// their data from redundancy (see `repair.rs`); empty but then.
    pub(super) repairs: Vec<super::repair::Repair>,
}

impl Slot {

    /// A slot that holds no request.
    pub(super) fn empty() -> Slot {
        Slot {
            tag: 0,
            op: Op::Read,
            fua: false,
            len: 0,
            buf: None,
            pieces: Vec::new(),
            npieces: 0,
            pending: 0,
            error: None,
            offset: 0,
            replan: false,
            plans: 0,
            sync_after: false,
            syncing: false,
            rows: None,
            repairs: Vec::new(),
        }
    }

    /// The RAID 0 splitter and merger: cuts the slot's request (a read,
    /// write, discard or zeroing, filled and checked) by `geometry` into
    /// member pieces at `data_offset` on each member, merging pieces
    /// contiguous on one member into one vectored I/O.
    #[inline]
    pub(super) fn split(&mut self, geometry: &Geometry, data_offset: u64) {
        let (offset, len) = (self.offset, self.len);
        let mut last = [usize::MAX; MAX_MEMBERS];
        match self.op {
            Op::Flush => unreachable!("a flush has no range to split"),
            Op::Discard | Op::WriteZeroes { .. } => {
                geometry.for_each_segment(offset, len, |seg| {
                    self.add_segment(&mut last, seg.member, data_offset + seg.member_offset, None, seg.len);
                });
            }
            Op::Read | Op::Write => {
                let base = self.buf.as_mut().expect("checked").as_mut_ptr();
                geometry.for_each_segment(offset, len, |seg| {
                    // SAFETY: buf_offset + len <= req.len <= buffer length (checked).
                    let ptr = unsafe { base.add(seg.buf_offset) };
                    self.add_segment(&mut last, seg.member, data_offset + seg.member_offset, Some(ptr), seg.len);
                });
            }
        }
    }

    /// Takes request `req` (a rows write when `rows` is set), nothing
    /// planned yet.
    pub(super) fn fill(&mut self, req: Request, rows: Option<RowsWrite>) {
        self.tag = req.tag;
        self.op = req.op;
        // A FUA zeroing or discard goes without FUA, then the members are
        // flushed (`sync_members`).
        self.sync_after = req.fua && matches!(req.op, Op::Discard | Op::WriteZeroes { .. });
        self.syncing = false;
        self.fua = req.fua && !self.sync_after;
        self.len = req.len;
        self.buf = req.buf;
        self.error = None;
        self.npieces = 0;
        self.offset = req.offset;
        self.replan = false;
        self.plans = 0;
        self.rows = rows;
        self.repairs.clear();
    }

    /// Adds `len` bytes at absolute offset `abs` of `member` to the slot's
    /// pieces: the member's last piece (`last[member]`, `usize::MAX` for none)
    /// grows when it ends at `abs` (and, with a buffer `ptr`, has room for
    /// another iovec; memory contiguous with its last iovec extends that one),
    /// otherwise a new piece starts. So a request is one (vectored) I/O per
    /// run of contiguous member bytes, whatever the chunk size.
    pub(in crate::raid::engine) fn add_segment(&mut self, last: &mut [usize; MAX_MEMBERS], member: u32, abs: u64, ptr: Option<*mut u8>, len: usize) {
        let li = last[member as usize];
        if li != usize::MAX {
            let p = &mut self.pieces[li];
            if p.offset + p.len as u64 == abs && (ptr.is_none() || p.iov.len() < IOV_MAX) {
                if let Some(ptr) = ptr {
                    let tail = p.iov.last_mut().expect("piece has an iovec");
                    // SAFETY: pointer arithmetic inside the same buffer.
                    if unsafe { (tail.iov_base as *mut u8).add(tail.iov_len) } == ptr {
                        tail.iov_len += len;
                    } else {
                        p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
                    }
                }
                p.len += len;
                return;
            }
        }
        last[member as usize] = self.npieces;
        let p = self.next_piece();
        p.member = member;
        p.offset = abs;
        p.len = len;
        if let Some(ptr) = ptr {
            p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
        }
    }

    #[inline]
    pub(in crate::raid::engine) fn next_piece(&mut self) -> &mut Piece {
        if self.npieces == self.pieces.len() {
            self.pieces.push(new_piece());
        }
        let (op, fua) = (self.op, self.fua);
        let p = &mut self.pieces[self.npieces];
        self.npieces += 1;
        p.op = op;
        p.fua = fua;
        p.done = 0;
        p.iov.clear();
        p.iov_first = 0;
        p.deadline = 0;
        p.zero_fill = false;
        p.started = 0;
        p
    }
}

/// What a rows write writes: rows `[start, end)` (bytes inside a chunk) of
/// `stripe`, the data indices in `written` (bit i for index i).
#[derive(Clone, Copy)]
pub(super) struct RowsWrite {
    pub(super) stripe: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) written: u64,
}
