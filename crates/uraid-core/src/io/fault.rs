//! Fault injection for members: the wrapper the tests use to make a drive
//! fail (the pluggable I/O layer idea of tikv/raft-engine's failpoints).
//!
//! A [`Faults`] plan is a [`Filter`] stacked over a member
//! ([`Faults::attach`], like nbdkit's `error` filter over a plugin) and
//! shared by every handle and queue that uses it. Every member I/O passes
//! through it first ([`Filter::before`]); an I/O it fails never reaches
//! the kernel and completes with the errno given, as a real drive's would.
//! The blocking control-path helpers (`read_exact_at`, `write_all_at`)
//! obey it too, so rebuild and scrub meet the same faults. Nothing outside
//! this file knows what a fault plan is.
//!
//! Faults: reads or writes failing with EIO over chosen byte ranges (a bad
//! block), the member vanishing (every I/O fails with ENXIO, as a pulled
//! NVMe drive's do), a torn write (the next write that touches a range
//! lands only its first half and then fails with EIO), and a volatile write
//! cache ([`Faults::volatile_cache`]): the engine's writes that were not
//! flushed (nor FUA) may be lost at a simulated power cut
//! ([`Faults::power_cut`]), any subset of them, newest undone first.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::io::member::Verdict;
use crate::io::member::{Filter, Member};
use crate::io::request::Op;

/// A fault plan for one member. All ranges are absolute member bytes.
#[derive(Debug, Default)]
pub struct Faults {
    read_errors: Mutex<Vec<Range<u64>>>,
    write_errors: Mutex<Vec<Range<u64>>>,
    tear: Mutex<Option<Range<u64>>>,
    vanished: AtomicBool,
    /// Discards and zeroings fail with EOPNOTSUPP (a device without them).
    no_fallocate: AtomicBool,
    /// The errno of the read and write error ranges (0: EIO).
    errno: std::sync::atomic::AtomicI32,
    injected: AtomicU64,
    armed: AtomicBool,
    volatile: AtomicBool,
    /// Flushes the engine sent to the member.
    flushes: AtomicU64,
    /// Pre-images of the writes since the last flush: (offset, old bytes).
    undo: Mutex<Vec<(u64, Vec<u8>)>>,
    /// A write over a read error range clears it there (see
    /// [`Faults::remap_on_write`]).
    remap: AtomicBool,
}

impl Faults {
    /// An empty plan (every I/O passes).
    pub fn new() -> Faults {
        Faults::default()
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Stacks this plan over `m` (and the clones made of it afterwards).
    pub fn attach(self: &Arc<Self>, m: &mut Member) {
        m.push_filter(self.clone());
    }

    /// The fault plan stacked over `m`, if any.
    pub fn of(m: &Member) -> Option<Arc<Faults>> {
        m.filters().iter().find_map(|f| f.clone().into_any().downcast::<Faults>().ok())
    }

    /// Reads overlapping `range` fail with EIO.
    pub fn fail_reads(&self, range: Range<u64>) {
        self.read_errors.lock().unwrap_or_else(|e| e.into_inner()).push(range);
        self.arm();
    }

    /// From now on a write that lands over part of a read error range
    /// ([`fail_reads`](Self::fail_reads)) clears the error there, as a
    /// drive remaps a pending sector when it is written: the bytes written
    /// read back. Without it a read error range stays bad whatever is
    /// written (a drive out of spare sectors).
    pub fn remap_on_write(&self) {
        self.remap.store(true, Ordering::Release);
    }

    /// Removes `[offset, offset + len)` from the read error ranges.
    fn clear_read_errors(&self, offset: u64, len: u64) {
        let end = offset + len;
        let mut v = self.read_errors.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = Vec::with_capacity(v.len() + 1);
        for r in v.drain(..) {
            if r.end <= offset || end <= r.start {
                kept.push(r);
                continue;
            }
            if r.start < offset {
                kept.push(r.start..offset);
            }
            if end < r.end {
                kept.push(end..r.end);
            }
        }
        *v = kept;
    }

    /// Every discard and zeroing (fallocate(2)) fails with EOPNOTSUPP, as
    /// on a device or filesystem that lacks them; the zeros the engine then
    /// writes instead pass.
    pub fn refuse_fallocate(&self) {
        self.no_fallocate.store(true, Ordering::Release);
        self.arm();
    }

    /// The read and write error ranges fail with `errno` instead of EIO
    /// (an error that is not a device failure, such as EINVAL or ENOMEM,
    /// must fail the request and leave the member in).
    pub fn set_errno(&self, errno: i32) {
        self.errno.store(errno, Ordering::Release);
    }

    fn range_errno(&self) -> i32 {
        match self.errno.load(Ordering::Acquire) {
            0 => libc::EIO,
            e => e,
        }
    }

    /// Writes overlapping `range` fail with EIO.
    pub fn fail_writes(&self, range: Range<u64>) {
        self.write_errors.lock().unwrap_or_else(|e| e.into_inner()).push(range);
        self.arm();
    }

    /// The next write overlapping `range` writes its first half, then fails
    /// with EIO (a torn write); once.
    pub fn tear_next_write(&self, range: Range<u64>) {
        *self.tear.lock().unwrap_or_else(|e| e.into_inner()) = Some(range);
        self.arm();
    }

    /// From now on every I/O fails with ENXIO (the drive is gone).
    pub fn vanish(&self) {
        self.vanished.store(true, Ordering::Release);
        self.arm();
    }

    /// Forgets every fault (the drive works again).
    pub fn heal(&self) {
        self.read_errors.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.write_errors.lock().unwrap_or_else(|e| e.into_inner()).clear();
        *self.tear.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.vanished.store(false, Ordering::Release);
        self.armed.store(false, Ordering::Release);
    }

    /// Models a volatile drive cache: from now on every write the engine
    /// sends that is not FUA, and every zeroing or discard (fallocate(2)
    /// has no FUA: a FUA one is followed by a datasync of the member, a
    /// flush here), is remembered (its old bytes are read first),
    /// until a flush reaches the member (counted when the flush is sent,
    /// which loses fewer writes than a real drive could); see
    /// [`power_cut`](Self::power_cut). Writes of the blocking helpers
    /// (superblocks, which are synced) and the bitmap's (RWF_DSYNC) count as
    /// durable.
    pub fn volatile_cache(&self) {
        self.volatile.store(true, Ordering::Release);
    }

    /// True when the volatile cache model is on.
    pub fn is_volatile(&self) -> bool {
        self.volatile.load(Ordering::Acquire)
    }

    /// Remembers that `old` was at `offset` before a write that is not
    /// durable yet.
    pub fn log_write(&self, offset: u64, old: Vec<u8>) {
        self.undo.lock().unwrap_or_else(|e| e.into_inner()).push((offset, old));
    }

    /// Writes not flushed yet that a power cut could lose (the volatile
    /// cache model).
    pub fn unflushed(&self) -> usize {
        self.undo.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// A flush reached the member: what was written is durable.
    pub fn flushed(&self) {
        self.undo.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// A simulated power cut: each write not yet flushed is lost with
    /// probability 1/2 (drawn from `seed`), newest first, by putting its
    /// old bytes back on `m` (which must be the member this plan belongs
    /// to). Returns how many were lost. Errors: `Io` from the rewrite.
    pub fn power_cut(&self, m: &Member, seed: u64) -> crate::Result<usize> {
        let log = std::mem::take(&mut *self.undo.lock().unwrap_or_else(|e| e.into_inner()));
        let mut x = seed | 1;
        let mut lost = 0;
        for (off, old) in log.iter().rev() {
            // xorshift64: a few random bits per write, no dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x & 1 == 1 {
                std::os::unix::fs::FileExt::write_all_at(m.file(), old, *off)
                    .map_err(|e| crate::Error::io("cannot undo a write on", std::path::Path::new(m.name()), e))?;
                lost += 1;
            }
        }
        Ok(lost)
    }

    /// I/Os failed or torn so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Acquire)
    }

    /// Flushes the engine sent to the member so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Acquire)
    }

    /// The verdict on `op` of `len` bytes at absolute byte `offset`.
    pub fn intercept(&self, op: Op, offset: u64, len: u64) -> Verdict {
        let v = if self.armed.load(Ordering::Acquire) { self.verdict(op, offset, len) } else { Verdict::Pass };
        if v != Verdict::Pass {
            self.injected.fetch_add(1, Ordering::AcqRel);
        }
        if op == Op::Flush {
            self.flushes.fetch_add(1, Ordering::AcqRel);
            // Only a flush that goes through makes the writes before it
            // durable; one that fails (a vanished drive) leaves them at
            // the power cut's mercy.
            if self.is_volatile() && v == Verdict::Pass {
                self.flushed();
            }
        }
        v
    }

    fn verdict(&self, op: Op, offset: u64, len: u64) -> Verdict {
        if self.vanished.load(Ordering::Acquire) {
            return Verdict::Fail(libc::ENXIO);
        }
        let hits = |v: &Mutex<Vec<Range<u64>>>| {
            v.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|r| r.start < offset + len.max(1) && offset < r.end)
        };
        match op {
            Op::Read if hits(&self.read_errors) => Verdict::Fail(self.range_errno()),
            Op::Discard | Op::WriteZeroes { .. } if self.no_fallocate.load(Ordering::Acquire) => Verdict::Fail(libc::EOPNOTSUPP),
            Op::Write | Op::Discard | Op::WriteZeroes { .. } => {
                if hits(&self.write_errors) {
                    return Verdict::Fail(self.range_errno());
                }
                if op == Op::Write {
                    let mut t = self.tear.lock().unwrap_or_else(|e| e.into_inner());
                    if t.as_ref().is_some_and(|r| r.start < offset + len && offset < r.end) {
                        *t = None;
                        // Whole 512-byte sectors, as a drive tears.
                        return Verdict::Tear((len / 2 / 512 * 512) as usize);
                    }
                }
                if self.remap.load(Ordering::Acquire) && len > 0 {
                    self.clear_read_errors(offset, len);
                }
                Verdict::Pass
            }
            _ => Verdict::Pass,
        }
    }
}

impl Filter for Faults {
    fn before(&self, m: &Member, op: Op, offset: u64, len: u64, durable: bool) -> Verdict {
        let writes = matches!(op, Op::Write | Op::Discard | Op::WriteZeroes { .. });
        if writes && !durable && len > 0 && self.is_volatile() {
            // The volatile drive cache model: remember what the write (or
            // the zeroing or discard: a drive's cache may lose those too)
            // covers.
            let mut old = vec![0u8; len as usize];
            if std::os::unix::fs::FileExt::read_exact_at(m.file(), &mut old, offset).is_ok() {
                self.log_write(offset, old);
            }
        }
        self.intercept(op, offset, len)
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The `URAID_FAILPOINT_FAIL_WRITES=PATH@START-END` failpoint (end-to-end
/// tests of a member failing under a running process): the member opened
/// as `PATH` fails every write that touches absolute member bytes
/// `[START, END)` with EIO. Anything else in the variable is ignored.
/// Only with the `failpoints` feature (the tests turn it on): a released
/// binary reads no such variable.
#[cfg(feature = "failpoints")]
fn fail_writes_failpoint(name: &str) -> Option<Arc<Faults>> {
    let r = failpoint_range("URAID_FAILPOINT_FAIL_WRITES", name)?;
    let f = Arc::new(Faults::new());
    f.fail_writes(r);
    Some(f)
}

/// The range of a `VAR=PATH@START-END` failpoint when PATH is `name`.
#[cfg(feature = "failpoints")]
fn failpoint_range(var: &str, name: &str) -> Option<Range<u64>> {
    let v = std::env::var(var).ok()?;
    let (path, range) = v.rsplit_once('@')?;
    let (a, b) = range.split_once('-')?;
    let (a, b) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
    (path == name && a < b).then_some(a..b)
}

/// The `URAID_FAILPOINT_FAIL_READS=PATH@START-END` failpoint (end-to-end
/// tests of read errors repaired from redundancy): the member opened as
/// `PATH` fails every read that touches absolute member bytes
/// `[START, END)` with EIO until they are written (a drive remapping a
/// pending sector: [`Faults::remap_on_write`]). Only with the
/// `failpoints` feature.
#[cfg(feature = "failpoints")]
fn fail_reads_failpoint(name: &str, faults: Option<Arc<Faults>>) -> Option<Arc<Faults>> {
    let r = failpoint_range("URAID_FAILPOINT_FAIL_READS", name)?;
    let f = faults.unwrap_or_else(|| Arc::new(Faults::new()));
    f.fail_reads(r);
    f.remap_on_write();
    Some(f)
}

/// The `URAID_FAILPOINT_NO_DISCARD=PATH[,PATH...]` failpoint (end-to-end
/// tests of members without discard): the members opened as one of the
/// PATHs fail every discard and zeroing fallocate(2) with EOPNOTSUPP, as a
/// drive without deallocate or a file on a filesystem without hole punching
/// does. Only with the `failpoints` feature.
#[cfg(feature = "failpoints")]
fn no_discard_failpoint(name: &str, faults: Option<Arc<Faults>>) -> Option<Arc<Faults>> {
    let v = std::env::var("URAID_FAILPOINT_NO_DISCARD").ok()?;
    if !v.split(',').any(|p| p == name) {
        return None;
    }
    let f = faults.unwrap_or_else(|| Arc::new(Faults::new()));
    f.refuse_fallocate();
    Some(f)
}

/// The `URAID_FAILPOINT_RESHAPE_CRASH=WINDOW:STAGE` failpoint (end-to-end
/// crash tests of `uraid grow`): the process aborts (as SIGKILL would end
/// it: nothing more is written) when the reshape reaches `STAGE` of its
/// window number `WINDOW` (0-based, counted in this run): `backed-up` (the
/// window is in the backup area and the superblocks say so, nothing written
/// in place yet), `half` (the first half of the window written in place),
/// `written` (all of it written and flushed, the position not yet
/// recorded). Only with the `failpoints` feature; otherwise it does nothing.
pub fn reshape_crash_point(window: u64, stage: &str) {
    #[cfg(feature = "failpoints")]
    if std::env::var("URAID_FAILPOINT_RESHAPE_CRASH").is_ok_and(|v| v == format!("{window}:{stage}")) {
        eprintln!("uraid: failpoint: the reshape crashes in window {window} at {stage}");
        power_cut_failpoint(window);
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = (window, stage);
}

/// The members under the `URAID_FAILPOINT_VOLATILE` failpoint: each
/// one's fault plan (a volatile drive cache) and the name it was opened as.
#[cfg(feature = "failpoints")]
static VOLATILE: std::sync::Mutex<Vec<(Arc<Faults>, String)>> = std::sync::Mutex::new(Vec::new());

/// The `URAID_FAILPOINT_VOLATILE=SEED` failpoint (power-cut tests of the
/// crash failpoints): every member opened as part of an array gets a
/// volatile drive cache ([`Faults::volatile_cache`]), and when a crash
/// failpoint fires the power goes first: each member loses a random subset
/// (drawn from SEED and `window`) of its writes not yet flushed
/// ([`Faults::power_cut`]). Only with the `failpoints` feature.
#[cfg(feature = "failpoints")]
fn power_cut_failpoint(window: u64) {
    let Some(seed) = std::env::var("URAID_FAILPOINT_VOLATILE").ok().and_then(|v| v.parse::<u64>().ok()) else { return };
    let members = std::mem::take(&mut *VOLATILE.lock().unwrap_or_else(|e| e.into_inner()));
    let mut lost = 0;
    for (i, (f, name)) in members.iter().enumerate() {
        let Ok(spec) = name.parse::<crate::io::member::MemberSpec>() else { continue };
        let Ok(m) = Member::open(&spec, crate::io::member::OpenMode { write: true, exclusive: false }) else { continue };
        lost += f.power_cut(&m, seed ^ window.wrapping_mul(0x9E37_79B9) ^ i as u64).unwrap_or(0);
    }
    eprintln!("uraid: failpoint: power cut: {lost} write(s) not yet flushed lost");
}

/// Stacks the fault plans the `URAID_FAILPOINT_*` variables ask for over
/// a member just opened as part of an array (the control path calls this;
/// see the failpoints above). Without the `failpoints` feature it does
/// nothing.
pub fn failpoints(m: &mut Member) {
    #[cfg(feature = "failpoints")]
    {
        if let Some(f) = fail_writes_failpoint(m.name()) {
            f.attach(m);
        }
        let existing = Faults::of(m);
        if let Some(f) = fail_reads_failpoint(m.name(), existing.clone()) {
            if existing.is_none() {
                f.attach(m);
            }
        }
        let existing = Faults::of(m);
        if let Some(f) = no_discard_failpoint(m.name(), existing.clone()) {
            if existing.is_none() {
                f.attach(m);
            }
        }
        if std::env::var_os("URAID_FAILPOINT_VOLATILE").is_some() {
            let f = Faults::of(m).unwrap_or_else(|| {
                let f = Arc::new(Faults::new());
                f.attach(m);
                f
            });
            f.volatile_cache();
            VOLATILE.lock().unwrap_or_else(|e| e.into_inner()).push((f, m.name().to_string()));
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = m;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_flush_that_goes_through_makes_writes_durable() {
        let f = Faults::new();
        f.volatile_cache();
        f.log_write(0, vec![0; 4096]);
        assert_eq!(f.intercept(Op::Flush, 0, 0), Verdict::Pass);
        assert_eq!(f.unflushed(), 0, "a flush that went through");
        f.log_write(4096, vec![0; 4096]);
        f.vanish();
        assert_eq!(f.intercept(Op::Flush, 0, 0), Verdict::Fail(libc::ENXIO));
        assert_eq!(f.unflushed(), 1, "a failed flush made a write durable");
    }

    #[test]
    fn verdicts() {
        let f = Faults::new();
        assert_eq!(f.intercept(Op::Read, 0, 4096), Verdict::Pass);
        f.fail_reads(8192..12288);
        assert_eq!(f.intercept(Op::Read, 4096, 4096), Verdict::Pass);
        assert_eq!(f.intercept(Op::Read, 4096, 8192), Verdict::Fail(libc::EIO));
        assert_eq!(f.intercept(Op::Write, 8192, 4096), Verdict::Pass);
        f.tear_next_write(0..4096);
        assert_eq!(f.intercept(Op::Write, 0, 8192), Verdict::Tear(4096));
        assert_eq!(f.intercept(Op::Write, 0, 8192), Verdict::Pass);
        f.vanish();
        assert_eq!(f.intercept(Op::Flush, 0, 0), Verdict::Fail(libc::ENXIO));
        assert_eq!(f.injected(), 3);
        f.heal();
        assert_eq!(f.intercept(Op::Read, 8192, 1), Verdict::Pass);
    }
}
