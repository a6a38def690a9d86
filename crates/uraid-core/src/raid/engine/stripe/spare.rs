//! The data path's side of distributed spare space (issue 33): member
//! pieces planned for a role that a distributed spare holds
//! ([`Spared`](crate::raid::health::MemberState::Spared), or being
//! rebalanced at and above its recovery offset: see
//! [`Health::spare_home`](crate::raid::health::Health::spare_home)) go
//! to the spare chunk of their row, on the member
//! [`SpareMap::holder`](crate::raid::spare::SpareMap::holder) names, at
//! the same member offset. Run only when
//! [`Health::spared`](crate::raid::health::Health::spared) is set: once per
//! request (after planning it) and once per stripe operation phase, so a
//! volume with no role held pays one flag test per request.

use super::super::slot::Slot;
use super::RaidQueue;
use crate::io::request::Op;

impl RaidQueue {
    /// Sends slot `si`'s pieces on held roles to the spare chunks'
    /// members, splitting a piece that spans two chunk rows (a read merged
    /// across rows: each row's spare chunk is on another member, and a
    /// rebalanced role's recovery offset is at a row's end).
    #[cold]
    pub(super) fn remap_slot(&mut self, si: usize) {
        let health = self.vol.health().clone();
        let Some(sm) = health.spare_map() else { return };
        let slot = &mut self.slots[si];
        let mut pi = 0;
        while pi < slot.npieces {
            let p = &slot.pieces[pi];
            if p.op != Op::Flush && health.held(p.member) {
                let end = sm.row_end(p.offset);
                if p.offset + p.len as u64 > end {
                    split_piece(slot, pi, (end - p.offset) as usize);
                }
                let p = &mut slot.pieces[pi];
                p.member = health.physical(p.member, p.offset);
            }
            pi += 1;
        }
    }

    /// Sends stripe operation `idx`'s pieces on held roles to the spare
    /// chunks' members (a stripe operation's pieces are in one row; it
    /// holds its stripe's lock, so a rebalance's recovery offset does not
    /// cross that row until it is done).
    #[cold]
    pub(super) fn remap_sop(&mut self, idx: usize) {
        let health = self.vol.health().clone();
        let Some(sm) = health.spare_map() else { return };
        let sop = &mut self.raid.sops[idx];
        for p in sop.pieces[..sop.npieces].iter_mut() {
            if health.held(p.member) {
                debug_assert!(p.len == 0 || p.offset + p.len as u64 <= sm.row_end(p.offset), "a stripe piece spans two rows");
                p.member = health.physical(p.member, p.offset);
            }
        }
    }
}

/// Splits piece `pi` of `slot` at byte `at` (0 < at < len): the piece
/// keeps the head, a new piece (appended) takes the tail and its iovecs.
fn split_piece(slot: &mut Slot, pi: usize, at: usize) {
    let (member, offset, len) = {
        let p = &slot.pieces[pi];
        (p.member, p.offset, p.len)
    };
    debug_assert!(at > 0 && at < len);
    let iovs = std::mem::take(&mut slot.pieces[pi].iov);
    let (mut head, mut tail) = (Vec::with_capacity(iovs.len()), Vec::new());
    let mut acc = 0usize;
    for v in iovs {
        let (s, e) = (acc, acc + v.iov_len);
        acc = e;
        if e <= at {
            head.push(v);
        } else if s >= at {
            tail.push(v);
        } else {
            let cut = at - s;
            head.push(libc::iovec { iov_base: v.iov_base, iov_len: cut });
            // SAFETY: `cut` is inside this iovec's buffer.
            tail.push(libc::iovec { iov_base: unsafe { (v.iov_base as *mut u8).add(cut) }.cast(), iov_len: v.iov_len - cut });
        }
    }
    let p = &mut slot.pieces[pi];
    p.iov = head;
    p.len = at;
    let q = slot.next_piece();
    q.member = member;
    q.offset = offset + at as u64;
    q.len = len - at;
    q.iov = tail;
    q.zero_fill = false;
    q.deadline = 0;
}
