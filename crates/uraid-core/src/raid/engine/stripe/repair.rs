//! Read errors repaired on the ring: the member I/Os of the repairs the
//! engine's `repair.rs` decides, and the read errors met inside stripe
//! operations.
//!
//! - A request's repair (a plain read that failed on a member, served
//!   from redundancy) is a stripe operation of kind `Repair`: it takes
//!   the stripe locks of the request without waiting (given up when one
//!   is busy or a write reached a stripe since the read failed), writes
//!   the range back from the request's buffer (FUA), reads it back and
//!   compares. Both are member I/Os of the queue's ring, so the engine
//!   thread goes on serving the queue's other requests meanwhile; a
//!   failed rewrite or re-read, or other bytes read back, fails the
//!   member.
//! - A read of a RAID 5/6 stripe operation (read-modify-write and
//!   reconstruct-write pre-reads, degraded reads) that fails on a member
//!   with a device error, while the stripe has redundancy left, does not
//!   fail the member: the range is avoided and the operation planned
//!   again, which reconstructs it from the rest of the stripe; the
//!   operation then writes the reconstructed rows back to that member
//!   (a write that rewrites them anyway is enough), and the error counts
//!   as corrected once that write lands. Past `--max-read-errors` the
//!   member is failed as before.

use super::{Kind, Phase};
use crate::io::buf::IoBuf;
use crate::raid::engine::repair::RepairState;
use crate::raid::engine::{Completion, Op, RaidQueue};
use crate::Error;

/// Set in the first field of an [`avoid`](super::State::avoid) entry made
/// by a stripe operation (whose index is in the other bits), rather than
/// by a request (a slot index).
const AVOID_SOP: u32 = 1 << 31;

impl RaidQueue {
    /// Starts repair `i` of slot `si` (its data is in the slot's buffer):
    /// true when its rewrite is in flight, false when it is given up (a
    /// stripe lock busy, or a write since the read failed: the buffer may
    /// be stale, nothing is written).
    pub(in crate::raid::engine) fn start_repair(
        &mut self,
        si: usize,
        i: usize,
        out: &mut Vec<Completion>,
    ) -> bool {
        let vol = self.vol.clone();
        let locks = vol.locks();
        let r = &self.slots[si].repairs[i];
        let mut taken = 0;
        let mut fresh = true;
        for &(s, gen) in &r.gens {
            if !locks.try_lock(s) {
                fresh = false;
                break;
            }
            taken += 1;
            if locks.generation(s) != gen {
                fresh = false;
                break;
            }
        }
        if !fresh {
            for &(s, _) in &r.gens[..taken] {
                locks.unlock(s);
            }
            return false;
        }
        for &(s, _) in &r.gens {
            self.raid.held_words.push(locks.word(s));
        }
        let (member, offset, len) = (r.member, r.offset, r.len);
        let stripe = r.gens.first().map_or(0, |g| g.0);
        let idx = self.new_sop(si, Kind::Repair, stripe, 0, 0) as usize;
        self.raid.sops[idx].first = i as u32;
        self.sop_piece(idx, Op::Write, member, offset, len, std::ptr::null_mut());
        let p = &mut self.raid.sops[idx].pieces[0];
        p.iov.extend_from_slice(&self.slots[si].repairs[i].iov);
        // Durable before it counts as repaired.
        p.fua = true;
        self.slots[si].repairs[i].state = RepairState::Running;
        self.slots[si].pending += 1;
        self.sop_issue(idx, Phase::Write, out);
        true
    }

    /// A member I/O of repair operation `idx` failed with `e`: the member
    /// is failed, with the reason kept for `status`.
    pub(super) fn repair_io_failed(&mut self, idx: usize, member: u32, e: &Error) {
        let what = if self.raid.sops[idx].phase == Phase::Write {
            "rewrite"
        } else {
            "re-read"
        };
        self.repair_failed(member, format!("the {what} failed: {e}"));
        self.raid.sops[idx].failed = true;
    }

    fn repair_failed(&mut self, member: u32, why: String) {
        let name = self.vol.members()[member as usize].name().to_string();
        self.vol
            .health()
            .read_errors()
            .set_failed_reason(member, format!("a read error could not be repaired: {why}"));
        eprintln!("uraid: member {name}: a read error could not be repaired ({why}): the member is failed");
        self.member_failed(member);
    }

    /// The I/O of a phase of repair operation `idx` is done: after the
    /// rewrite, read the range back; after the re-read, compare and count.
    pub(super) fn repair_phase_done(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let sop = &self.raid.sops[idx];
        let (si, i) = (sop.slot as usize, sop.first as usize);
        let (member, offset, len) = {
            let r = &self.slots[si].repairs[i];
            (r.member, r.offset, r.len)
        };
        if sop.failed {
            return self.repair_finish(idx, out);
        }
        match sop.phase {
            Phase::Write => {
                // The rare path: a buffer of the range's size (a chunk
                // buffer of the pool may be smaller).
                let Ok(mut back) = IoBuf::try_new(len) else {
                    // Written but not verified: not counted either way.
                    return self.repair_finish(idx, out);
                };
                let ptr = back.as_mut_ptr();
                self.raid.sops[idx].bufs[member as usize] = Some(back);
                self.raid.sops[idx].npieces = 0;
                self.sop_piece(idx, Op::Read, member, offset, len, ptr);
                self.sop_issue(idx, Phase::Read, out);
            }
            Phase::Read => {
                let back = self.raid.sops[idx].bufs[member as usize]
                    .as_ref()
                    .expect("re-read buffer");
                let mut o = 0;
                let mut same = true;
                for v in &self.slots[si].repairs[i].iov {
                    let n = v.iov_len.min(len - o);
                    // SAFETY: the iovec names `iov_len` bytes of the
                    // slot's buffer, which the slot holds until its
                    // repairs are done.
                    let want = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, n) };
                    same &= back[o..o + n] == *want;
                    o += n;
                }
                if same {
                    self.vol.health().read_errors().note_corrected(member);
                } else {
                    let name = self.vol.members()[member as usize].name().to_string();
                    self.repair_failed(member, format!("{len} bytes rewritten at offset {offset} of {name} read back different"));
                }
                self.repair_finish(idx, out);
            }
            Phase::Lock => unreachable!("a repair starts with its rewrite"),
        }
    }

    /// Releases repair operation `idx`'s locks and buffer and counts it
    /// done for its request.
    fn repair_finish(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let vol = self.vol.clone();
        let locks = vol.locks();
        let (si, i) = (
            self.raid.sops[idx].slot as usize,
            self.raid.sops[idx].first as usize,
        );
        for &(s, _) in &self.slots[si].repairs[i].gens {
            let w = locks.word(s);
            if let Some(h) = self.raid.held_words.iter().position(|&x| x == w) {
                self.raid.held_words.swap_remove(h);
            }
            locks.unlock_written(s);
        }
        for b in self.raid.sops[idx].bufs.iter_mut() {
            // Not a pool buffer (its size is the range's): freed.
            b.take();
        }
        self.slots[si].repairs[i].state = RepairState::Done;
        self.raid.free.push(idx as u32);
        self.piece_done(si, out);
    }

    /// Read piece `pi` of parity stripe operation `idx` failed on `member`
    /// with `e`: true when the range is reconstructed instead and
    /// rewritten by the operation (see the module); false when the caller
    /// fails the member as before (not a media error, the member gone,
    /// no redundancy left in the stripe, or past its limit of read
    /// errors).
    pub(super) fn sop_read_failed(
        &mut self,
        idx: usize,
        pi: usize,
        member: u32,
        e: &Error,
    ) -> bool {
        let sop = &self.raid.sops[idx];
        let Some(l) = self.layout_opt() else {
            return false;
        };
        if !l.level().has_parity() || sop.phase != Phase::Read || !e.is_device_failure() {
            return false;
        }
        if matches!(e.errno(), libc::ENXIO | libc::ENODEV)
            || self.vol.members()[member as usize].is_null()
        {
            return false;
        }
        let p = &sop.pieces[pi];
        let (offset, len) = (p.offset, p.len as u64);
        // The stripe must still have the data without this member.
        let (sm, k) = Self::stripe_members(&l, sop.stripe);
        let lost = sm[..k]
            .iter()
            .filter(|&&m| m == member || !self.can_read(m, offset, len))
            .count();
        if lost > l.level().fault_tolerance(l.members()) {
            return false;
        }
        if self.vol.health().read_errors().note_error(member) {
            return false;
        }
        self.raid
            .avoid
            .push((AVOID_SOP | idx as u32, member, offset, offset + len));
        true
    }

    /// Parity stripe operation `idx` has reconstructed the rows of the
    /// members whose read failed (its row buffers hold them): adds a write
    /// of them to each such member that the operation does not write
    /// anyway. Returns how many it added.
    pub(super) fn add_repair_writes(&mut self, idx: usize) -> usize {
        if self.raid.avoid.is_empty() {
            return 0;
        }
        let key = AVOID_SOP | idx as u32;
        let mut added = 0;
        for a in 0..self.raid.avoid.len() {
            let (k, member, start, end) = self.raid.avoid[a];
            let sop = &self.raid.sops[idx];
            if k != key
                || sop.pieces[..sop.npieces]
                    .iter()
                    .any(|p| p.op == Op::Write && p.member == member)
            {
                continue;
            }
            if !self.vol.health().writable(member) {
                continue;
            }
            let Some(b) = self.raid.sops[idx].bufs[member as usize].as_mut() else {
                continue;
            };
            let ptr = b.as_mut_ptr();
            self.sop_piece(idx, Op::Write, member, start, (end - start) as usize, ptr);
            added += 1;
        }
        added
    }

    /// Stripe operation `idx` is finishing: counts the read errors it met
    /// (corrected when the member is still in and the operation did not
    /// fail) and stops avoiding their ranges.
    pub(super) fn finish_sop_repairs(&mut self, idx: usize) {
        let key = AVOID_SOP | idx as u32;
        let ok = self.raid.sops[idx].error.is_none();
        let health = self.vol.health().clone();
        let errors = health.read_errors();
        self.raid.avoid.retain(|&(k, member, _, _)| {
            if k != key {
                return true;
            }
            if !ok {
                errors.note_uncorrected(member);
            } else if health.writable(member) {
                errors.note_corrected(member);
            }
            false
        });
    }
}
