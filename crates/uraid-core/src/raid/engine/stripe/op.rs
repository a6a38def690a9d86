//! Running one stripe operation, once planned: take the stripe's lock,
//! read what the method needs (old data and parity for read-modify-write,
//! the other data chunks for reconstruct-write, every readable member when
//! degraded), compute P and Q, write data and parity, and finish the
//! requests it carries; a member that fails on the way sends the operation
//! back to planning without it.

use super::{eio, torn_stripe_failpoint, Kind, Method, Part, Phase, Recent, StripeRows};
use crate::io::buf::IoBuf;
use crate::raid::chunk::MAX_MEMBERS;
use crate::raid::engine::{new_piece, now_ns, progress, Completion, Op, Outcome, RaidQueue, Reverse, SOP_BIT};
use crate::raid::layout::Layout;

impl RaidQueue {
    pub(super) fn sop_start(&mut self, idx: usize, out: &mut Vec<Completion>) {
        if self.take_lock(idx) {
            self.sop_plan(idx, out);
        } else {
            self.raid.waiting.push_back(idx as u32);
        }
    }

    /// Takes stripe operation `idx`'s lock if it is free (true when taken).
    pub(super) fn take_lock(&mut self, idx: usize) -> bool {
        let s = self.raid.sops[idx].stripe;
        let taken = self.vol.locks().try_lock(s);
        if taken {
            self.raid.held_words.push(self.vol.locks().word(s));
        }
        taken
    }

    pub(super) fn take_buf(&mut self, idx: usize, m: u32) {
        if self.raid.sops[idx].bufs[m as usize].is_none() {
            let chunk = self.layout().chunk() as usize;
            let b = self.raid.pool.pop().unwrap_or_else(|| IoBuf::new(chunk));
            self.raid.sops[idx].bufs[m as usize] = Some(b);
        }
    }

    /// Adds a member I/O to stripe operation `idx`; `ptr` is the memory it
    /// reads into or writes from (`len` bytes; none for fallocate).
    pub(super) fn sop_piece(&mut self, idx: usize, op: Op, member: u32, offset: u64, len: usize, ptr: *mut u8) {
        debug_assert!(
            (member as usize) < self.vol.members().len() && offset + len as u64 <= self.vol.data_offset() + self.vol.geometry().member_size(),
            "a stripe piece of {len} bytes at {offset} is outside member {member}'s data area"
        );
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
    pub(super) fn sop_issue(&mut self, idx: usize, phase: Phase, out: &mut Vec<Completion>) {
        let n = self.raid.sops[idx].npieces;
        self.raid.sops[idx].phase = phase;
        self.raid.sops[idx].pending = n;
        self.raid.sops[idx].failed = false;
        if n == 0 {
            self.sop_phase_done(idx, out);
            return;
        }
        if self.vol.health().spared() {
            self.remap_sop(idx);
        }
        let now = self.vol.throttle_clock();
        let torn = phase == Phase::Write && n > 1 && torn_stripe_failpoint();
        for pi in 0..n {
            let p = &mut self.raid.sops[idx].pieces[pi];
            p.deadline = self.vol.deadline(p.member, p.op, p.len, now);
            self.push_sop_piece(idx, pi);
            if torn && pi == 0 {
                // Failpoint: the first member write reaches the kernel alone
                // and the rest a moment later, so a crash test's SIGKILL can
                // land between them (a stripe written in part).
                self.submit();
                crate::clock::sleep(std::time::Duration::from_micros(300));
            }
        }
    }

    pub(super) fn push_sop_piece(&mut self, idx: usize, pi: usize) {
        let p = &mut self.raid.sops[idx].pieces[pi];
        let ud = SOP_BIT | ((idx as u64) << 16) | pi as u64;
        let m = &self.vol.members()[p.member as usize];
        crate::raid::engine::zero_fill_if_refused(p, m);
        if let Some(res) = crate::raid::engine::injected_fault(p, m) {
            self.synthetic.push((ud, res));
            return;
        }
        let sqe = if crate::raid::engine::is_block_discard(p, m) {
            match crate::raid::engine::block_discard_sqe(p, m) {
                Ok(sqe) => sqe,
                Err(res) => {
                    self.synthetic.push((ud, res));
                    return;
                }
            }
        } else {
            crate::raid::engine::time_first_push(p, &self.counters);
            crate::raid::engine::build_sqe(p, m)
        };
        // SAFETY: the entry names the stripe operation's row buffers (held
        // in the operation until it finishes), the request's buffer (held
        // by its slot until every operation of the request finished) or the
        // queue's zero buffer (never freed while the queue lives), and the
        // piece's iovec, which is not touched until this completion.
        unsafe { self.push_sqe(sqe.user_data(ud)) };
    }

    /// Roles of stripe `s`'s chunks in parity order: data 0..d, P, Q.
    pub(super) fn stripe_members(l: &Layout, s: u64) -> ([u32; MAX_MEMBERS], usize) {
        let mut v = [0u32; MAX_MEMBERS];
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
        debug_assert!((0..k).all(|i| !v[..i].contains(&v[i])), "stripe {s}: a member twice in {:?}", &v[..k]);
        (v, k)
    }

    /// Decides and starts stripe operation `idx` (its lock is held).
    pub(super) fn sop_plan(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let l = self.layout();
        debug_assert!(self.raid.holds_lock(self.vol.locks(), self.raid.sops[idx].stripe), "an operation runs without its stripe lock");
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
        if kind != Kind::Read && self.vol.health().writes_stopped() {
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
        let abs = self.vol.data_offset() + l.stripe_offset(s) + start;
        let lost = match self.stripe_lost(idx, &l, &sm[..k], abs, rows) {
            Ok(mask) => mask.count_ones() as usize,
            Err(e) => {
                self.raid.sops[idx].error = Some(e);
                return self.sop_finish(idx, out);
            }
        };
        if kind != Kind::Read && self.raid.sops[idx].nmarks == 0 {
            if let Some(bm) = self.vol.bitmap() {
                if let Err(e) = bm.start_mark(abs, rows as u64, kind == Kind::Zero) {
                    self.raid.sops[idx].error = Some(e);
                    return self.sop_finish(idx, out);
                }
                let sop = &mut self.raid.sops[idx];
                sop.marks[0] = (abs, rows as u64);
                sop.nmarks = 1;
            }
        }
        if kind == Kind::Zero {
            return self.sop_zero(idx, &sm[..k], abs, rows, out);
        }
        let method = self.sop_method(idx, &l, lost);
        self.raid.sops[idx].method = method;
        let d = l.data_chunks() as usize;
        let (first, count) = (self.raid.sops[idx].first as usize, self.raid.sops[idx].count as usize);
        // The members to read (no allocation per operation).
        let mut reads = [0u32; MAX_MEMBERS];
        let mut nreads = 0;
        {
            let mut add = |m: u32| {
                reads[nreads] = m;
                nreads += 1;
            };
            match method {
                Method::Full => {}
                Method::Rmw => sm[first..first + count].iter().chain(&sm[d..k]).for_each(|&m| add(m)),
                Method::Rcw => sm[..d].iter().enumerate().filter(|(i, _)| *i < first || *i >= first + count).for_each(|(_, &m)| add(m)),
                Method::Recon => sm[..k].iter().filter(|&&m| self.can_read(m, abs, rows as u64)).for_each(|&m| add(m)),
            }
        }
        if nreads > 0 {
            // One shared counter update per operation, not per read.
            self.vol.stripe_reads.fetch_add(nreads as u64, std::sync::atomic::Ordering::Relaxed);
        }
        for &m in &reads[..nreads] {
            self.take_buf(idx, m);
            let ptr = self.raid.sops[idx].bufs[m as usize].as_mut().expect("taken").as_mut_ptr();
            self.sop_piece(idx, Op::Read, m, abs, rows, ptr);
        }
        self.sop_issue(idx, Phase::Read, out);
    }

    /// The stripe's members (`sm`, in parity order) that cannot be read
    /// over the operation's rows (`rows` bytes at absolute `abs`), as a
    /// mask of positions in `sm`, looked at once (another thread may fail
    /// a member meanwhile: what is planned and computed must agree).
    /// Errors: `Io` when more than the level tolerates (a write then stops
    /// the volume's writes).
    fn stripe_lost(&self, idx: usize, l: &Layout, sm: &[u32], abs: u64, rows: usize) -> crate::Result<u64> {
        let health = self.vol.health();
        let (s, kind) = (self.raid.sops[idx].stripe, self.raid.sops[idx].kind);
        let mask = sm.iter().enumerate().filter(|&(_, &m)| !self.can_read(m, abs, rows as u64)).fold(0u64, |g, (i, _)| g | 1 << i);
        let lost = mask.count_ones() as usize;
        let tol = l.level().fault_tolerance(l.members());
        if lost <= tol {
            return Ok(mask);
        }
        let names: Vec<&str> = sm.iter().enumerate().filter(|&(i, _)| mask & 1 << i != 0).map(|(_, &m)| self.vol.members()[m as usize].name()).collect();
        if kind != Kind::Read {
            health.stop_writes();
        }
        Err(eio(format!(
            "stripe {s} of the {} volume has lost {lost} members ({}), more than the {tol} it tolerates: \
             its data cannot be {}",
            l.level(),
            names.join(", "),
            if kind == Kind::Read { "read" } else { "written" }
        )))
    }

    /// Zeroes the operation's rows on every writable member of the stripe
    /// (`sm`). Parity holds only over data that reads back the same: a
    /// discarded chunk may read back anything, so a discard of whole
    /// stripes is a zeroing of every member (zeros have zero P and Q),
    /// never a discard.
    fn sop_zero(&mut self, idx: usize, sm: &[u32], abs: u64, rows: usize, out: &mut Vec<Completion>) {
        let op = match self.slots[self.raid.sops[idx].slot as usize].op {
            Op::Discard => Op::WriteZeroes { no_hole: false },
            op => op,
        };
        for &m in sm {
            if self.vol.health().writable(m) {
                self.sop_piece(idx, op, m, abs, rows, std::ptr::null_mut());
            }
        }
        self.sop_issue(idx, Phase::Write, out)
    }

    /// The method of a read or write operation with `lost` members of its
    /// stripe unreadable: a full-stripe write needs nothing from the
    /// members, lost or not; a degraded one reconstructs; otherwise the
    /// fewer member reads of read-modify-write and reconstruct-write, ties
    /// to reconstruct-write (md's `handle_stripe_dirtying`).
    fn sop_method(&self, idx: usize, l: &Layout, lost: usize) -> Method {
        let sop = &self.raid.sops[idx];
        let (d, count) = (l.data_chunks() as usize, sop.count as usize);
        match sop.kind {
            Kind::Read => Method::Recon,
            Kind::Write if count == d => Method::Full,
            _ if lost > 0 => Method::Recon,
            _ => {
                let rmw = count + l.level().parity_chunks();
                let rcw = d - count;
                if rmw < rcw {
                    Method::Rmw
                } else {
                    Method::Rcw
                }
            }
        }
    }

    pub(super) fn mirror_plan(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let data_offset = self.vol.data_offset();
        let sop = &self.raid.sops[idx];
        let (places, rows, buf_off, kind, si) = (sop.places.expect("mirror piece"), (sop.end - sop.start) as usize, sop.buf_off, sop.kind, sop.slot as usize);
        if !places.iter().any(|p| self.vol.health().writable(p.member)) {
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
                        if let Err(e) = bm.start_mark(r.0, r.1, kind == Kind::Zero) {
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
        for pl in places.iter() {
            if self.vol.health().writable(pl.member) {
                self.sop_piece(idx, op, pl.member, data_offset + pl.member_offset, rows, ptr);
            }
        }
        self.sop_issue(idx, Phase::Write, out);
    }

    /// The new data of data index `i` over the operation's rows: a slice
    /// of the request's buffer or of the zero buffer.
    pub(super) fn new_data_ptr(&mut self, idx: usize, l: &Layout, i: usize) -> *mut u8 {
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
    pub(super) fn parity_compute_and_write(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let l = self.layout();
        let (s, start, end, method, kind) = {
            let sop = &self.raid.sops[idx];
            (sop.stripe, sop.start, sop.end, sop.method, sop.kind)
        };
        debug_assert!(self.raid.holds_lock(self.vol.locks(), s), "stripe {s}: an operation computes without its lock");
        let rows = (end - start) as usize;
        let abs = self.vol.data_offset() + l.stripe_offset(s) + start;
        let (sm, k) = Self::stripe_members(&l, s);
        let d = l.data_chunks() as usize;
        let (first, count) = (self.raid.sops[idx].first as usize, self.raid.sops[idx].count as usize);
        // Members may have failed since the reads were planned (a power
        // cut fails them all): more lost than the level tolerates ends
        // the operation with that error, not with a reconstruction.
        let lost_mask = match method {
            Method::Recon => match self.stripe_lost(idx, &l, &sm[..k], abs, rows) {
                Ok(mask) => mask,
                Err(e) => {
                    self.raid.sops[idx].error = Some(e);
                    return self.sop_finish(idx, out);
                }
            },
            _ => 0,
        };
        let newp = self.new_data(idx, &l, &sm[..d], kind, first, count);
        // Every chunk of the stripe gets a buffer where the method needs
        // one (P and Q always; every member for a reconstruction).
        let needs = if method == Method::Recon { &sm[..k] } else { &sm[d..k] };
        for &m in needs {
            self.take_buf(idx, m);
        }
        let mut bufs = std::mem::take(&mut self.raid.sops[idx].bufs);
        // Parity positions lost (a reconstruction) and members writable,
        // looked up once (no allocation per operation).
        let mut lost = [0usize; MAX_MEMBERS];
        let mut nlost = 0;
        let mut writable = [false; MAX_MEMBERS];
        {
            let health = self.vol.health();
            for i in 0..k {
                if lost_mask & 1 << i != 0 {
                    lost[nlost] = i;
                    nlost += 1;
                }
                writable[i] = health.writable(sm[i]);
            }
        }
        let stripe = StripeRows { members: &sm[..k], data: d, first, count, rows, new: &newp };
        stripe.compute(self.raid.kernel, method, kind, &mut bufs, &lost[..nlost]);
        if kind == Kind::Read {
            self.copy_out(idx, &l, &sm[..d], &bufs, start);
            self.raid.sops[idx].bufs = bufs;
            self.raid.sops[idx].npieces = 0;
            if self.add_repair_writes(idx) > 0 {
                // Rows whose read failed, reconstructed: written back.
                return self.sop_issue(idx, Phase::Write, out);
            }
            let bufs = std::mem::take(&mut self.raid.sops[idx].bufs);
            self.keep_recent(idx, bufs);
            return self.sop_finish(idx, out);
        }
        self.raid.sops[idx].bufs = bufs;
        self.raid.sops[idx].npieces = 0;
        let skip = self.raid.sops[idx].skip;
        for i in first..first + count {
            if writable[i] && skip & (1 << i) == 0 {
                self.sop_piece(idx, Op::Write, sm[i], abs, rows, newp[i]);
            }
        }
        for (i, &m) in sm.iter().enumerate().take(k).skip(d) {
            if writable[i] {
                let ptr = self.raid.sops[idx].bufs[m as usize].as_mut().expect("parity buffer").as_mut_ptr();
                self.sop_piece(idx, Op::Write, m, abs, rows, ptr);
            }
        }
        self.add_repair_writes(idx);
        self.sop_issue(idx, Phase::Write, out);
    }

    /// Where the new data of each written data index of operation `idx`
    /// is (by data index; null for the others): in the request's buffer
    /// or the zero buffer, or, for a write merged from several requests
    /// whose index is made of several parts, gathered into the index's
    /// row buffer (`data_members`: the members of the data indices).
    fn new_data(&mut self, idx: usize, l: &Layout, data_members: &[u32], kind: Kind, first: usize, count: usize) -> [*mut u8; MAX_MEMBERS] {
        let mut newp = [std::ptr::null_mut::<u8>(); MAX_MEMBERS];
        if kind != Kind::Write {
            return newp;
        }
        if self.raid.sops[idx].parts.is_empty() {
            for (i, np) in newp.iter_mut().enumerate().take(first + count).skip(first) {
                *np = self.new_data_ptr(idx, l, i);
            }
            return newp;
        }
        // Merged from several requests: one part per request and data
        // index; an index made of several parts is gathered into its row
        // buffer.
        let (start, end) = (self.raid.sops[idx].start, self.raid.sops[idx].end);
        let parts = std::mem::take(&mut self.raid.sops[idx].parts);
        for (i, np) in newp.iter_mut().enumerate().take(data_members.len()) {
            let mine: Vec<&Part> = parts.iter().filter(|p| p.index as usize == i).collect();
            if let [p] = mine[..] {
                if p.start == start && p.end == end {
                    *np = p.ptr;
                    continue;
                }
            }
            self.take_buf(idx, data_members[i]);
            let b = self.raid.sops[idx].bufs[data_members[i] as usize].as_mut().expect("taken");
            for p in mine {
                // SAFETY: a part addresses end - start bytes of a live
                // request buffer (its slot waits for this operation).
                let src = unsafe { std::slice::from_raw_parts(p.ptr, (p.end - p.start) as usize) };
                // The buffer holds the operation's rows from `start` on.
                b[(p.start - start) as usize..(p.end - start) as usize].copy_from_slice(src);
            }
            *np = b.as_mut_ptr();
        }
        self.raid.sops[idx].parts = parts;
        newp
    }

    /// Serves degraded read `idx` (its stripe lock held) from a stripe
    /// this queue reconstructed before, if one holds its rows and no write
    /// touched the stripe since. True when served.
    pub(super) fn read_recent(&mut self, idx: usize, l: &Layout) -> bool {
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
    pub(super) fn keep_recent(&mut self, idx: usize, bufs: Vec<Option<IoBuf>>) {
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
    pub(super) fn drop_recent(&mut self, mut r: Recent) -> Vec<Option<IoBuf>> {
        for b in r.bufs.iter_mut() {
            if let Some(b) = b.take() {
                self.raid.pool.push(b);
            }
        }
        r.bufs
    }

    /// Copies a degraded read's reconstructed rows into the request:
    /// `bufs` (by member role) hold rows from `base` on.
    pub(super) fn copy_out(&mut self, idx: usize, l: &Layout, data_members: &[u32], bufs: &[Option<IoBuf>], base: u64) {
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
    pub(in crate::raid::engine) fn sop_cqe(&mut self, ud: u64, res: i32, out: &mut Vec<Completion>) {
        let idx = ((ud & !SOP_BIT) >> 16) as usize;
        let pi = (ud & 0xffff) as usize;
        let member = self.raid.sops[idx].pieces[pi].member;
        #[cfg(feature = "failpoints")]
        {
            let si = self.raid.sops[idx].slot as usize;
            if self.raid.sops[idx].pieces[pi].op == Op::Write && Some(self.slots[si].offset) == crate::raid::engine::queue_panic_failpoint() {
                panic!("URAID_FAILPOINT_QUEUE_PANIC at volume byte {}", self.slots[si].offset);
            }
        }
        match progress(&mut self.raid.sops[idx].pieces[pi], res, &self.vol.members()[member as usize], &mut self.counters) {
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
                if self.raid.sops[idx].kind == Kind::Repair {
                    self.repair_io_failed(idx, member, &e);
                } else if e.is_device_failure() {
                    // A read error with redundancy left is reconstructed
                    // and rewritten (`repair.rs`); otherwise the member
                    // is failed.
                    if !self.sop_read_failed(idx, pi, member, &e) {
                        self.member_failed(member);
                    }
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

    pub(in crate::raid::engine) fn sop_piece_done(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let sop = &mut self.raid.sops[idx];
        sop.pending -= 1;
        if sop.pending == 0 {
            self.sop_phase_done(idx, out);
        }
    }

    pub(super) fn sop_phase_done(&mut self, idx: usize, out: &mut Vec<Completion>) {
        let sop = &self.raid.sops[idx];
        if sop.kind == Kind::Repair {
            return self.repair_phase_done(idx, out);
        }
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

    pub(super) fn sop_finish(&mut self, idx: usize, out: &mut Vec<Completion>) {
        if !self.raid.avoid.is_empty() {
            self.finish_sop_repairs(idx);
        }
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
        sop.parts.clear();
        if sop.owed.is_empty() {
            // One request (no allocation per operation).
            self.raid.free.push(idx as u32);
            return self.sop_owed(si, 1, &err, out);
        }
        let owed = std::mem::take(&mut sop.owed);
        // The operation is freed after: a request finished here and
        // planned again must not take it while `owed` is out.
        for &(slot, k) in &owed {
            self.sop_owed(slot as usize, k, &err, out);
        }
        let mut owed = owed;
        owed.clear();
        self.raid.sops[idx].owed = owed;
        self.raid.free.push(idx as u32);
    }

    /// Counts `k` stripe operations of slot `si` done, with the error
    /// `err` they ended with, if any.
    fn sop_owed(&mut self, si: usize, k: u32, err: &Option<crate::Error>, out: &mut Vec<Completion>) {
        if let Some(e) = err {
            if self.slots[si].error.is_none() {
                self.slots[si].error = Some(e.clone());
            }
        }
        for _ in 0..k {
            self.piece_done(si, out);
        }
    }
}
