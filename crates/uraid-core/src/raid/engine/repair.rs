//! Read errors repaired from redundancy (md's `fix_read_error`).
//!
//! A plain read piece of a redundant volume that fails on a member with a
//! device error (EIO, a medium error) does not fail the member at once:
//! the member's range is *avoided* by this queue and the request is
//! planned again, so the degraded-read path serves that range from the
//! other copy (RAID 1, 10) or from the rest of the stripe and its parity
//! (RAID 5, 6), and only that range. Once the request has its data, the
//! bad range is rewritten on the member with it and read back (md re-reads
//! to verify; here the bytes are compared too), under the stripe locks of
//! the request and only when no write reached those stripes meanwhile
//! (their lock generations): then the member stays in and the error counts
//! as corrected ([`ReadErrors`](crate::raid::read_errors::ReadErrors)). If
//! the rewrite or the re-read fails, the member is failed as before. A
//! member past its limit of read errors (`--max-read-errors`, md's 20 by
//! default, halved every hour) is failed at once.
//!
//! The rewrite and the re-read are member I/Os on the queue's ring, like
//! every other (a stripe operation of kind `Repair`, run by
//! `stripe/repair.rs`): the engine thread never waits for them, so a
//! member slow to take the rewrite holds back only the request being
//! repaired, which completes once its repairs are done. Reads inside
//! stripe operations (RAID 5/6 pre-reads and degraded reads) are repaired
//! there too, from the reconstruction (see `stripe/repair.rs`).

use crate::io::request::Op;
use crate::Error;

use super::{Completion, RaidQueue};

/// A member range whose read failed, to rewrite once the request has
/// the right data for it.
pub(super) struct Repair {
    pub(super) member: u32,
    /// Absolute member bytes `[offset, offset + len)`.
    pub(super) offset: u64,
    pub(super) len: usize,
    /// Where the request's buffer holds the data of that range, in order.
    pub(super) iov: Vec<libc::iovec>,
    /// The request's stripes and their lock generations when the read
    /// failed: a write since makes the data in the buffer stale.
    pub(super) gens: Vec<(u64, u64)>,
    /// Where the repair is.
    pub(super) state: RepairState,
}

/// The steps of one [`Repair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RepairState {
    /// Waiting for the request's data (its other pieces).
    Waiting,
    /// Its rewrite or re-read is in flight (a stripe operation).
    Running,
    /// Done, repaired or not (counted).
    Done,
}

impl RaidQueue {
    /// Piece `pi` of slot `si`, a read of `member`, failed with `e`: true
    /// when the read is served around it and the range repaired later (see
    /// the module), false when the caller fails the member as before
    /// (not a redundant volume's plain read, not a media error, a member
    /// gone, or past its limit of read errors).
    pub(super) fn read_failed(&mut self, si: usize, pi: usize, member: u32, e: &Error) -> bool {
        let Some(l) = self.vol.geometry().layout().copied() else {
            if self.slots[si].op == Op::Read && e.is_device_failure() {
                self.vol.health().read_errors().note_uncorrected(member);
            }
            return false;
        };
        let slot = &self.slots[si];
        let p = &slot.pieces[pi];
        if slot.op != Op::Read || p.op != Op::Read || !e.is_device_failure() || slot.rows.is_some()
        {
            return false;
        }
        // A member that is gone fails every I/O: nothing to repair.
        if matches!(e.errno(), libc::ENXIO | libc::ENODEV)
            || self.vol.members()[member as usize].is_null()
        {
            return false;
        }
        if self.vol.health().read_errors().note_error(member) {
            return false;
        }
        // What is left of the piece: `done` bytes were read, the iovecs
        // from `iov_first` name the rest.
        let offset = p.offset + p.done as u64;
        let len = p.len - p.done;
        let iov = p.iov[p.iov_first..].to_vec();
        let (start, end) = (slot.offset, slot.offset + slot.len as u64);
        let mut gens: Vec<(u64, u64)> = Vec::new();
        let locks = self.vol.locks();
        l.for_each_segment(start, (end - start) as usize, |seg| {
            if !gens
                .iter()
                .any(|&(s, _)| locks.word(s) == locks.word(seg.stripe))
            {
                gens.push((seg.stripe, locks.generation(seg.stripe)));
            }
        });
        self.raid
            .avoid
            .push((si as u32, member, offset, offset + len as u64));
        let slot = &mut self.slots[si];
        slot.repairs.push(Repair {
            member,
            offset,
            len,
            iov,
            gens,
            state: RepairState::Waiting,
        });
        slot.replan = true;
        true
    }

    /// Slot `si` has its data (its pieces are done): starts the repairs
    /// of the ranges whose read failed, rewriting them with that data.
    /// True while some are in flight (each counts as one of the slot's
    /// pending pieces; the slot completes after them); false once they
    /// are all done, or when the request failed (nothing to repair from:
    /// the read fails with EIO, the errors count as uncorrected).
    pub(super) fn run_repairs(&mut self, si: usize, out: &mut Vec<Completion>) -> bool {
        let failed = self.slots[si].error.is_some();
        let mut running = false;
        for i in 0..self.slots[si].repairs.len() {
            let r = &mut self.slots[si].repairs[i];
            match r.state {
                RepairState::Done => {}
                RepairState::Running => running = true,
                RepairState::Waiting if failed => {
                    r.state = RepairState::Done;
                    self.vol.health().read_errors().note_uncorrected(r.member);
                }
                RepairState::Waiting => {
                    // A write to the stripes meanwhile (or a lock busy):
                    // the next read of the range meets the error again
                    // and repairs it then.
                    running |= self.start_repair(si, i, out);
                    let r = &mut self.slots[si].repairs[i];
                    if r.state == RepairState::Waiting {
                        r.state = RepairState::Done;
                    }
                }
            }
        }
        if running {
            return true;
        }
        self.raid.avoid.retain(|a| a.0 != si as u32);
        self.slots[si].repairs.clear();
        false
    }
}
