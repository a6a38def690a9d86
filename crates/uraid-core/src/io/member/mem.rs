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

/// The service model of an emulated drive: one queue, served in order,
/// where each I/O takes `max(1/iops, bytes/bw)` of drive time, plus a fixed
/// pipelined latency. Shared by every engine thread that uses the member.
#[derive(Debug)]
pub struct Throttle {
    ns_per_io: u64,
    bw: u64,
    lat_ns: u64,
    next_free_ns: AtomicU64,
    /// A model that draws each I/O's latency instead of the one above (a
    /// simulated drive's: [`crate::io::sim`]).
    drawn: Option<Arc<dyn Latency>>,
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
            ns_per_io: 1_000_000_000u64.checked_div(limits.iops).unwrap_or(0),
            bw: limits.bw,
            lat_ns: limits.lat_us * 1000,
            next_free_ns: AtomicU64::new(0),
            drawn: None,
        }
    }

    /// A model whose every I/O takes the latency `model` draws for it
    /// (pipelined: no drive time is consumed).
    pub fn drawn(model: Arc<dyn Latency>) -> Throttle {
        Throttle { drawn: Some(model), ..Throttle::new(Limits::default()) }
    }

    /// Admits an I/O of `bytes` issued at `now` (ns, [`now_ns`](super::now_ns)) and returns
    /// the time its completion may be delivered.
    pub fn admit(&self, bytes: u64, now: u64) -> u64 {
        if let Some(d) = &self.drawn {
            return now + d.latency_ns(bytes);
        }
        let xfer = if self.bw > 0 { (bytes as u128 * 1_000_000_000 / self.bw as u128) as u64 } else { 0 };
        let service = self.ns_per_io.max(xfer);
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let start = cur.max(now);
            let end = start + service;
            debug_assert!(end >= now, "a completion delivered before its I/O was issued");
            match self.next_free_ns.compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return end + self.lat_ns,
                Err(c) => cur = c,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_serialises_service_time() {
        let t = Throttle::new(Limits { bw: 0, iops: 1000, lat_us: 5 });
        // 1 ms per I/O: three I/Os issued at once finish 1, 2 and 3 ms later (+5 µs).
        assert_eq!(t.admit(4096, 0), 1_005_000);
        assert_eq!(t.admit(4096, 0), 2_005_000);
        assert_eq!(t.admit(4096, 0), 3_005_000);
        // An idle drive starts at `now`.
        assert_eq!(t.admit(4096, 10_000_000), 11_005_000);
        let b = Throttle::new(Limits { bw: 1_000_000, iops: 0, lat_us: 0 });
        assert_eq!(b.admit(1000, 0), 1_000_000);
    }
}
