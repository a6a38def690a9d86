//! The redundant levels' data path: RAID 1, 10, 5 and 6 on the same ring.
//!
//! A request is planned against the [`Layout`] and the member states
//! ([`Health`](crate::raid::health::Health)):
//!
//! - Reads go straight to a member as RAID 0 pieces do (merged per member):
//!   RAID 1 and 10 to the readable copy with the fewest bytes in flight from
//!   this queue, RAID 5 and 6 to the data chunk. A stripe whose data cannot
//!   be read where it lives (a faulty member, or a rebuilding one above its
//!   recovery offset) becomes one *stripe operation* that reads the rest of
//!   the stripe's rows and reconstructs the data (md's degraded read).
//! - Writes are stripe operations: one per stripe band for RAID 5 and 6 (see
//!   [`WriteBand`](crate::raid::layout::WriteBand)), one per chunk piece for RAID 1
//!   and 10. Each takes its stripe's lock ([`StripeLocks`](crate::raid::locks)),
//!   marks the write-intent bitmap, then:
//!   full-stripe write: P (and Q) from the new data, nothing read;
//!   read-modify-write: read the old data and P (and Q), update by the
//!   difference; reconstruct-write: read the data chunks not written, compute
//!   P (and Q) from the whole new stripe data; the cheaper of the two by
//!   member reads, ties to reconstruct-write (md's `handle_stripe_dirtying`).
//!   A *rows write* ([`RaidQueue::push_rows`], the journal flusher's) brings
//!   the rows of every data chunk: P (and Q) from them, nothing read, and
//!   only the data chunks it names are written.
//!   With a member unreadable in the stripe: read every readable member,
//!   reconstruct the lost chunks, lay the new data over them and write data,
//!   P and Q where they can be written (md's degraded write).
//! - Discard and write-zeroes: whole RAID 5/6 stripes (and RAID 1/10 pieces)
//!   are punched or zeroed on every member at once (zeros have zero P and
//!   Q); partial stripes are written as zeros through the write path.
//!
//! A member I/O that fails marks the member faulty ([`Health::fail`], which
//! persists it) and the operation is planned again without it. Past the
//! level's tolerance an operation fails with EIO before it writes anything.
//!
//! [`Health::fail`]: crate::raid::health::Health::fail

use std::collections::VecDeque;

use super::{now_ns, Completion, Op, Piece, RaidQueue};
use crate::raid::layout::{Layout, Places, StripeWrite};
use crate::raid::parity::Kernel;
use crate::{Error, ErrorKind, IoBuf};

mod compute;
mod live;
mod op;
mod repair;
mod rows;
mod spare;
#[cfg(test)]
mod tests;

use compute::StripeRows;

/// How long a stripe operation waiting for another thread's stripe lock
/// sleeps before it looks again (ns).
pub(in crate::raid::engine) const LOCK_RETRY_NS: u64 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Degraded read of a RAID 5/6 stripe's rows.
    Read,
    /// Write of a band (RAID 5/6) or a piece (RAID 1/10).
    Write,
    /// Punch or zero whole stripes (RAID 5/6) or a piece (RAID 1/10).
    Zero,
    /// Rewrite and re-read of a member range whose read failed (see
    /// `repair.rs`): `slot` and `first` name the request's repair.
    Repair,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Lock,
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Full,
    Rmw,
    Rcw,
    /// Read every readable member and reconstruct the lost ones.
    Recon,
}

/// One stripe operation.
struct Sop {
    slot: u32,
    kind: Kind,
    stripe: u64,
    /// Rows `[start, end)`: byte offsets inside the chunk.
    start: u64,
    end: u64,
    /// RAID 5/6 writes: data indices `first .. first + count` are written.
    first: u32,
    count: u32,
    /// A rows write ([`RaidQueue::push_rows`]): data indices (bit i for
    /// index i) whose new data only feeds P and Q, not written.
    skip: u64,
    /// Write zeros rather than the request's data.
    zeros: bool,
    /// RAID 1/10: the places of the piece and its offset in the request.
    places: Option<Places>,
    buf_off: usize,
    phase: Phase,
    method: Method,
    /// Row buffers, by member role (chunk-sized, from the pool).
    bufs: Vec<Option<IoBuf>>,
    pieces: Vec<Piece>,
    npieces: usize,
    pending: usize,
    /// A member failed an I/O of this phase (and was marked faulty).
    failed: bool,
    /// Member writes that succeeded.
    ok_writes: u32,
    error: Option<Error>,
    /// Bitmap ranges (absolute member bytes) marked by this operation.
    marks: [(u64, u64); 2],
    nmarks: usize,
    plans: u8,
    /// A full-stripe write merged from the bands of several requests (see
    /// `plan_write`): its new data, and how many stripe operations of each
    /// request it stands for.
    parts: Vec<Part>,
    owed: Vec<(u32, u32)>,
}

/// New data for rows `[start, end)` of data index `index`, at `ptr`.
#[derive(Clone, Copy)]
struct Part {
    index: u32,
    start: u64,
    end: u64,
    ptr: *mut u8,
}

/// A degraded stripe's rows read and reconstructed by this queue, kept
/// for the next request: a sequential reader's requests share their edge
/// stripes, which would otherwise be read twice.
struct Recent {
    stripe: u64,
    /// Rows `[start, end)` held.
    start: u64,
    end: u64,
    /// The stripe lock's write generation when the rows were read: a
    /// write to the stripe since (from any queue, or the control path)
    /// makes them stale.
    generation: u64,
    /// Row buffers by member role (data rows reconstructed).
    bufs: Vec<Option<IoBuf>>,
}

/// Bytes of reconstructed stripes a queue keeps at most (at least two
/// stripes are kept whatever their size).
const RECENT_BYTES: u64 = 8 << 20;

/// The per-queue state of the redundant data path.
pub(super) struct State {
    sops: Vec<Sop>,
    free: Vec<u32>,
    /// Operations waiting for their stripe lock.
    waiting: VecDeque<u32>,
    /// Lock words held by this queue's operations (one entry per hold).
    held_words: Vec<usize>,
    /// Completions made while pushing (handed out at the next wait).
    ready: Vec<Completion>,
    /// Chunk-sized row buffers.
    pool: Vec<IoBuf>,
    zeros: Option<IoBuf>,
    kernel: Kernel,
    /// Bytes of reads in flight per member from this queue (RAID 1/10
    /// picks the least busy copy).
    load: Vec<u64>,
    /// Scratch: the layout pieces of the request being planned.
    lpieces: Vec<crate::raid::layout::Piece>,
    /// Scratch: stripe operations made by the current plan.
    started: Vec<u32>,
    /// Scratch: the stripes a write being planned touches.
    stripes: Vec<StripeWrite>,
    /// Partial-stripe writes at the end of a request, held back (plugged)
    /// in the hope that the next request fills the rest of the stripe.
    plugged: Vec<u32>,
    /// When the oldest plugged operation was plugged (ns).
    plugged_at: u64,
    /// Operations plugged by the current plan.
    plugged_now: usize,
    /// Where the last write planned on this queue ended (volume bytes): a
    /// write that starts there continues a stream (see `plan_bands`).
    last_write_end: u64,
    /// Partial-stripe writes plugged, and unplugged by the deadline rather
    /// than by a partner or an idle queue (for tests and status).
    plugs: u64,
    plug_timeouts: u64,
    /// Full stripes written by merging requests (for tests and status).
    merged: u64,
    /// Recently reconstructed stripes, oldest first.
    recent: VecDeque<Recent>,
    recent_cap: usize,
    /// Degraded stripe reads served from `recent` (for tests and status).
    recent_hits: u64,
    /// Member ranges this queue reads around while their read error is
    /// repaired (see `engine/repair.rs`): (slot, member, absolute start,
    /// end). Empty but for those moments.
    pub(super) avoid: Vec<(u32, u32, u64, u64)>,
}

/// True when `len` bytes at absolute `off` of member `m` overlap a range
/// of `avoid` (see [`State::avoid`]).
fn avoided(avoid: &[(u32, u32, u64, u64)], m: u32, off: u64, len: u64) -> bool {
    avoid.iter().any(|&(_, am, a, b)| am == m && off < b && a < off + len.max(1))
}

/// Longest a plugged partial-stripe write waits for a partner (ns).
pub(in crate::raid::engine) const MAX_PLUG_NS: u64 = 10_000_000;

impl State {
    pub(super) fn new(vol: &std::sync::Arc<super::RaidVolume>) -> State {
        State {
            sops: Vec::new(),
            free: Vec::new(),
            waiting: VecDeque::new(),
            held_words: Vec::new(),
            ready: Vec::new(),
            pool: Vec::new(),
            zeros: None,
            kernel: Kernel::detect(),
            load: vec![0; vol.members().len()],
            lpieces: Vec::new(),
            started: Vec::new(),
            stripes: Vec::new(),
            plugged: Vec::new(),
            plugged_at: 0,
            plugged_now: 0,
            last_write_end: 0,
            plugs: 0,
            plug_timeouts: 0,
            merged: 0,
            recent: VecDeque::new(),
            recent_cap: {
                let per_stripe = vol.members().len() as u64 * vol.geometry().chunk();
                (RECENT_BYTES / per_stripe.max(1)).clamp(2, 8) as usize
            },
            recent_hits: 0,
            avoid: Vec::new(),
        }
    }

    /// The deadline (ns) by which plugged writes must start, if any.
    pub(super) fn plug_deadline(&self) -> Option<u64> {
        (!self.plugged.is_empty()).then_some(self.plugged_at + MAX_PLUG_NS)
    }

    /// Counters for debugging (URAID_DEBUG_QUEUE=1 prints them).
    pub(super) fn debug_stats(&self) -> String {
        format!(
            "merged full stripes {}, writes plugged {} (unplugged at the deadline {}), degraded stripes reused {}, stripe operations allocated {}",
            self.merged,
            self.plugs,
            self.plug_timeouts,
            self.recent_hits,
            self.sops.len()
        )
    }

    /// True when writes are plugged.
    /// Gives up every stripe operation of this queue (the queue is given
    /// up: a panic, or its ring failed): releases the stripe locks they
    /// hold (as written), and, when the kernel may still be doing their
    /// I/O (`leak`), leaks their row buffers so that it never writes into
    /// freed memory.
    pub(super) fn abandon(&mut self, locks: &crate::raid::locks::StripeLocks, leak: bool) {
        for w in self.held_words.drain(..) {
            locks.release_word(w);
        }
        if leak {
            for s in self.sops.iter_mut() {
                for b in s.bufs.iter_mut() {
                    if let Some(b) = b.take() {
                        std::mem::forget(b);
                    }
                }
            }
            for r in self.recent.iter_mut() {
                for b in r.bufs.iter_mut() {
                    if let Some(b) = b.take() {
                        std::mem::forget(b);
                    }
                }
            }
        }
        self.waiting.clear();
        self.plugged.clear();
    }

    /// True when an operation of this queue holds the lock of `stripe`.
    pub(super) fn holds_lock(&self, locks: &crate::raid::locks::StripeLocks, stripe: u64) -> bool {
        self.held_words.contains(&locks.word(stripe))
    }

    pub(super) fn has_plugged(&self) -> bool {
        !self.plugged.is_empty()
    }

    /// Bytes of reads in flight per member.
    pub(super) fn load_mut(&mut self) -> &mut [u64] {
        &mut self.load
    }

    /// True when a stripe operation waits for a lock.
    pub(super) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// True when an operation waits for a lock that another queue (or the
    /// control path) holds: only then must the queue look again on a
    /// timer. A lock this queue holds is released by one of its own
    /// completions, which wakes it anyway (polling for those cost a
    /// degraded sequential read twice the CPU).
    pub(super) fn waits_on_others(&self, locks: &crate::raid::locks::StripeLocks) -> bool {
        self.waiting.iter().any(|&i| !self.held_words.contains(&locks.word(self.sops[i as usize].stripe)))
    }
}

/// The `URAID_FAILPOINT_TORN_STRIPE` failpoint (crash tests only; built
/// with the `failpoints` feature, which the tests turn on): set in the
/// environment, every stripe write sends its first member write, waits
/// 300 µs, then the others.
#[cfg(feature = "failpoints")]
fn torn_stripe_failpoint() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("URAID_FAILPOINT_TORN_STRIPE").is_some())
}

/// Without the `failpoints` feature (a released binary) there is none.
#[cfg(not(feature = "failpoints"))]
fn torn_stripe_failpoint() -> bool {
    false
}

fn eio(msg: String) -> Error {
    Error::new(ErrorKind::Io, msg)
}

impl RaidQueue {
    fn layout(&self) -> Layout {
        *self.vol.geometry().layout().expect("redundant volume")
    }

    /// True when `len` bytes at absolute `off` of member `m` can be read:
    /// the member's state allows it, and no read error of it there is
    /// being repaired by this queue.
    fn can_read(&self, m: u32, off: u64, len: u64) -> bool {
        self.vol.health().readable(m, off, len) && (self.raid.avoid.is_empty() || !avoided(&self.raid.avoid, m, off, len))
    }

    /// Marks `member` faulty after a failed I/O (the hook persists it).
    pub(super) fn member_failed(&mut self, member: u32) {
        if let Err(e) = self.vol.health().fail(member) {
            // The member is faulty in memory either way; the superblocks
            // could not say so. Nothing better to do on the data path than
            // to report it once.
            eprintln!("uraid: member {} failed and its superblocks could not be updated: {e}", self.vol.members()[member as usize].name());
        }
    }

    /// Hands out completions made while pushing and retries stripe
    /// operations that wait for a lock.
    pub(super) fn raid_poll(&mut self, out: &mut Vec<Completion>) {
        if !self.raid.ready.is_empty() {
            out.append(&mut self.raid.ready);
        }
        for _ in 0..self.raid.waiting.len() {
            let Some(idx) = self.raid.waiting.pop_front() else { break };
            if self.take_lock(idx as usize) {
                self.sop_plan(idx as usize, out);
            } else {
                self.raid.waiting.push_back(idx);
            }
        }
    }

    /// Plans slot `si` (already filled by `push`) on a redundant volume.
    pub(super) fn plan(&mut self, si: usize) {
        let mut out = std::mem::take(&mut self.raid.ready);
        self.plan_into(si, &mut out);
        self.raid.ready = out;
    }

    /// Plans again a request one of whose members failed.
    pub(super) fn replan(&mut self, si: usize, out: &mut Vec<Completion>) {
        self.plan_into(si, out);
    }

    fn plan_into(&mut self, si: usize, out: &mut Vec<Completion>) {
        let l = self.layout();
        let n = l.members();
        {
            let slot = &mut self.slots[si];
            slot.plans += 1;
            slot.npieces = 0;
            slot.pending = 0;
            if slot.plans as usize > n + 1 {
                slot.error = Some(eio(format!("gave up after {} attempts: members keep failing", slot.plans - 1)));
            }
        }
        self.raid.started.clear();
        self.raid.plugged_now = 0;
        if self.slots[si].error.is_none() {
            match self.slots[si].op {
                Op::Flush => self.plan_flush(si),
                Op::Read => self.plan_read(si, &l),
                Op::Write if self.slots[si].rows.is_some() => self.plan_rows(si, &l),
                Op::Write => self.plan_write(si, &l, false),
                Op::Discard | Op::WriteZeroes { .. } => { self.note_discard(si, &l); self.plan_write(si, &l, true) }
            }
        }
        if self.vol.health().spared() {
            self.remap_slot(si);
        }
        let started = std::mem::take(&mut self.raid.started);
        let npieces = self.slots[si].npieces;
        // One count for the plan itself, dropped below, so that nothing
        // completes the request while it is being started.
        self.slots[si].pending = npieces + started.len() + self.raid.plugged_now + 1;
        for p in self.slots[si].pieces[..npieces].iter().filter(|p| p.op == Op::Read) {
            self.raid.load[p.member as usize] += p.len as u64;
        }
        self.push_pieces(si);
        for &idx in &started {
            self.sop_start(idx as usize, out);
        }
        self.raid.started = started;
        self.piece_done(si, out);
    }

    fn plan_read(&mut self, si: usize, l: &Layout) {
        let (offset, len) = (self.slots[si].offset, self.slots[si].len);
        let mut lp = std::mem::take(&mut self.raid.lpieces);
        lp.clear();
        l.for_each_segment(offset, len, |p| lp.push(p));
        if self.vol.bitmap().is_some() {
            self.skip_dead(si, &mut lp);
        }
        let data_offset = self.vol.data_offset();
        let mirror = !l.level().has_parity();
        let base = self.slots[si].buf.as_mut().expect("checked").as_mut_ptr();
        let mut last = [usize::MAX; crate::raid::geometry::MAX_MEMBERS];
        // Bytes this request already sends to each member: a RAID 1/10
        // read's next piece prefers another copy.
        let mut planned = [0u64; crate::raid::geometry::MAX_MEMBERS];
        let mut i = 0;
        while i < lp.len() {
            let stripe = lp[i].stripe;
            let mut j = i;
            while j < lp.len() && lp[j].stripe == stripe {
                j += 1;
            }
            // Borrowed per stripe (not an Arc clone per request).
            let health = self.vol.health();
            let avoid = &self.raid.avoid;
            let readable =
                |m: u32, off: u64, n: usize| health.readable(m, data_offset + off, n as u64) && (avoid.is_empty() || !avoided(avoid, m, data_offset + off, n as u64));
            let mut all = lp[i..j].iter().all(|p| p.places.iter().any(|pl| readable(pl.member, pl.member_offset, p.len)));
            if all && !mirror && len as u64 >= l.chunk() && lp[i..j].iter().map(|p| p.len as u64).sum::<u64>() < l.stripe_data_width() {
                // A large read that covers part of a degraded stripe (its
                // lost member holds other data or parity) goes through a
                // stripe operation too: the neighbouring request reads the
                // rest of the stripe, so one of them reads it whole and the
                // other finds it in `recent` (a sequential reader then
                // reads every stripe once).
                let (sm, k) = Self::stripe_members(l, stripe);
                let abs = data_offset + l.stripe_offset(stripe);
                all = sm[..k].iter().all(|&m| health.readable(m, abs, l.chunk()));
            }
            // The readable place of each piece with the fewest bytes in
            // flight, chosen once: another thread may fail a member (or a
            // rebuild start) between two looks at `health`, and a piece left
            // with no readable place then goes to reconstruction below.
            let mut pick = [0u8; crate::raid::geometry::MAX_MEMBERS];
            all = all && j - i <= pick.len();
            if all {
                for (k, p) in lp[i..j].iter().enumerate() {
                    let best = p
                        .places
                        .iter()
                        .enumerate()
                        .filter(|(_, pl)| readable(pl.member, pl.member_offset, p.len))
                        .min_by_key(|(_, pl)| self.raid.load[pl.member as usize] + planned[pl.member as usize]);
                    let Some((x, pl)) = best else {
                        all = false;
                        break;
                    };
                    pick[k] = x as u8;
                    planned[pl.member as usize] += p.len as u64;
                }
            }
            if all {
                for (k, p) in lp[i..j].iter().enumerate() {
                    let pl = p.places.iter().nth(pick[k] as usize).expect("picked above");
                    // SAFETY: buf_offset + len <= request length <= buffer length.
                    let ptr = unsafe { base.add(p.buf_offset) };
                    self.slots[si].add_segment(&mut last, pl.member, data_offset + pl.member_offset, Some(ptr), p.len);
                }
            } else if mirror {
                let p = &lp[i];
                let slot = &mut self.slots[si];
                if slot.error.is_none() {
                    slot.error = Some(eio(format!(
                        "every copy of logical bytes {}..{} is on a failed member: the {} volume has lost data there",
                        offset + p.buf_offset as u64,
                        offset + (p.buf_offset + p.len) as u64,
                        l.level()
                    )));
                }
            } else {
                let (mut start, mut end) = (
                    lp[i..j].iter().map(|p| p.chunk_offset).min().expect("non-empty"),
                    lp[i..j].iter().map(|p| p.chunk_offset + p.len as u64).max().expect("non-empty"),
                );
                if len as u64 >= l.chunk() {
                    // A large (sequential-looking) read reconstructs whole
                    // rows: the next request finds its head in `recent`.
                    (start, end) = (0, l.chunk());
                }
                let idx = self.new_sop(si, Kind::Read, stripe, start, end);
                self.raid.started.push(idx);
            }
            i = j;
        }
        self.raid.lpieces = lp;
    }

    /// Why the volume can take no more writes: more members lost than its
    /// level tolerates ([`Layout::survival`]; for RAID 10: both members of
    /// a copy pair that holds a chunk), or an earlier failure stopped
    /// writes. `None` when it can.
    pub(super) fn volume_failed(&self, l: &Layout) -> Option<String> {
        let health = self.vol.health();
        let n = l.members() as u32;
        let gone = (0..n).filter(|&m| !health.writable(m)).fold(0u64, |g, m| g | 1 << m);
        let names = || (0..n).filter(|&m| gone & 1 << m != 0).map(|m| self.vol.members()[m as usize].name().to_string()).collect::<Vec<_>>().join(", ");
        // (No member lost, the common case: nothing to work out.)
        if gone != 0 && !l.survival(gone).survives {
            health.stop_writes();
            return Some(format!(
                "the {} volume has failed: members {} are lost, more than it tolerates; nothing more is written \
                 (replace the members and restore from a backup, or assemble with --force if a member was lost by mistake)",
                l.level(),
                names()
            ));
        }
        if health.writes_stopped() {
            return Some(format!("the {} volume has failed earlier (members {} lost): nothing more is written", l.level(), names()));
        }
        None
    }

    fn plan_write(&mut self, si: usize, l: &Layout, zero: bool) {
        let (offset, len) = (self.slots[si].offset, self.slots[si].len);
        if let Some(msg) = self.volume_failed(l) {
            self.slots[si].error = Some(eio(msg));
            return;
        }
        if !l.level().has_parity() {
            return self.plan_mirror_write(si, l, zero);
        }
        // A scratch vector kept in the state: no allocation per request.
        let mut stripes = std::mem::take(&mut self.raid.stripes);
        stripes.clear();
        l.for_each_stripe_write(offset, len, |sw| stripes.push(sw));
        for sw in stripes.iter() {
            if zero && sw.full {
                let idx = self.new_sop(si, Kind::Zero, sw.stripe, 0, l.chunk());
                self.raid.sops[idx as usize].zeros = true;
                self.raid.started.push(idx);
                continue;
            }
            // A partial stripe another request's plugged write fills up
            // becomes one full-stripe write (the in-flight coalescer).
            if !zero && !sw.full && self.merge_plugged(si, l, sw) {
                continue;
            }
            self.plan_bands(si, l, sw, zero);
        }
        self.raid.stripes = stripes;
        if !zero {
            self.raid.last_write_end = offset + len as u64;
        }
    }

    /// Plans one stripe operation per band of `sw` for slot `si`. A
    /// request that continues the previous write of this queue (it starts
    /// where that one ended, as a sequential stream's requests do; the
    /// queue's first write counts from byte 0), runs from the stripe's
    /// start (or before) and ends inside it, plugs its bands there for the
    /// next request to complete. A random write is never plugged: one that
    /// happened to start at a stripe's start used to wait for the plug
    /// deadline ([`MAX_PLUG_NS`]) whenever the queue was busy, which at
    /// QD32 it always is (issue 31's RAID 5 Q32T1 write stall).
    fn plan_bands(&mut self, si: usize, l: &Layout, sw: &StripeWrite, zero: bool) {
        let (offset, len) = (self.slots[si].offset, self.slots[si].len);
        let (s, width) = (sw.stripe, l.stripe_data_width());
        let end = offset + len as u64;
        let stream = offset == self.raid.last_write_end;
        let plug = !zero && !sw.full && stream && offset <= s * width && end < (s + 1) * width;
        for b in sw.bands() {
            let idx = self.new_sop(si, Kind::Write, s, b.start, b.end);
            let sop = &mut self.raid.sops[idx as usize];
            sop.first = b.first_written;
            sop.count = b.written;
            sop.zeros = zero;
            if plug {
                if self.raid.plugged.is_empty() {
                    self.raid.plugged_at = now_ns();
                }
                self.raid.plugged.push(idx);
                self.raid.plugged_now += 1;
                self.raid.plugs += 1;
            } else {
                self.raid.started.push(idx);
            }
        }
    }

    /// When the plugged writes of stripe `sw.stripe` and slot `si`'s
    /// bands cover the whole stripe, makes them one full-stripe write
    /// (started) that stands for all of them; true when it did.
    fn merge_plugged(&mut self, si: usize, l: &Layout, sw: &StripeWrite) -> bool {
        let s = sw.stripe;
        if !self.raid.plugged.iter().any(|&p| self.raid.sops[p as usize].stripe == s) {
            return false;
        }
        let mine: Vec<u32> = self.raid.plugged.iter().copied().filter(|&p| self.raid.sops[p as usize].stripe == s).collect();
        let mut parts = Vec::new();
        for &p in &mine {
            let sop = &self.raid.sops[p as usize];
            let (ps, pst, pe, pf, pc) = (sop.slot as usize, sop.start, sop.end, sop.first, sop.count);
            if sop.parts.is_empty() {
                self.band_parts(ps, l, s, pst, pe, pf, pc, &mut parts);
            } else {
                parts.extend_from_slice(&self.raid.sops[p as usize].parts);
            }
        }
        for b in sw.bands() {
            self.band_parts(si, l, s, b.start, b.end, b.first_written, b.written, &mut parts);
        }
        if !Self::covers_stripe(l, &parts) {
            return false;
        }
        let mut owed: Vec<(u32, u32)> = Vec::new();
        for &p in &mine {
            let sop = &self.raid.sops[p as usize];
            let add: Vec<(u32, u32)> = if sop.owed.is_empty() { vec![(sop.slot, 1)] } else { sop.owed.clone() };
            for (slot, k) in add {
                match owed.iter_mut().find(|o| o.0 == slot) {
                    Some(o) => o.1 += k,
                    None => owed.push((slot, k)),
                }
            }
        }
        owed.push((si as u32, 1));
        self.raid.plugged.retain(|p| !mine.contains(p));
        for &p in &mine[1..] {
            self.raid.free.push(p);
        }
        let sop = &mut self.raid.sops[mine[0] as usize];
        sop.kind = Kind::Write;
        sop.start = 0;
        sop.end = l.chunk();
        sop.first = 0;
        sop.count = l.data_chunks();
        sop.zeros = false;
        sop.parts = parts;
        sop.owed = owed;
        self.raid.merged += 1;
        self.raid.started.push(mine[0]);
        true
    }

    /// RAID 1 and 10: one stripe operation per chunk piece of slot `si`,
    /// written (or zeroed) on every writable copy.
    fn plan_mirror_write(&mut self, si: usize, l: &Layout, zero: bool) {
        let (offset, len) = (self.slots[si].offset, self.slots[si].len);
        let mut lp = std::mem::take(&mut self.raid.lpieces);
        lp.clear();
        l.for_each_segment(offset, len, |p| lp.push(p));
        for p in &lp {
            let kind = if zero { Kind::Zero } else { Kind::Write };
            let idx = self.new_sop(si, kind, p.stripe, p.chunk_offset, p.chunk_offset + p.len as u64);
            let sop = &mut self.raid.sops[idx as usize];
            sop.places = Some(p.places);
            sop.buf_off = p.buf_offset;
            sop.zeros = zero;
            self.raid.started.push(idx);
        }
        self.raid.lpieces = lp;
    }

    fn layout_opt(&self) -> Option<Layout> {
        self.vol.geometry().layout().copied()
    }

    fn new_sop(&mut self, si: usize, kind: Kind, stripe: u64, start: u64, end: u64) -> u32 {
        let n = self.vol.members().len();
        let idx = match self.raid.free.pop() {
            Some(i) => i,
            None => {
                self.raid.sops.push(Sop {
                    slot: 0,
                    kind,
                    stripe: 0,
                    start: 0,
                    end: 0,
                    first: 0,
                    count: 0,
                    skip: 0,
                    zeros: false,
                    places: None,
                    buf_off: 0,
                    phase: Phase::Lock,
                    method: Method::Full,
                    bufs: (0..n).map(|_| None).collect(),
                    pieces: Vec::new(),
                    npieces: 0,
                    pending: 0,
                    failed: false,
                    ok_writes: 0,
                    error: None,
                    marks: [(0, 0); 2],
                    nmarks: 0,
                    plans: 0,
                    parts: Vec::new(),
                    owed: Vec::new(),
                });
                (self.raid.sops.len() - 1) as u32
            }
        };
        let sop = &mut self.raid.sops[idx as usize];
        sop.slot = si as u32;
        sop.kind = kind;
        sop.stripe = stripe;
        sop.start = start;
        sop.end = end;
        sop.first = 0;
        sop.count = 0;
        sop.skip = 0;
        sop.zeros = false;
        sop.buf_off = 0;
        sop.phase = Phase::Lock;
        sop.method = Method::Full;
        sop.npieces = 0;
        sop.pending = 0;
        sop.failed = false;
        sop.ok_writes = 0;
        sop.error = None;
        sop.nmarks = 0;
        sop.plans = 0;
        sop.parts.clear();
        sop.owed.clear();
        idx
    }

    /// Starts every plugged write (nothing else can make progress, or the
    /// oldest waited long enough).
    pub(super) fn unplug(&mut self, out: &mut Vec<Completion>) {
        if self.raid.plug_deadline().is_some_and(|d| now_ns() >= d) {
            self.raid.plug_timeouts += 1;
        }
        for idx in std::mem::take(&mut self.raid.plugged) {
            self.sop_start(idx as usize, out);
        }
    }

    /// The new-data parts of a band of slot `si`.
    #[allow(clippy::too_many_arguments)]
    fn band_parts(&mut self, si: usize, l: &Layout, stripe: u64, start: u64, end: u64, first: u32, count: u32, parts: &mut Vec<Part>) {
        let off = self.slots[si].offset;
        let base = self.slots[si].buf.as_mut().expect("write buffer").as_mut_ptr();
        for i in first..first + count {
            let logical = stripe * l.stripe_data_width() + i as u64 * l.chunk() + start;
            // SAFETY: the band lies inside the request (planned from it).
            let ptr = unsafe { base.add((logical - off) as usize) };
            parts.push(Part { index: i, start, end, ptr });
        }
    }

    /// True when `parts` cover every row of every data index of a stripe.
    fn covers_stripe(l: &Layout, parts: &[Part]) -> bool {
        (0..l.data_chunks()).all(|i| {
            let mut v: Vec<(u64, u64)> = parts.iter().filter(|p| p.index == i).map(|p| (p.start, p.end)).collect();
            v.sort_unstable();
            let mut reach = 0;
            for (a, b) in v {
                if a > reach {
                    return false;
                }
                reach = reach.max(b);
            }
            reach >= l.chunk()
        })
    }
}
