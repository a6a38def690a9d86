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

use super::{new_piece, now_ns, progress, Completion, Op, Outcome, Piece, RaidQueue, Reverse, SOP_BIT};
use crate::raid::layout::{Layout, Places, RedundantLevel};
use crate::raid::parity::Kernel;
use crate::{Error, ErrorKind, IoBuf};

/// How long a stripe operation waiting for another thread's stripe lock
/// sleeps before it looks again (ns).
pub(super) const LOCK_RETRY_NS: u64 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Degraded read of a RAID 5/6 stripe's rows.
    Read,
    /// Write of a band (RAID 5/6) or a piece (RAID 1/10).
    Write,
    /// Punch or zero whole stripes (RAID 5/6) or a piece (RAID 1/10).
    Zero,
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
    /// Partial-stripe writes at the end of a request, held back (plugged)
    /// in the hope that the next request fills the rest of the stripe.
    plugged: Vec<u32>,
    /// When the oldest plugged operation was plugged (ns).
    plugged_at: u64,
    /// Operations plugged by the current plan.
    plugged_now: usize,
    /// Full stripes written by merging requests (for tests and status).
    merged: u64,
    /// Recently reconstructed stripes, oldest first.
    recent: VecDeque<Recent>,
    recent_cap: usize,
    /// Degraded stripe reads served from `recent` (for tests and status).
    recent_hits: u64,
}

/// Longest a plugged partial-stripe write waits for a partner (ns).
pub(super) const MAX_PLUG_NS: u64 = 10_000_000;

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
            plugged: Vec::new(),
            plugged_at: 0,
            plugged_now: 0,
            merged: 0,
            recent: VecDeque::new(),
            recent_cap: {
                let per_stripe = vol.members().len() as u64 * vol.geometry().chunk();
                (RECENT_BYTES / per_stripe.max(1)).clamp(2, 8) as usize
            },
            recent_hits: 0,
        }
    }

    /// The deadline (ns) by which plugged writes must start, if any.
    pub(super) fn plug_deadline(&self) -> Option<u64> {
        (!self.plugged.is_empty()).then_some(self.plugged_at + MAX_PLUG_NS)
    }

    /// Counters for debugging (URAID_DEBUG_QUEUE=1 prints them).
    pub(super) fn debug_stats(&self) -> String {
        format!(
            "merged full stripes {}, degraded stripes reused {}, stripe operations allocated {}",
            self.merged,
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
                Op::Write => self.plan_write(si, &l, false),
                Op::Discard | Op::WriteZeroes { .. } => self.plan_write(si, &l, true),
            }
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
        let health = self.vol.health().clone();
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
            let readable = |m: u32, off: u64, n: usize| health.readable(m, data_offset + off, n as u64);
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
            if all {
                for p in &lp[i..j] {
                    // The readable place with the fewest bytes in flight.
                    let pl = p
                        .places
                        .iter()
                        .filter(|pl| readable(pl.member, pl.member_offset, p.len))
                        .min_by_key(|pl| self.raid.load[pl.member as usize] + planned[pl.member as usize])
                        .expect("checked");
                    planned[pl.member as usize] += p.len as u64;
                    // SAFETY: buf_offset + len <= request length <= buffer length.
                    let ptr = unsafe { base.add(p.buf_offset) };
                    super::add_segment(&mut self.slots[si], &mut last, pl.member, data_offset + pl.member_offset, Some(ptr), p.len);
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
    /// level tolerates (for RAID 10: both members of a copy pair), or an
    /// earlier failure stopped writes. `None` when it can.
    pub(super) fn volume_failed(&self, l: &Layout) -> Option<String> {
        let health = self.vol.health();
        let n = l.members() as u32;
        let gone: Vec<u32> = (0..n).filter(|&m| !health.writable(m)).collect();
        let names = |v: &[u32]| v.iter().map(|&m| self.vol.members()[m as usize].name().to_string()).collect::<Vec<_>>().join(", ");
        let failed = match l.level() {
            RedundantLevel::Raid1 => gone.len() == n as usize,
            // Near-2: chunk c's copies are on slots 2c and 2c+1, members
            // (2c mod n, 2c+1 mod n); the pattern repeats every n chunks.
            RedundantLevel::Raid10 => (0..n as u64).any(|c| gone.contains(&((2 * c % n as u64) as u32)) && gone.contains(&(((2 * c + 1) % n as u64) as u32))),
            _ => gone.len() > l.level().fault_tolerance(n as usize),
        };
        if failed {
            health.stop_writes();
            return Some(format!(
                "the {} volume has failed: members {} are lost, more than it tolerates; nothing more is written \
                 (replace the members and restore from a backup, or assemble with --force if a member was lost by mistake)",
                l.level(),
                names(&gone)
            ));
        }
        if health.writes_stopped() {
            return Some(format!("the {} volume has failed earlier (members {} lost): nothing more is written", l.level(), names(&gone)));
        }
        None
    }

    fn plan_write(&mut self, si: usize, l: &Layout, zero: bool) {
        let (offset, len) = (self.slots[si].offset, self.slots[si].len);
        if let Some(msg) = self.volume_failed(l) {
            self.slots[si].error = Some(eio(msg));
            return;
        }
        if l.level().has_parity() {
            let mut stripes = Vec::new();
            l.for_each_stripe_write(offset, len, |sw| stripes.push(sw));
            let width = l.stripe_data_width();
            for sw in stripes {
                let s = sw.stripe;
                if zero && sw.full {
                    let idx = self.new_sop(si, Kind::Zero, s, 0, l.chunk());
                    self.raid.sops[idx as usize].zeros = true;
                    self.raid.started.push(idx);
                    continue;
                }
                // A partial stripe another request's plugged write fills up
                // becomes one full-stripe write (the in-flight coalescer).
                if !zero && !sw.full && self.raid.plugged.iter().any(|&p| self.raid.sops[p as usize].stripe == s) {
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
                    if Self::covers_stripe(l, &parts) {
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
                        let c = mine[0] as usize;
                        let sop = &mut self.raid.sops[c];
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
                        continue;
                    }
                }
                // The request runs from the stripe's start (or before) and
                // ends inside it, as a sequential stream's requests do: plug
                // its bands there for the next request to complete. (A
                // random write that starts mid-stripe is not plugged.)
                let end = offset + len as u64;
                let plug = !zero && !sw.full && offset <= s * width && end < (s + 1) * width;
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
                    } else {
                        self.raid.started.push(idx);
                    }
                }
            }
        } else {
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

    fn sop_start(&mut self, idx: usize, out: &mut Vec<Completion>) {
        if self.take_lock(idx) {
            self.sop_plan(idx, out);
        } else {
            self.raid.waiting.push_back(idx as u32);
        }
    }

    /// Takes stripe operation `idx`'s lock if it is free (true when taken).
    fn take_lock(&mut self, idx: usize) -> bool {
        let s = self.raid.sops[idx].stripe;
        let taken = self.vol.locks().try_lock(s);
        if taken {
            self.raid.held_words.push(self.vol.locks().word(s));
        }
        taken
    }

    fn take_buf(&mut self, idx: usize, m: u32) {
        if self.raid.sops[idx].bufs[m as usize].is_none() {
            let chunk = self.layout().chunk() as usize;
            let b = self.raid.pool.pop().unwrap_or_else(|| IoBuf::new(chunk));
            self.raid.sops[idx].bufs[m as usize] = Some(b);
        }
    }

    /// Adds a member I/O to stripe operation `idx`; `ptr` is the memory it
    /// reads into or writes from (`len` bytes; none for fallocate).
    fn sop_piece(&mut self, idx: usize, op: Op, member: u32, offset: u64, len: usize, ptr: *mut u8) {
        if op == Op::Read {
            self.vol.stripe_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // A write merged from several requests (a plugged full stripe) is
        // FUA when any of them is.
        let sop = &self.raid.sops[idx];
        let fua = op == Op::Write && (self.slots[sop.slot as usize].fua || sop.owed.iter().any(|&(s, _)| self.slots[s as usize].fua));
        let sop = &mut self.raid.sops[idx];
        if sop.npieces == sop.pieces.len() {
            sop.pieces.push(new_piece());
        }
        let p = &mut sop.pieces[sop.npieces];
        sop.npieces += 1;
        p.op = op;
        p.fua = fua;
        p.member = member;
        p.offset = offset;
        p.len = len;
        p.done = 0;
        p.iov.clear();
        p.iov_first = 0;
        p.deadline = 0;
        p.zero_fill = false;
        if !ptr.is_null() {
            p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
        }
    }

    /// Submits the pieces added to stripe operation `idx` for `phase`.
    fn sop_issue(&mut self, idx: usize, phase: Phase, out: &mut Vec<Completion>) {
        let n = self.raid.sops[idx].npieces;
        self.raid.sops[idx].phase = phase;
        self.raid.sops[idx].pending = n;
        self.raid.sops[idx].failed = false;
        if n == 0 {
            self.sop_phase_done(idx, out);
            return;
        }
        let now = self.vol.throttle_clock();
        let torn = phase == Phase::Write && n > 1 && torn_stripe_failpoint();
        for pi in 0..n {
            let p = &mut self.raid.sops[idx].pieces[pi];
            p.deadline = self.vol.deadline(p.member, p.len, now);
            self.push_sop_piece(idx, pi);
            if torn && pi == 0 {
                // Failpoint: the first member write reaches the kernel alone
                // and the rest a moment later, so a crash test's SIGKILL can
                // land between them (a stripe written in part).
                self.submit();
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        }
    }

    fn push_sop_piece(&mut self, idx: usize, pi: usize) {
        let p = &mut self.raid.sops[idx].pieces[pi];
        let ud = SOP_BIT | ((idx as u64) << 16) | pi as u64;
        let m = &self.vol.members()[p.member as usize];
        super::zero_fill_if_refused(p, m);
        if let Some(res) = super::injected_fault(p, m) {
            self.synthetic.push((ud, res));
            return;
        }
        let sqe = super::build_sqe(p, m.kind());
        // SAFETY: the entry names the stripe operation's row buffers (held
        // in the operation until it finishes), the request's buffer (held
        // by its slot until every operation of the request finished) or the
        // queue's zero buffer (never freed while the queue lives), and the
        // piece's iovec, which is not touched until this completion.
        unsafe { self.push_sqe(sqe.user_data(ud)) };
    }

    /// Roles of stripe `s`'s chunks in parity order: data 0..d, P, Q.
    fn stripe_members(l: &Layout, s: u64) -> ([u32; crate::raid::geometry::MAX_MEMBERS], usize) {
        let mut v = [0u32; crate::raid::geometry::MAX_MEMBERS];
        let d = l.data_chunks() as usize;
        for (i, slot) in v.iter_mut().enumerate().take(d) {
            *slot = l.data_member(s, i as u32);
        }
        v[d] = l.parity_member(s);
        let mut k = d + 1;
        if let Some(q) = l.q_member(s) {
            v[k] = q;
            k += 1;
        }
        (v, k)
    }

    /// Decides and starts stripe operation `idx` (its lock is held).
    fn sop_plan(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let l = self.layout();
        let health = self.vol.health().clone();
        let data_offset = self.vol.data_offset();
        if self.raid.sops[idx].kind == Kind::Read && self.read_recent(idx, &l) {
            // Served from memory; `plans` says the lock is held.
            self.raid.sops[idx].plans += 1;
            return self.sop_finish(idx, out);
        }
        let sop = &mut self.raid.sops[idx];
        sop.plans += 1;
        sop.npieces = 0;
        if sop.plans as usize > l.members() + 1 {
            sop.error = Some(eio("gave up: members keep failing".into()));
            return self.sop_finish(idx, out);
        }
        let (kind, s, start, end) = (sop.kind, sop.stripe, sop.start, sop.end);
        let rows = (end - start) as usize;
        if kind != Kind::Read && health.writes_stopped() {
            sop.error = Some(eio(format!(
                "the array has failed (more members lost than the {} volume tolerates): nothing more is written",
                l.level()
            )));
            return self.sop_finish(idx, out);
        }
        if !l.level().has_parity() {
            return self.mirror_plan(idx, out);
        }
        let (sm, k) = Self::stripe_members(&l, s);
        let abs = data_offset + l.stripe_offset(s) + start;
        let lost = sm[..k].iter().filter(|&&m| !health.readable(m, abs, rows as u64)).count();
        let tol = l.level().fault_tolerance(l.members());
        if lost > tol {
            let names: Vec<&str> = sm[..k]
                .iter()
                .filter(|&&m| !health.readable(m, abs, rows as u64))
                .map(|&m| self.vol.members()[m as usize].name())
                .collect();
            self.raid.sops[idx].error = Some(eio(format!(
                "stripe {s} of the {} volume has lost {lost} members ({}), more than the {tol} it tolerates: \
                 its data cannot be {}",
                l.level(),
                names.join(", "),
                if kind == Kind::Read { "read" } else { "written" }
            )));
            if kind != Kind::Read {
                health.stop_writes();
            }
            return self.sop_finish(idx, out);
        }
        if kind != Kind::Read && self.raid.sops[idx].nmarks == 0 {
            if let Some(bm) = self.vol.bitmap() {
                if let Err(e) = bm.start_write(abs, rows as u64) {
                    self.raid.sops[idx].error = Some(e);
                    return self.sop_finish(idx, out);
                }
                let sop = &mut self.raid.sops[idx];
                sop.marks[0] = (abs, rows as u64);
                sop.nmarks = 1;
            }
        }
        let d = l.data_chunks() as usize;
        let (first, count) = (self.raid.sops[idx].first as usize, self.raid.sops[idx].count as usize);
        let method = match kind {
            Kind::Zero => {
                for &m in &sm[..k] {
                    if health.writable(m) {
                        let op = self.slots[self.raid.sops[idx].slot as usize].op;
                        self.sop_piece(idx, op, m, abs, rows, std::ptr::null_mut());
                    }
                }
                return self.sop_issue(idx, Phase::Write, out);
            }
            Kind::Read => Method::Recon,
            // A full-stripe write needs nothing from the members, lost or not.
            Kind::Write if count == d => Method::Full,
            Kind::Write if lost > 0 => Method::Recon,
            Kind::Write => {
                let rmw = count + l.level().parity_chunks();
                let rcw = d - count;
                if rmw < rcw {
                    Method::Rmw
                } else {
                    Method::Rcw
                }
            }
        };
        self.raid.sops[idx].method = method;
        let reads: Vec<u32> = match method {
            Method::Full => Vec::new(),
            Method::Rmw => sm[first..first + count].iter().chain(&sm[d..k]).copied().collect(),
            Method::Rcw => sm[..d].iter().enumerate().filter(|(i, _)| *i < first || *i >= first + count).map(|(_, &m)| m).collect(),
            Method::Recon => sm[..k].iter().copied().filter(|&m| health.readable(m, abs, rows as u64)).collect(),
        };
        for m in reads {
            self.take_buf(idx, m);
            let ptr = self.raid.sops[idx].bufs[m as usize].as_mut().expect("taken").as_mut_ptr();
            self.sop_piece(idx, Op::Read, m, abs, rows, ptr);
        }
        self.sop_issue(idx, Phase::Read, out);
    }

    fn mirror_plan(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let health = self.vol.health().clone();
        let data_offset = self.vol.data_offset();
        let sop = &self.raid.sops[idx];
        let (places, rows, buf_off, kind, si) = (sop.places.expect("mirror piece"), (sop.end - sop.start) as usize, sop.buf_off, sop.kind, sop.slot as usize);
        let writable: Vec<_> = places.iter().filter(|p| health.writable(p.member)).collect();
        if writable.is_empty() {
            self.raid.sops[idx].error = Some(eio(format!(
                "every copy of logical bytes {}..{} is on a failed member: nothing can be written there",
                self.slots[si].offset + buf_off as u64,
                self.slots[si].offset + (buf_off + rows) as u64
            )));
            return self.sop_finish(idx, out);
        }
        if self.raid.sops[idx].nmarks == 0 {
            if let Some(bm) = self.vol.bitmap().cloned() {
                // RAID 1 copies share one offset; RAID 10's two may differ.
                let mut marks = [(0u64, 0u64); 2];
                let mut n = 0;
                for pl in places.iter() {
                    let r = (data_offset + pl.member_offset, rows as u64);
                    if !marks[..n].contains(&r) && n < 2 {
                        if let Err(e) = bm.start_write(r.0, r.1) {
                            for &(o, l) in &marks[..n] {
                                bm.end_write(o, l);
                            }
                            self.raid.sops[idx].error = Some(e);
                            return self.sop_finish(idx, out);
                        }
                        marks[n] = r;
                        n += 1;
                    }
                }
                let sop = &mut self.raid.sops[idx];
                sop.marks = marks;
                sop.nmarks = n;
            }
        }
        let op = self.slots[si].op;
        let ptr = match kind {
            Kind::Write => {
                // SAFETY: buf_off + rows <= request length <= buffer length.
                unsafe { self.slots[si].buf.as_mut().expect("checked").as_mut_ptr().add(buf_off) }
            }
            _ => std::ptr::null_mut(),
        };
        let op = if kind == Kind::Write { Op::Write } else { op };
        for pl in writable {
            self.sop_piece(idx, op, pl.member, data_offset + pl.member_offset, rows, ptr);
        }
        self.sop_issue(idx, Phase::Write, out);
    }

    /// The new data of data index `i` over the operation's rows: a slice
    /// of the request's buffer or of the zero buffer.
    fn new_data_ptr(&mut self, idx: usize, l: &Layout, i: usize) -> *mut u8 {
        let sop = &self.raid.sops[idx];
        let rows = (sop.end - sop.start) as usize;
        if sop.zeros {
            let chunk = l.chunk() as usize;
            let z = self.raid.zeros.get_or_insert_with(|| IoBuf::new(chunk));
            debug_assert!(rows <= z.len());
            return z.as_mut_ptr();
        }
        let logical = sop.stripe * l.stripe_data_width() + i as u64 * l.chunk() + sop.start;
        let si = sop.slot as usize;
        let off = (logical - self.slots[si].offset) as usize;
        debug_assert!(off + rows <= self.slots[si].len);
        // SAFETY: the band lies inside the request (planned from it).
        unsafe { self.slots[si].buf.as_mut().expect("checked").as_mut_ptr().add(off) }
    }

    /// All reads of a parity stripe operation are in: compute and write.
    fn parity_compute_and_write(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let l = self.layout();
        let health = self.vol.health().clone();
        let data_offset = self.vol.data_offset();
        let (s, start, end, method, kind) = {
            let sop = &self.raid.sops[idx];
            (sop.stripe, sop.start, sop.end, sop.method, sop.kind)
        };
        let rows = (end - start) as usize;
        let abs = data_offset + l.stripe_offset(s) + start;
        let (sm, k) = Self::stripe_members(&l, s);
        let d = l.data_chunks() as usize;
        let (first, count) = (self.raid.sops[idx].first as usize, self.raid.sops[idx].count as usize);
        let pm = sm[d];
        let qm = if k > d + 1 { Some(sm[d + 1]) } else { None };
        let kernel = self.raid.kernel;
        let mut newp = [std::ptr::null_mut::<u8>(); crate::raid::geometry::MAX_MEMBERS];
        if kind == Kind::Write && !self.raid.sops[idx].parts.is_empty() {
            // Merged from several requests: one part per request and data
            // index; an index made of several parts is gathered into its
            // row buffer.
            let parts = std::mem::take(&mut self.raid.sops[idx].parts);
            for (i, np) in newp.iter_mut().enumerate().take(d) {
                let mine: Vec<&Part> = parts.iter().filter(|p| p.index as usize == i).collect();
                if let [p] = mine[..] {
                    if p.start == 0 && p.end == l.chunk() {
                        *np = p.ptr;
                        continue;
                    }
                }
                self.take_buf(idx, sm[i]);
                let b = self.raid.sops[idx].bufs[sm[i] as usize].as_mut().expect("taken");
                for p in mine {
                    // SAFETY: a part addresses end - start bytes of a live
                    // request buffer (its slot waits for this operation).
                    let src = unsafe { std::slice::from_raw_parts(p.ptr, (p.end - p.start) as usize) };
                    b[p.start as usize..p.end as usize].copy_from_slice(src);
                }
                *np = b.as_mut_ptr();
            }
            self.raid.sops[idx].parts = parts;
        } else if kind == Kind::Write {
            for (i, np) in newp.iter_mut().enumerate().take(first + count).skip(first) {
                *np = self.new_data_ptr(idx, &l, i);
            }
        }
        // Every chunk of the stripe gets a buffer where the method needs
        // one (P and Q always; every member for a reconstruction).
        match method {
            Method::Recon => {
                for &m in &sm[..k] {
                    self.take_buf(idx, m);
                }
            }
            _ => {
                self.take_buf(idx, pm);
                if let Some(q) = qm {
                    self.take_buf(idx, q);
                }
            }
        }
        let mut bufs = std::mem::take(&mut self.raid.sops[idx].bufs);
        // SAFETY (for the slices below): each new-data pointer addresses
        // `rows` bytes inside a request's buffer, the zero buffer, or (for a
        // merged stripe) the row buffer of that data member, which no other
        // slice below addresses; row buffers are heap blocks that stay put
        // while the vector holding them is taken out.
        let new = |i: usize| -> &[u8] { unsafe { std::slice::from_raw_parts(newp[i], rows) } };
        {
            let get = |bufs: &mut Vec<Option<IoBuf>>, m: u32| -> *mut u8 { bufs[m as usize].as_mut().expect("buffer").as_mut_ptr() };
            // SAFETY: distinct members have distinct buffers, each at least
            // a chunk (>= rows) long.
            let slice = |p: *mut u8| -> &mut [u8] { unsafe { std::slice::from_raw_parts_mut(p, rows) } };
            let p_ptr = get(&mut bufs, pm);
            let q_ptr = qm.map(|q| get(&mut bufs, q));
            match method {
                Method::Full => {
                    let data: Vec<&[u8]> = (0..d).map(new).collect();
                    match q_ptr {
                        None => kernel.gen_p(&data, slice(p_ptr)),
                        Some(q) => kernel.gen_pq(&data, slice(p_ptr), slice(q)),
                    }
                }
                Method::Rmw => {
                    // (`i` is the data index the kernels take, too.)
                    #[allow(clippy::needless_range_loop)]
                    for i in first..first + count {
                        let old_ptr = get(&mut bufs, sm[i]);
                        let old: &[u8] = slice(old_ptr);
                        match q_ptr {
                            None => kernel.update_p(old, new(i), slice(p_ptr)),
                            Some(q) => kernel.update_pq(i, old, new(i), slice(p_ptr), slice(q)),
                        }
                    }
                }
                Method::Rcw => {
                    let ptrs: Vec<*mut u8> = (0..d).map(|i| if i >= first && i < first + count { newp[i] } else { get(&mut bufs, sm[i]) }).collect();
                    let data: Vec<&[u8]> = ptrs.iter().map(|&p| &*slice(p)).collect();
                    match q_ptr {
                        None => kernel.gen_p(&data, slice(p_ptr)),
                        Some(q) => kernel.gen_pq(&data, slice(p_ptr), slice(q)),
                    }
                }
                Method::Recon => {
                    let lost: Vec<usize> = (0..k).filter(|&i| !health.readable(sm[i], abs, rows as u64)).collect();
                    let ptrs: Vec<*mut u8> = (0..k).map(|i| get(&mut bufs, sm[i])).collect();
                    {
                        let mut stripe: Vec<&mut [u8]> = ptrs.iter().map(|&p| slice(p)).collect();
                        if !lost.is_empty() {
                            match qm {
                                None => kernel.recover_raid5(&mut stripe, lost[0]),
                                Some(_) => kernel.recover_raid6(&mut stripe, &lost),
                            }
                        }
                    }
                    if kind == Kind::Write {
                        #[allow(clippy::needless_range_loop)]
                        for i in first..first + count {
                            slice(ptrs[i]).copy_from_slice(new(i));
                        }
                        let data: Vec<&[u8]> = ptrs[..d].iter().map(|&p| &*slice(p)).collect();
                        match q_ptr {
                            None => kernel.gen_p(&data, slice(p_ptr)),
                            Some(q) => kernel.gen_pq(&data, slice(p_ptr), slice(q)),
                        }
                    }
                }
            }
        }
        if kind == Kind::Read {
            self.copy_out(idx, &l, &sm[..d], &bufs, start);
            self.keep_recent(idx, bufs);
            return self.sop_finish(idx, out);
        }
        self.raid.sops[idx].bufs = bufs;
        self.raid.sops[idx].npieces = 0;
        for i in first..first + count {
            if health.writable(sm[i]) {
                self.sop_piece(idx, Op::Write, sm[i], abs, rows, newp[i]);
            }
        }
        for &m in &sm[d..k] {
            if health.writable(m) {
                let ptr = self.raid.sops[idx].bufs[m as usize].as_mut().expect("parity buffer").as_mut_ptr();
                self.sop_piece(idx, Op::Write, m, abs, rows, ptr);
            }
        }
        self.sop_issue(idx, Phase::Write, out);
    }

    /// Serves degraded read `idx` (its stripe lock held) from a stripe
    /// this queue reconstructed before, if one holds its rows and no write
    /// touched the stripe since. True when served.
    fn read_recent(&mut self, idx: usize, l: &Layout) -> bool {
        let (s, start, end) = (self.raid.sops[idx].stripe, self.raid.sops[idx].start, self.raid.sops[idx].end);
        let Some(pos) = self.raid.recent.iter().position(|r| r.stripe == s) else { return false };
        let r = self.raid.recent.remove(pos).expect("found");
        if r.generation != self.vol.locks().generation(s) || r.start > start || r.end < end {
            self.drop_recent(r);
            return false;
        }
        let (sm, _) = Self::stripe_members(l, s);
        self.copy_out(idx, l, &sm[..l.data_chunks() as usize], &r.bufs, r.start);
        self.raid.recent_hits += 1;
        self.raid.recent.push_back(r);
        true
    }

    /// Keeps degraded read `idx`'s row buffers (its lock still held) in
    /// `recent`, evicting the oldest.
    fn keep_recent(&mut self, idx: usize, bufs: Vec<Option<IoBuf>>) {
        let sop = &self.raid.sops[idx];
        let s = sop.stripe;
        let (start, end) = (sop.start, sop.end);
        let generation = self.vol.locks().generation(s);
        // The operation gets back an empty vector (an evicted one when
        // there is one: no allocation once `recent` is full).
        let mut empty = None;
        if let Some(pos) = self.raid.recent.iter().position(|r| r.stripe == s) {
            let r = self.raid.recent.remove(pos).expect("found");
            empty = Some(self.drop_recent(r));
        }
        if empty.is_none() && self.raid.recent.len() >= self.raid.recent_cap {
            let r = self.raid.recent.pop_front().expect("full");
            empty = Some(self.drop_recent(r));
        }
        let n = bufs.len();
        self.raid.sops[idx].bufs = empty.unwrap_or_else(|| (0..n).map(|_| None).collect());
        self.raid.recent.push_back(Recent { stripe: s, start, end, generation, bufs });
    }

    /// Returns a kept stripe's buffers to the pool; hands back its (now
    /// empty) vector.
    fn drop_recent(&mut self, mut r: Recent) -> Vec<Option<IoBuf>> {
        for b in r.bufs.iter_mut() {
            if let Some(b) = b.take() {
                self.raid.pool.push(b);
            }
        }
        r.bufs
    }

    /// Copies a degraded read's reconstructed rows into the request:
    /// `bufs` (by member role) hold rows from `base` on.
    fn copy_out(&mut self, idx: usize, l: &Layout, data_members: &[u32], bufs: &[Option<IoBuf>], base: u64) {
        let sop = &self.raid.sops[idx];
        let si = sop.slot as usize;
        let (roff, rlen) = (self.slots[si].offset, self.slots[si].len as u64);
        for (i, &m) in data_members.iter().enumerate() {
            let lstart = sop.stripe * l.stripe_data_width() + i as u64 * l.chunk() + sop.start;
            let lend = lstart + (sop.end - sop.start);
            let (a, b) = (lstart.max(roff), lend.min(roff + rlen));
            if a >= b {
                continue;
            }
            let skip = sop.start - base;
            let src = &bufs[m as usize].as_ref().expect("row buffer")[(skip + a - lstart) as usize..(skip + b - lstart) as usize];
            let dst = self.slots[si].buf.as_mut().expect("checked");
            dst[(a - roff) as usize..(b - roff) as usize].copy_from_slice(src);
        }
    }

    /// A completion of a stripe operation's member I/O.
    pub(super) fn sop_cqe(&mut self, ud: u64, res: i32, out: &mut Vec<Completion>) {
        let idx = ((ud & !SOP_BIT) >> 16) as usize;
        let pi = (ud & 0xffff) as usize;
        let member = self.raid.sops[idx].pieces[pi].member;
        #[cfg(feature = "failpoints")]
        {
            let si = self.raid.sops[idx].slot as usize;
            if self.raid.sops[idx].pieces[pi].op == Op::Write && Some(self.slots[si].offset) == super::queue_panic_failpoint() {
                panic!("URAID_FAILPOINT_QUEUE_PANIC at volume byte {}", self.slots[si].offset);
            }
        }
        match progress(&mut self.raid.sops[idx].pieces[pi], res, &self.vol.members()[member as usize]) {
            Outcome::Again => {
                self.push_sop_piece(idx, pi);
                return;
            }
            Outcome::Done(None) => {
                let p = &self.raid.sops[idx].pieces[pi];
                if p.op != Op::Read {
                    self.raid.sops[idx].ok_writes += 1;
                }
            }
            Outcome::Done(Some(e)) => {
                if e.is_device_failure() {
                    self.member_failed(member);
                    self.raid.sops[idx].failed = true;
                } else if self.raid.sops[idx].error.is_none() {
                    self.raid.sops[idx].error = Some(e);
                }
            }
        }
        let deadline = self.raid.sops[idx].pieces[pi].deadline;
        if deadline != 0 && deadline > now_ns() {
            self.held.push(Reverse((deadline, ud)));
            return;
        }
        self.sop_piece_done(idx, out);
    }

    pub(super) fn sop_piece_done(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let sop = &mut self.raid.sops[idx];
        sop.pending -= 1;
        if sop.pending == 0 {
            self.sop_phase_done(idx, out);
        }
    }

    fn sop_phase_done(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let sop = &self.raid.sops[idx];
        if sop.error.is_some() {
            return self.sop_finish(idx, out);
        }
        let l = self.layout();
        match sop.phase {
            Phase::Lock => unreachable!("no I/O before the lock"),
            Phase::Read if sop.failed => self.sop_plan(idx, out),
            Phase::Read => self.parity_compute_and_write(idx, out),
            Phase::Write => {
                if sop.failed {
                    // The data must still be there on enough members.
                    let lost_data = if l.level().has_parity() {
                        let health = self.vol.health();
                        let abs = self.vol.data_offset() + l.stripe_offset(sop.stripe) + sop.start;
                        let (sm, k) = Self::stripe_members(&l, sop.stripe);
                        let lost = sm[..k].iter().filter(|&&m| !health.readable(m, abs, sop.end - sop.start)).count();
                        lost > l.level().fault_tolerance(l.members())
                    } else {
                        sop.ok_writes == 0
                    };
                    if lost_data {
                        let e = eio(format!(
                            "writing stripe {} of the {} volume failed on too many members: the data did not land",
                            sop.stripe,
                            l.level()
                        ));
                        self.raid.sops[idx].error = Some(e);
                        self.vol.health().stop_writes();
                    }
                }
                self.sop_finish(idx, out)
            }
        }
    }

    fn sop_finish(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let sop = &mut self.raid.sops[idx];
        if sop.plans > 0 {
            let w = self.vol.locks().word(sop.stripe);
            if let Some(i) = self.raid.held_words.iter().position(|&h| h == w) {
                self.raid.held_words.swap_remove(i);
            }
            if sop.kind == Kind::Read {
                self.vol.locks().unlock(sop.stripe);
            } else {
                self.vol.locks().unlock_written(sop.stripe);
            }
        }
        if let Some(bm) = self.vol.bitmap() {
            for &(o, l) in &sop.marks[..sop.nmarks] {
                bm.end_write(o, l);
            }
        }
        sop.nmarks = 0;
        for b in sop.bufs.iter_mut() {
            if let Some(b) = b.take() {
                self.raid.pool.push(b);
            }
        }
        let si = sop.slot as usize;
        let err = sop.error.take();
        let owed = if sop.owed.is_empty() { vec![(si as u32, 1)] } else { std::mem::take(&mut sop.owed) };
        sop.parts.clear();
        self.raid.free.push(idx as u32);
        for (slot, k) in owed {
            let slot = slot as usize;
            if let Some(e) = &err {
                if self.slots[slot].error.is_none() {
                    self.slots[slot].error = Some(e.clone());
                }
            }
            for _ in 0..k {
                self.piece_done(slot, out);
            }
        }
    }
}
