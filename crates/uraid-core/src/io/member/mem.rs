//! The `mem:` kind: an emulated drive in RAM (a memfd) and the service
//! model of its ceilings ([`Throttle`]), which holds a completion back
//! until the emulated drive would have finished it (in the spirit of
//! Linux null_blk).

use std::fs::File;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Limits, MemSpec, Member, MemberKind, MemberSpec};
use crate::{Error, Result};

impl Member {
    pub(super) fn open_mem(m: &MemSpec) -> Result<Member> {
        let name = MemberSpec::Mem(*m).to_string();
        // SAFETY: memfd_create with a valid NUL-terminated name; the fd is
        // checked and then owned by the File.
        let fd = unsafe { libc::memfd_create(c"uraid-mem".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io("cannot create emulated drive", Path::new(&name), std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(m.size).map_err(|e| Error::io("cannot size emulated drive", Path::new(&name), e))?;
        let throttle = (!m.limits.is_none()).then(|| Arc::new(Throttle::new(m.limits)));
        Ok(Member { name, file, kind: MemberKind::Mem, size: m.size, direct: false, block_size: 512, throttle, filters: Vec::new(), no_fallocate: Default::default(), limits: None, no_discard: Default::default(), held: None })
    }

    /// Adds emulated ceilings to this member (used by `uraid demo --dir` to
    /// make sparse files behave like the emulated drives).
    pub fn set_limits(&mut self, limits: Limits) {
        self.throttle = (!limits.is_none()).then(|| Arc::new(Throttle::new(limits)));
    }

    /// Puts the member under the service model `t` (a simulated drive's:
    /// [`Throttle::drawn`]).
    pub fn set_throttle(&mut self, t: Arc<Throttle>) {
        self.throttle = Some(t);
    }
}

/// The service model of an emulated drive: queues served in order, where
/// each I/O takes `max(1/iops, bytes/bw)` of a queue's time, plus a fixed
/// pipelined latency. The shared queue (`iops=`, `bw=`) serves reads and
/// writes alike, as a real drive's one budget does; the read queue
/// (`riops=`, `rbw=`) and the write queue (`wiops=`, `wbw=`) serve one
/// direction each, as cgroup v1 blkio throttles do (the testbed's drives).
/// An I/O passes every queue that applies to it and completes when the
/// last of them is done with it. Shared by every engine thread that uses
/// the member.
#[derive(Debug)]
pub struct Throttle {
    shared: Budget,
    read: Budget,
    write: Budget,
    lat_ns: u64,
    /// A model that draws each I/O's latency instead of the one above (a
    /// simulated drive's: [`crate::io::sim`]).
    drawn: Option<Arc<dyn Latency>>,
}

/// One queue of an emulated drive: its ceilings and when it is next free.
#[derive(Debug)]
struct Budget {
    /// Drive time per I/O (ns; 0: no IOPS ceiling).
    ns_per_io: u64,
    /// Bytes per second (0: no bandwidth ceiling).
    bw: u64,
    /// When the queue is done with what it was given (ns).
    next_free_ns: AtomicU64,
}

impl Budget {
    fn new(iops: u64, bw: u64) -> Budget {
        Budget { ns_per_io: 1_000_000_000u64.checked_div(iops).unwrap_or(0), bw, next_free_ns: AtomicU64::new(0) }
    }

    /// When the queue is done with an I/O of `bytes` issued at `now` (ns);
    /// `now` itself for a queue without ceilings.
    fn admit(&self, bytes: u64, now: u64) -> u64 {
        let xfer = if self.bw > 0 { (bytes as u128 * 1_000_000_000 / self.bw as u128) as u64 } else { 0 };
        let service = self.ns_per_io.max(xfer);
        if service == 0 {
            return now;
        }
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let start = cur.max(now);
            let end = start + service;
            match self.next_free_ns.compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return end,
                Err(c) => cur = c,
            }
        }
    }
}

/// Where an emulated drive's latency comes from when a model draws it per
/// I/O ([`Throttle::drawn`]): a simulated drive's seeded one.
pub trait Latency: Send + Sync + std::fmt::Debug {
    /// The latency of the next I/O of `bytes`, in ns.
    fn latency_ns(&self, bytes: u64) -> u64;
}

impl Throttle {
    /// A model with `limits`.
    pub fn new(limits: Limits) -> Throttle {
        Throttle {
            shared: Budget::new(limits.iops, limits.bw),
            read: Budget::new(limits.riops, limits.rbw),
            write: Budget::new(limits.wiops, limits.wbw),
            lat_ns: limits.lat_us * 1000,
            drawn: None,
        }
    }

    /// A model whose every I/O takes the latency `model` draws for it
    /// (pipelined: no drive time is consumed).
    pub fn drawn(model: Arc<dyn Latency>) -> Throttle {
        Throttle { drawn: Some(model), ..Throttle::new(Limits::default()) }
    }

    /// Admits an I/O of `bytes` (a write, or anything that changes the
    /// drive, when `write`; a read otherwise) issued at `now` (ns,
    /// [`now_ns`](super::now_ns)) and returns the time (ns) its completion
    /// may be delivered.
    pub fn admit(&self, write: bool, bytes: u64, now: u64) -> u64 {
        if let Some(d) = &self.drawn {
            return now + d.latency_ns(bytes);
        }
        let dir = if write { &self.write } else { &self.read };
        let end = self.shared.admit(bytes, now).max(dir.admit(bytes, now));
        debug_assert!(end >= now, "a completion delivered before its I/O was issued");
        end + self.lat_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_serialises_service_time() {
        let t = Throttle::new(Limits { iops: 1000, lat_us: 5, ..Limits::default() });
        // 1 ms per I/O: three I/Os issued at once finish 1, 2 and 3 ms later (+5 µs).
        assert_eq!(t.admit(false, 4096, 0), 1_005_000);
        assert_eq!(t.admit(true, 4096, 0), 2_005_000);
        assert_eq!(t.admit(false, 4096, 0), 3_005_000);
        // An idle drive starts at `now`.
        assert_eq!(t.admit(true, 4096, 10_000_000), 11_005_000);
        let b = Throttle::new(Limits { bw: 1_000_000, ..Limits::default() });
        assert_eq!(b.admit(false, 1000, 0), 1_000_000);
    }

    #[test]
    fn shared_budget_serves_reads_and_writes_in_one_queue() {
        // iops=1000: a read and a write issued at once take 1 ms each of
        // the same queue (a real drive's one budget).
        let shared = Throttle::new(Limits { iops: 1000, ..Limits::default() });
        assert_eq!(shared.admit(false, 4096, 0), 1_000_000);
        assert_eq!(shared.admit(true, 4096, 0), 2_000_000);
        // riops=1000,wiops=1000: each direction has its own queue (cgroup
        // v1 blkio), so the write does not wait for the read.
        let split = Throttle::new(Limits { riops: 1000, wiops: 1000, ..Limits::default() });
        assert_eq!(split.admit(false, 4096, 0), 1_000_000);
        assert_eq!(split.admit(true, 4096, 0), 1_000_000);
        assert_eq!(split.admit(true, 4096, 0), 2_000_000);
        assert_eq!(split.admit(false, 4096, 0), 2_000_000);
        // Per direction under a total: the slower queue decides.
        let both = Throttle::new(Limits { iops: 1000, wiops: 500, ..Limits::default() });
        assert_eq!(both.admit(true, 4096, 0), 2_000_000);
        assert_eq!(both.admit(false, 4096, 0), 2_000_000);
        assert_eq!(both.admit(true, 4096, 0), 4_000_000);
        // Bandwidth per direction: 1 MB/s of reads, writes free.
        let rbw = Throttle::new(Limits { rbw: 1_000_000, ..Limits::default() });
        assert_eq!(rbw.admit(false, 1000, 0), 1_000_000);
        assert_eq!(rbw.admit(true, 1000, 0), 0);
    }
}
