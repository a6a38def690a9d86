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
//! default, halved every hour) is failed at once. The rewrite and re-read
//! are blocking I/O on the engine thread: a rare error path, as md does it
//! synchronously in its raid1d/raid5d thread.

use crate::io::buf::IoBuf;
use crate::io::request::Op;
use crate::{Error, ErrorKind, Result};

use super::RaidQueue;

/// A member range whose read failed, to rewrite once the request has
/// the right data for it.
pub(super) struct Repair {
    member: u32,
    /// Absolute member bytes `[offset, offset + len)`.
    offset: u64,
    len: usize,
    /// Where the request's buffer holds the data of that range, in order.
    iov: Vec<libc::iovec>,
    /// The request's stripes and their lock generations when the read
    /// failed: a write since makes the data in the buffer stale.
    gens: Vec<(u64, u64)>,
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
        });
        slot.replan = true;
        true
    }

    /// Slot `si` is done: rewrites the ranges whose read failed with the
    /// data it now holds (when it holds it: no error), then forgets them.
    pub(super) fn finish_repairs(&mut self, si: usize) {
        self.raid.avoid.retain(|a| a.0 != si as u32);
        let repairs = std::mem::take(&mut self.slots[si].repairs);
        let health = self.vol.health().clone();
        let errors = health.read_errors();
        if self.slots[si].error.is_some() {
            // Nothing to repair from: the read fails (EIO to the client).
            for r in &repairs {
                errors.note_uncorrected(r.member);
            }
            return;
        }
        for r in &repairs {
            match self.repair(r) {
                Some(Ok(())) => errors.note_corrected(r.member),
                Some(Err(e)) => {
                    let name = self.vol.members()[r.member as usize].name().to_string();
                    errors.set_failed_reason(
                        r.member,
                        format!("a read error could not be repaired: {e}"),
                    );
                    eprintln!("uraid: member {name}: a read error could not be repaired ({e}): the member is failed");
                    self.member_failed(r.member);
                }
                // A write to the stripes meanwhile: the next read of the
                // range meets the error again and repairs it then.
                None => {}
            }
        }
    }

    /// Rewrites and re-reads one range under the request's stripe locks;
    /// `None` when a lock is busy or a write reached the stripes since
    /// the read failed (the buffer may be stale: nothing is written).
    fn repair(&self, r: &Repair) -> Option<Result<()>> {
        let locks = self.vol.locks();
        let mut taken: Vec<u64> = Vec::with_capacity(r.gens.len());
        let mut fresh = true;
        for &(s, gen) in &r.gens {
            if !locks.try_lock(s) {
                fresh = false;
                break;
            }
            taken.push(s);
            if locks.generation(s) != gen {
                fresh = false;
                break;
            }
        }
        if !fresh {
            for s in taken {
                locks.unlock(s);
            }
            return None;
        }
        let result = self.rewrite(r);
        for s in taken {
            locks.unlock_written(s);
        }
        Some(result)
    }

    /// Writes the range's data (from the request's buffer) to the member,
    /// durably, reads it back and compares. Errors: `Io` from either, or
    /// when the member returns other bytes.
    fn rewrite(&self, r: &Repair) -> Result<()> {
        let m = &self.vol.members()[r.member as usize];
        let mut data = IoBuf::try_new(r.len)?;
        let mut o = 0;
        for v in &r.iov {
            let n = v.iov_len.min(r.len - o);
            // SAFETY: the iovec names `iov_len` bytes of the slot's
            // buffer, which the slot still holds (the request is not
            // completed yet); `data` has room for `r.len` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(v.iov_base as *const u8, data.as_mut_ptr().add(o), n)
            };
            o += n;
        }
        m.write_all_at(&data[..r.len], r.offset)?;
        let mut back = IoBuf::try_new(r.len)?;
        m.read_exact_at(&mut back[..r.len], r.offset)?;
        if back[..r.len] != data[..r.len] {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{} bytes rewritten at offset {} of {} read back different",
                    r.len,
                    r.offset,
                    m.name()
                ),
            ));
        }
        Ok(())
    }
}
