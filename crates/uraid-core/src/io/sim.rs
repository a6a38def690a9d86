//! A simulated member drive, for simulation tests (FoundationDB's
//! simulated disks, TigerBeetle's VOPR storage): an emulated `mem:` drive
//! whose behaviour a seed decides.
//!
//! [`SimDrive::open`] gives a [`Member`] (RAM, a memfd, as `mem:`) with a
//! [`SimDrive`] stacked over it as a [`Filter`] and as its service model
//! ([`Throttle::drawn`]):
//!
//! - latency: each I/O's completion is held back by a latency drawn from
//!   the seed ([`SimConfig::lat_min_ns`] to [`SimConfig::lat_max_ns`], one
//!   I/O in 32 up to ten times longer), on the clock of the thread that
//!   runs it ([`crate::clock`]: on a virtual clock no real time passes),
//!   so completions come back out of order;
//! - I/O errors: each I/O fails with EIO with a set probability
//!   ([`SimDrive::set_error_rate`]), or every I/O fails with ENXIO once
//!   the drive [`dies`](SimDrive::die);
//! - a volatile write cache: every write (and zeroing or discard) that is
//!   neither FUA nor synced by its caller is remembered until a flush
//!   reaches the drive; [`SimDrive::crash`] is the power going: each such
//!   write, newest first, is kept, lost, or torn (each of its 512-byte
//!   sectors kept or lost on its own), and what survives is what the
//!   member then holds. A sector a later write made durable (FUA, or a
//!   kept write) is never brought back to older bytes.
//! - the power going while I/Os are in flight: [`SimDrive::power_off`]
//!   stops the drive at once (every I/O from then on fails with EIO and
//!   changes nothing, as the host dying would leave it), so that a
//!   request the layers above had half sent (some member writes done,
//!   others not) stays half done; [`SimDrive::crash`] then settles the
//!   volatile cache and the power comes back.
//!
//! The seed decides every draw; the order of the draws is that of the
//! I/Os, so a simulation whose layers run on one thread replays exactly.

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::io::member::{
    Filter, Latency, MemSpec, Member, MemberSpec, OpenMode, Throttle, Verdict,
};
use crate::io::request::{Op, SECTOR};
use crate::{Error, Result};

/// What a simulated drive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Capacity in bytes (at least 2 MiB, as a `mem:` drive).
    pub size: u64,
    /// The seed of every draw.
    pub seed: u64,
    /// Shortest latency of an I/O, in ns.
    pub lat_min_ns: u64,
    /// Longest usual latency of an I/O, in ns (one I/O in 32 takes up to
    /// ten times this).
    pub lat_max_ns: u64,
}

impl SimConfig {
    /// A drive of `size` bytes drawing from `seed`, with latencies from 2
    /// to 200 µs.
    pub fn new(size: u64, seed: u64) -> SimConfig {
        SimConfig {
            size,
            seed,
            lat_min_ns: 2_000,
            lat_max_ns: 200_000,
        }
    }
}

/// One write the volatile cache holds, or one it made durable.
#[derive(Debug)]
enum Logged {
    /// Not durable yet: (absolute byte offset, the bytes it covered
    /// before).
    Volatile(u64, Vec<u8>),
    /// Durable when done (FUA or synced): (offset, length) in bytes.
    Durable(u64, u64),
}

/// What a [`SimDrive::crash`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Crashed {
    /// Writes not yet flushed when the power went.
    pub unflushed: usize,
    /// Of them, those lost whole, and those torn (some sectors lost).
    pub lost: usize,
    /// See `lost`.
    pub torn: usize,
    /// 512-byte sectors brought back to older bytes.
    pub sectors_lost: u64,
}

/// A simulated drive: the [`Filter`] and latency model over one member
/// (see the module's doc). Shared by every handle of that member.
#[derive(Debug)]
pub struct SimDrive {
    cfg: SimConfig,
    /// The latency stream's state (splitmix64).
    lat: AtomicU64,
    /// The error stream's state.
    err: AtomicU64,
    /// Probability of an I/O failing with EIO, in parts per million.
    error_ppm: AtomicU64,
    dead: AtomicBool,
    /// The power is off ([`SimDrive::power_off`]) until the next crash.
    off: AtomicBool,
    /// The volatile cache: writes since the last flush, oldest first.
    log: Mutex<Vec<Logged>>,
    ios: AtomicU64,
    errors: AtomicU64,
    flushes: AtomicU64,
}

/// splitmix64: the next value of the stream whose state is `s`.
fn next(s: &AtomicU64) -> u64 {
    let mut z = s
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SimDrive {
    /// A simulated drive as `cfg` says and the member over it (a handle;
    /// its clones share the drive). Errors: `InvalidInput` for a size
    /// under 2 MiB or latencies out of order; `Io` when the memory cannot
    /// be had.
    pub fn open(cfg: SimConfig) -> Result<(Arc<SimDrive>, Member)> {
        if cfg.size < 2 << 20 {
            return Err(Error::new(
                crate::ErrorKind::InvalidInput,
                format!(
                    "a simulated drive of {} bytes is too small; give at least 2 MiB",
                    cfg.size
                ),
            ));
        }
        if cfg.lat_min_ns > cfg.lat_max_ns {
            return Err(Error::new(
                crate::ErrorKind::InvalidInput,
                format!(
                    "simulated latency from {} ns to {} ns: the shortest is above the longest",
                    cfg.lat_min_ns, cfg.lat_max_ns
                ),
            ));
        }
        let spec = MemberSpec::Mem(MemSpec {
            size: cfg.size,
            limits: Default::default(),
        });
        let mut m = Member::open(
            &spec,
            OpenMode {
                write: true,
                exclusive: false,
            },
        )?;
        let d = Arc::new(SimDrive {
            cfg,
            lat: AtomicU64::new(cfg.seed ^ 0x1a7e_0c11),
            err: AtomicU64::new(cfg.seed ^ 0xe220_5eed),
            error_ppm: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            off: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
            ios: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        });
        m.push_filter(d.clone());
        m.set_throttle(Arc::new(Throttle::drawn(d.clone())));
        Ok((d, m))
    }

    /// The drive's configuration.
    pub fn config(&self) -> SimConfig {
        self.cfg
    }

    /// The latency of the next I/O, in ns (see the module's doc): drawn
    /// uniformly between the configured bounds, one I/O in 32 up to ten
    /// times the longest.
    pub fn next_latency_ns(&self) -> u64 {
        let r = next(&self.lat);
        let span = self.cfg.lat_max_ns - self.cfg.lat_min_ns + 1;
        let base = self.cfg.lat_min_ns + (r >> 8) % span;
        if r & 31 == 0 {
            base + (r >> 40) % (9 * self.cfg.lat_max_ns + 1)
        } else {
            base
        }
    }

    /// From now on each I/O fails with EIO with probability `ppm` in a
    /// million (0: none fails).
    pub fn set_error_rate(&self, ppm: u64) {
        self.error_ppm.store(ppm.min(1_000_000), Ordering::Release);
    }

    /// The drive is gone: every I/O fails with ENXIO from now on.
    pub fn die(&self) {
        self.dead.store(true, Ordering::Release);
    }

    /// The power goes off now, with I/Os in flight: from now on every I/O
    /// fails with EIO and leaves the drive as it is (no write lands), until
    /// [`crash`](Self::crash) settles the volatile cache and brings the
    /// power back. What was sent before lands as sent (in the volatile
    /// cache, for the crash to keep, lose or tear).
    pub fn power_off(&self) {
        self.off.store(true, Ordering::Release);
    }

    /// True between [`power_off`](Self::power_off) and the next
    /// [`crash`](Self::crash).
    pub fn is_off(&self) -> bool {
        self.off.load(Ordering::Acquire)
    }

    /// True once [`die`](Self::die) was called.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// I/Os the drive was asked for, failed with an error, and flushes
    /// among them.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.ios.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.flushes.load(Ordering::Relaxed),
        )
    }

    /// A flush reached the drive past the filter (a caller's fdatasync,
    /// which the filter does not see: the write-intent bitmap's before it
    /// clears bits): everything written before is durable.
    pub fn synced(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Writes in the volatile cache (not flushed yet).
    pub fn unflushed(&self) -> usize {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|l| matches!(l, Logged::Volatile(..)))
            .count()
    }

    /// The power goes: each write not flushed, newest first, is kept,
    /// lost or torn at 512-byte sectors (drawn from `seed`; see the
    /// module's doc), by putting the bytes it covered back on `m` (a
    /// handle of this drive) where it is lost. Returns what was lost; `m`
    /// then holds the surviving image, the cache is empty, and the power
    /// is on again (see [`power_off`](Self::power_off)). Nothing else may
    /// use the drive meanwhile. Errors: `Io` from the rewrite.
    pub fn crash(&self, m: &Member, seed: u64) -> Result<Crashed> {
        let log = std::mem::take(&mut *self.log.lock().unwrap_or_else(|e| e.into_inner()));
        self.off.store(false, Ordering::Release);
        let rng = AtomicU64::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ self.cfg.seed);
        // Sectors whose bytes are settled: a newer write that survived.
        let mut settled = std::collections::HashSet::new();
        let mut out = Crashed::default();
        for l in log.iter().rev() {
            let (off, old) = match l {
                Logged::Durable(off, len) => {
                    settled.extend(off / SECTOR..(off + len).div_ceil(SECTOR));
                    continue;
                }
                Logged::Volatile(off, old) => (*off, old),
            };
            out.unflushed += 1;
            // 0: kept, 1: lost, 2: torn.
            let fate = next(&rng) % 3;
            let mut lost_any = false;
            let mut kept_any = false;
            for (i, bytes) in old.chunks(SECTOR as usize).enumerate() {
                let s = off / SECTOR + i as u64;
                if settled.contains(&s) {
                    continue;
                }
                let kept = match fate {
                    0 => true,
                    1 => false,
                    _ => next(&rng) & 1 == 1,
                };
                if kept {
                    settled.insert(s);
                    kept_any = true;
                } else {
                    let at = off + i as u64 * SECTOR;
                    m.file().write_all_at(bytes, at).map_err(|e| {
                        Error::io("cannot undo a write on", std::path::Path::new(m.name()), e)
                    })?;
                    out.sectors_lost += 1;
                    lost_any = true;
                }
            }
            match (lost_any, kept_any) {
                (true, false) => out.lost += 1,
                (true, true) => out.torn += 1,
                _ => {}
            }
        }
        Ok(out)
    }
}

impl Latency for SimDrive {
    fn latency_ns(&self, _bytes: u64) -> u64 {
        self.next_latency_ns()
    }
}

impl Filter for SimDrive {
    fn before(&self, member: &Member, op: Op, offset: u64, len: u64, durable: bool) -> Verdict {
        self.ios.fetch_add(1, Ordering::Relaxed);
        if self.is_dead() {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(libc::ENXIO);
        }
        if self.is_off() {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(libc::EIO);
        }
        let ppm = self.error_ppm.load(Ordering::Acquire);
        if ppm > 0 && next(&self.err) % 1_000_000 < ppm {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(libc::EIO);
        }
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        match op {
            Op::Flush => {
                // Counted when sent: what was written before is durable.
                self.flushes.fetch_add(1, Ordering::Relaxed);
                log.clear();
            }
            Op::Write | Op::Discard | Op::WriteZeroes { .. } if len > 0 => {
                if durable {
                    if !log.is_empty() {
                        log.push(Logged::Durable(offset, len));
                    }
                } else {
                    let mut old = vec![0u8; len as usize];
                    if member.file().read_exact_at(&mut old, offset).is_ok() {
                        log.push(Logged::Volatile(offset, old));
                    }
                }
            }
            _ => {}
        }
        Verdict::Pass
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(seed: u64) -> (Arc<SimDrive>, Member) {
        SimDrive::open(SimConfig::new(4 << 20, seed)).unwrap()
    }

    #[test]
    fn latencies_come_from_the_seed_within_bounds() {
        let (a, _) = drive(7);
        let (b, _) = drive(7);
        let (c, _) = drive(8);
        let la: Vec<u64> = (0..1000).map(|_| a.next_latency_ns()).collect();
        let lb: Vec<u64> = (0..1000).map(|_| b.next_latency_ns()).collect();
        let lc: Vec<u64> = (0..1000).map(|_| c.next_latency_ns()).collect();
        assert_eq!(la, lb);
        assert_ne!(la, lc);
        let cfg = a.config();
        assert!(la
            .iter()
            .all(|&l| l >= cfg.lat_min_ns && l <= 10 * cfg.lat_max_ns + cfg.lat_max_ns));
        assert!(
            la.iter().any(|&l| l > cfg.lat_max_ns),
            "no long tail in 1000 draws"
        );
        // The engine sees them as deadlines.
        let t = Throttle::drawn(a.clone());
        let d = t.admit(false, 4096, 1_000);
        assert!(d > 1_000 + cfg.lat_min_ns - 1);
    }

    #[test]
    fn errors_come_at_the_rate_set_and_a_dead_drive_fails_everything() {
        let (d, m) = drive(1);
        assert_eq!(m.filter_verdict(Op::Read, 0, 4096, false), Verdict::Pass);
        d.set_error_rate(250_000);
        let fails = (0..4000)
            .filter(|_| m.filter_verdict(Op::Read, 0, 4096, false) != Verdict::Pass)
            .count();
        assert!(
            (800..1200).contains(&fails),
            "{fails} of 4000 failed at 25%"
        );
        d.set_error_rate(0);
        d.die();
        assert_eq!(
            m.filter_verdict(Op::Flush, 0, 0, false),
            Verdict::Fail(libc::ENXIO)
        );
        let mut buf = vec![0u8; 512];
        assert!(m.read_exact_at(&mut buf, 0).is_err());
    }

    /// Writes through the filter as the engine does them: verdict, then
    /// the bytes.
    fn write(m: &Member, off: u64, fill: u8, len: usize, durable: bool) {
        assert_eq!(
            m.filter_verdict(Op::Write, off, len as u64, durable),
            Verdict::Pass
        );
        m.file().write_all_at(&vec![fill; len], off).unwrap();
    }

    fn sectors(m: &Member, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n * 512];
        m.file().read_exact_at(&mut b, off).unwrap();
        b.chunks(512)
            .map(|s| {
                assert!(
                    s.iter().all(|&x| x == s[0]),
                    "a sector holds two writes' bytes"
                );
                s[0]
            })
            .collect()
    }

    #[test]
    fn a_crash_loses_or_tears_only_unflushed_writes_by_sector() {
        let mut torn = 0;
        let mut lost = 0;
        for seed in 0..64 {
            let (d, m) = drive(seed);
            write(&m, 0, 1, 8192, false);
            assert_eq!(m.filter_verdict(Op::Flush, 0, 0, false), Verdict::Pass);
            write(&m, 0, 2, 8192, false);
            write(&m, 4096, 3, 8192, false);
            // A FUA write over part of both: never undone.
            write(&m, 2048, 4, 1024, true);
            assert_eq!(d.unflushed(), 2);
            let c = d.crash(&m, seed).unwrap();
            assert_eq!(d.unflushed(), 0);
            assert_eq!(c.unflushed, 2);
            torn += c.torn;
            lost += c.lost;
            let s = sectors(&m, 0, 24);
            for (i, &v) in s.iter().enumerate() {
                let ok: &[u8] = match i {
                    4 | 5 => &[4],
                    0..=7 => &[1, 2],
                    8..=15 => &[1, 2, 3],
                    16..=23 => &[0, 3],
                    _ => unreachable!(),
                };
                assert!(
                    ok.contains(&v),
                    "seed {seed}: sector {i} holds {v}, not one of {ok:?}"
                );
            }
        }
        assert!(
            torn > 0 && lost > 0,
            "torn {torn}, lost {lost} in 64 crashes"
        );
    }

    #[test]
    fn a_drive_without_power_takes_no_write_until_the_crash_brings_it_back() {
        let (d, m) = drive(3);
        write(&m, 0, 1, 4096, true);
        d.power_off();
        assert!(d.is_off());
        // Nothing lands, durable or not, blocking or not.
        for durable in [false, true] {
            assert_eq!(
                m.filter_verdict(Op::Write, 0, 4096, durable),
                Verdict::Fail(libc::EIO)
            );
        }
        assert!(m.write_all_at(&[2u8; 4096], 0).is_err());
        assert_eq!(sectors(&m, 0, 8), vec![1; 8]);
        d.crash(&m, 1).unwrap();
        assert!(!d.is_off() && !d.is_dead());
        write(&m, 0, 3, 4096, true);
        assert_eq!(sectors(&m, 0, 8), vec![3; 8]);
    }
}
