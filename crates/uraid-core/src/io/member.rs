//! Members: the drives an array is made of.
//!
//! Three kinds share one type: a regular file, a block device (both opened
//! with O_DIRECT, falling back to buffered I/O where the filesystem refuses
//! it) and `mem:` — an emulated drive in RAM (a memfd) with optional
//! bandwidth, IOPS and latency ceilings, in the spirit of Linux null_blk.
//! Every kind is a real file descriptor, so the engine drives all of them
//! through the same io_uring path; a ceiling is a [`Throttle`] that holds a
//! completion back until the emulated drive would have finished it.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};

use crate::io::request::Op;
use crate::units::{parse_rate, parse_size};
use crate::{bail, Error, ErrorKind, Result};

/// How a member was named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSpec {
    /// A regular file or a block device.
    Path(PathBuf),
    /// An emulated drive in RAM.
    Mem(MemSpec),
}

/// Parameters of an emulated `mem:` drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemSpec {
    /// Capacity in bytes.
    pub size: u64,
    /// Ceilings and latency; all zero means memory speed.
    pub limits: Limits,
}

/// Ceilings of an emulated drive (zero = no ceiling of that kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Bandwidth in bytes per second.
    pub bw: u64,
    /// I/O operations per second.
    pub iops: u64,
    /// Fixed latency added to every I/O, in µs (pipelined: it does not
    /// consume drive time, as on a real SSD with many dies).
    pub lat_us: u64,
}

impl Limits {
    /// True when no ceiling is set.
    pub fn is_none(&self) -> bool {
        self.bw == 0 && self.iops == 0 && self.lat_us == 0
    }
}

impl std::str::FromStr for MemberSpec {
    type Err = Error;

    /// Parses `PATH` or `mem:SIZE[,bw=BYTES_PER_S][,iops=N][,lat=US]`
    /// (SIZE in powers of 1024, bw and iops in powers of 1000).
    fn from_str(s: &str) -> Result<MemberSpec> {
        let Some(rest) = s.strip_prefix("mem:") else {
            if s.is_empty() {
                bail!(InvalidInput, "empty member name; give a file, a block device or mem:SIZE");
            }
            return Ok(MemberSpec::Path(PathBuf::from(s)));
        };
        let mut parts = rest.split(',');
        let size = parse_size(parts.next().unwrap_or(""), "mem: drive size")?;
        if size < 2 << 20 {
            bail!(InvalidInput, "mem: drive of {size} bytes is too small; give at least 2M, e.g. mem:1G");
        }
        let mut limits = Limits::default();
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                bail!(InvalidInput, "'{p}' in '{s}' is not KEY=VALUE; use bw=250M, iops=25000 or lat=20");
            };
            match k {
                "bw" => limits.bw = parse_rate(v, "bw")?,
                "iops" => limits.iops = parse_rate(v, "iops")?,
                "lat" => limits.lat_us = parse_rate(v, "lat")?,
                _ => bail!(InvalidInput, "unknown mem: option '{k}' in '{s}'; known: bw, iops, lat"),
            }
        }
        Ok(MemberSpec::Mem(MemSpec { size, limits }))
    }
}

impl std::fmt::Display for MemberSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberSpec::Path(p) => write!(f, "{}", p.display()),
            MemberSpec::Mem(m) => {
                write!(f, "mem:{}", crate::units::fmt_size(m.size))?;
                if m.limits.bw > 0 {
                    write!(f, ",bw={}", m.limits.bw)?;
                }
                if m.limits.iops > 0 {
                    write!(f, ",iops={}", m.limits.iops)?;
                }
                if m.limits.lat_us > 0 {
                    write!(f, ",lat={}", m.limits.lat_us)?;
                }
                Ok(())
            }
        }
    }
}

/// What kind of thing a member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum MemberKind {
    /// A regular file.
    File,
    /// A block device.
    BlockDevice,
    /// An emulated drive in RAM.
    Mem,
}

/// Identity of the object behind a path, to catch one drive named twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A file: (st_dev, st_ino).
    File(u64, u64),
    /// A block device: st_rdev.
    Device(u64),
    /// An emulated drive: unique per process.
    Mem(u64),
}

impl MemberSpec {
    /// What this spec names, without opening it. Errors: `Io` when the path
    /// does not exist or cannot be inspected.
    pub fn identity(&self) -> Result<Identity> {
        match self {
            MemberSpec::Path(p) => {
                let md = std::fs::metadata(p).map_err(|e| Error::io("cannot open member", p, e))?;
                if md.file_type().is_block_device() {
                    Ok(Identity::Device(md.rdev()))
                } else {
                    Ok(Identity::File(md.dev(), md.ino()))
                }
            }
            MemberSpec::Mem(_) => {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                Ok(Identity::Mem(NEXT.fetch_add(1, Ordering::Relaxed)))
            }
        }
    }
}

/// How to open a member.
#[derive(Debug, Clone, Copy)]
pub struct OpenMode {
    /// Open for writing too.
    pub write: bool,
    /// Take the member for this process alone: an exclusive `flock` on
    /// every kind, and O_EXCL on block devices (which the kernel also
    /// refuses while the device is mounted).
    pub exclusive: bool,
}

/// A filter stacked over a member, as nbdkit's filters stack over a
/// plugin (its `error` and `delay` filters) or SPDK's error-injection bdev
/// over a base bdev: every I/O to the member, from the engine's io_uring or
/// from the blocking helpers, is shown to it first, and it may let it
/// through, fail it, or let only part of a write land. Fault injection
/// ([`crate::io::fault::Faults`]) is one. A filter knows nothing of the
/// layers above the member.
pub trait Filter: Send + Sync + std::fmt::Debug {
    /// The verdict on `op` of `len` bytes at absolute member byte `offset`
    /// of `member`, before it is done. `durable`: a write (or zeroing)
    /// that is durable once done (FUA, or synced by its caller).
    fn before(&self, member: &Member, op: Op, offset: u64, len: u64, durable: bool) -> Verdict;
    /// The filter as `Any`, to find a filter of a given type on a member
    /// (see [`crate::io::fault::Faults::of`]).
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// What a [`Filter`] does with an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through.
    Pass,
    /// Fail it with this errno without doing it.
    Fail(i32),
    /// Do only the first `bytes` bytes of the write, then fail it with EIO.
    Tear(usize),
}

/// An open member.
#[derive(Debug)]
pub struct Member {
    name: String,
    file: File,
    kind: MemberKind,
    size: u64,
    direct: bool,
    block_size: u32,
    throttle: Option<Arc<Throttle>>,
    /// Filters stacked over the member ([`Filter`]), outermost last.
    filters: Vec<Arc<dyn Filter>>,
    /// Set once the member refused a discard or zeroing fallocate(2)
    /// (EOPNOTSUPP): from then on the engine writes zeros there instead
    /// (see [`Member::no_fallocate`]). Shared by every handle.
    no_fallocate: Arc<std::sync::atomic::AtomicBool>,
    /// A block device's discard and zeroing limits, read from sysfs when
    /// it was opened (`None` for files and `mem:` drives, or when sysfs
    /// does not say).
    limits: Option<QueueLimits>,
    /// Set once the block device refused a discard (EOPNOTSUPP) although
    /// its limits promised one (see [`Member::discards`]). Shared by
    /// every handle.
    no_discard: Arc<std::sync::atomic::AtomicBool>,
    /// The member's lock, when this handle (or the one it was cloned from)
    /// took it: shared by the clones, released from [`LIVE_LOCKS`] with
    /// the last of them.
    held: Option<Arc<HeldLock>>,
}

/// The members this process holds locked through a live handle, by (device,
/// inode), with how many locks each: so that a lock held by this process
/// with no live handle is known for one that goes once the kernel has torn
/// down the io_uring that keeps its file open (see `Member::lock`).
static LIVE_LOCKS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<(u64, u64), usize>>> =
    std::sync::LazyLock::new(Default::default);

/// A lock taken by this process on a member, counted in [`LIVE_LOCKS`]
/// until dropped.
#[derive(Debug)]
struct HeldLock((u64, u64));

impl HeldLock {
    fn new(key: (u64, u64)) -> HeldLock {
        *LIVE_LOCKS.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(0) += 1;
        HeldLock(key)
    }

    fn live(key: (u64, u64)) -> bool {
        LIVE_LOCKS.lock().unwrap_or_else(|e| e.into_inner()).get(&key).is_some_and(|&n| n > 0)
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let mut m = LIVE_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.0);
            }
        }
    }
}

static BUFFERED_WARNING: Once = Once::new();
/// Retries of 20 ms for a member that is busy (about two seconds: the lock
/// of a process that just died goes only when the kernel has torn down its
/// io_uring, which holds the member files, and that work is deferred).
const BUSY_RETRIES: u32 = 100;

/// How many 20 ms retries of a member's lock while its holder is a process
/// that has already exited (30 s): see `Member::lock`.
const EXITED_HOLDER_RETRIES: u32 = 1500;

/// Who holds the `flock` of the file (device, inode) `key`, as /proc/locks
/// names it: a process that has exited or is exiting (a zombie, or gone:
/// the lock is released as soon as the kernel drops its last file
/// reference), this process, or another one (or none can be named); or
/// none at all (`Gone`: released since the caller's try).
fn lock_holder((dev, ino): (u64, u64)) -> Holder {
    // /proc/locks prints MAJOR:MINOR in hex and the inode in decimal.
    let want = format!("{:02x}:{:02x}:{}", libc::major(dev), libc::minor(dev), ino);
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else { return Holder::Other };
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; blocked
        // waiters have a "->" field and are skipped.
        if f.len() < 6 || f[1] != "FLOCK" || f[5] != want {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else { return Holder::Other };
        if pid == 0 {
            return Holder::Other;
        }
        if pid == std::process::id() {
            return Holder::ThisProcess;
        }
        return match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name's closing parenthesis.
            Ok(stat) if matches!(stat.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next()), Some('Z' | 'X')) => Holder::Exited,
            Ok(_) => Holder::Other,
            Err(_) => Holder::Exited,
        };
    }
    Holder::Gone
}

/// Who holds a member's lock (see [`lock_holder`]).
enum Holder {
    /// A process that has exited or is exiting.
    Exited,
    /// This process.
    ThisProcess,
    /// Another process, or none could be named.
    Other,
    /// /proc/locks names no holder of the file's lock: it was just
    /// released (or the filesystem's device numbers differ there).
    Gone,
}

/// How many more tries of a member's lock when /proc/locks names no
/// holder right after the lock was refused ([`Holder::Gone`]).
const GONE_RETRIES: u32 = 5;

/// How many 20 ms retries of a member's lock while its holder is this very
/// process with no live handle on it (10 s): an array just dropped here
/// keeps its members' files open until the kernel has torn its io_uring
/// down, deferred work that a loaded machine can hold past two seconds (an
/// array assembled again at once, as the tests do, met it). A member this
/// process holds through a live handle is refused after the usual wait.
const OWN_HOLDER_RETRIES: u32 = 500;

impl Member {
    /// Opens the member named by `spec`.
    ///
    /// Errors: `Io` when it cannot be opened, `Busy` when another process
    /// holds it (`exclusive`), `InvalidInput` for something that is neither
    /// a regular file nor a block device.
    pub fn open(spec: &MemberSpec, mode: OpenMode) -> Result<Member> {
        let m = match spec {
            MemberSpec::Mem(m) => Self::open_mem(m),
            MemberSpec::Path(p) => Self::open_path(p, mode),
        }?;
        Ok(m)
    }

    fn open_mem(m: &MemSpec) -> Result<Member> {
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

    fn open_path(p: &Path, mode: OpenMode) -> Result<Member> {
        let md = std::fs::metadata(p).map_err(|e| Error::io("cannot open member", p, e))?;
        let ft = md.file_type();
        let kind = if ft.is_block_device() {
            MemberKind::BlockDevice
        } else if ft.is_file() {
            MemberKind::File
        } else {
            bail!(InvalidInput, "member {} is neither a regular file nor a block device", p.display());
        };
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(mode.write);
            let mut flags = libc::O_CLOEXEC;
            if direct {
                flags |= libc::O_DIRECT;
            }
            if mode.exclusive && kind == MemberKind::BlockDevice {
                flags |= libc::O_EXCL;
            }
            o.custom_flags(flags).open(p)
        };
        // A process that just exited may still hold the device for a few
        // milliseconds while the kernel tears its io_uring down: retry a
        // busy device briefly before calling it in use.
        let open = |direct: bool| {
            let mut tries = 0;
            loop {
                match open(direct) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < BUSY_RETRIES => {
                        tries += 1;
                        crate::clock::sleep(std::time::Duration::from_millis(20));
                    }
                    r => return r,
                }
            }
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                BUFFERED_WARNING.call_once(|| {
                    eprintln!(
                        "uraid: warning: the filesystem of {} refuses O_DIRECT; using buffered I/O \
                         with fdatasync on flush (figures include the page cache)",
                        p.display()
                    )
                });
                (open(false).map_err(|e| Error::io("cannot open member", p, e))?, false)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => bail!(
                Busy,
                "member {} is in use (mounted, or held by another uraid process or an md/dm \
                 device); unmount it or stop that process first",
                p.display()
            ),
            Err(e) => return Err(Error::io("cannot open member", p, e)),
        };
        let (size, block_size) = if kind == MemberKind::BlockDevice {
            block_device_geometry(&file, p)?
        } else {
            (md.len(), if direct { file_dio_align(&file) } else { 512 })
        };
        let limits = (kind == MemberKind::BlockDevice).then(|| QueueLimits::of_device(md.rdev())).flatten();
        let mut m = Member {
            name: p.display().to_string(),
            file,
            kind,
            size,
            direct,
            block_size,
            throttle: None,
            filters: Vec::new(),
            no_fallocate: Default::default(),
            limits,
            no_discard: Default::default(),
            held: None,
        };
        if mode.exclusive {
            m.lock()?;
        }
        Ok(m)
    }

    fn lock(&mut self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        // (device, inode): what /proc/locks names and LIVE_LOCKS counts.
        let key = self.file.metadata().ok().map(|md| (md.dev(), md.ino()));
        let mut tries = 0;
        let mut gone = 0;
        loop {
            // SAFETY: flock on a valid open descriptor.
            let r = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                self.held = key.map(|k| Arc::new(HeldLock::new(k)));
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            let busy = e.raw_os_error() == Some(libc::EWOULDBLOCK);
            let mut longer = || match key.map(lock_holder) {
                Some(Holder::Exited) => tries < EXITED_HOLDER_RETRIES,
                Some(Holder::ThisProcess) => tries < OWN_HOLDER_RETRIES && key.is_some_and(|k| !HeldLock::live(k)),
                // Released between the flock above and the look at
                // /proc/locks: the next try takes it. (A few times only:
                // a filesystem whose device /proc/locks names otherwise,
                // as btrfs subvolumes, never shows the holder.)
                Some(Holder::Gone) => {
                    gone += 1;
                    gone <= GONE_RETRIES
                }
                _ => false,
            };
            if busy && (tries < BUSY_RETRIES || longer()) {
                // See the retry in open_path: the holder may be exiting.
                // While /proc/locks names a holder that has already exited
                // (its io_uring keeps the file open until the kernel's exit
                // work ends, which can take seconds on a loaded machine),
                // keep waiting longer than for a live holder.
                tries += 1;
                crate::clock::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                bail!(
                    Busy,
                    "member {} is in use by another uraid process (it holds the member's lock); \
                     stop that process first, or pick another member (a process just killed keeps the lock \
                     until the kernel has ended its I/O: if it was killed, try again)",
                    self.name
                );
            }
            return Err(Error::io("cannot lock member", Path::new(&self.name), e));
        }
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

    /// A second handle on the same member (same drive, same lock, same
    /// emulated ceilings), so that several volumes can be built over it in
    /// one process, one after the other.
    pub fn try_clone(&self) -> Result<Member> {
        Ok(Member {
            name: self.name.clone(),
            file: self.file.try_clone().map_err(|e| Error::io("cannot duplicate handle of", Path::new(&self.name), e))?,
            kind: self.kind,
            size: self.size,
            direct: self.direct,
            block_size: self.block_size,
            throttle: self.throttle.clone(),
            filters: self.filters.clone(),
            no_fallocate: self.no_fallocate.clone(),
            limits: self.limits,
            no_discard: self.no_discard.clone(),
            held: self.held.clone(),
        })
    }

    /// Stacks `filter` over the member (see [`Filter`]): from now on the
    /// engine and the blocking helpers ask it before every I/O. Clones made
    /// afterwards share it.
    pub fn push_filter(&mut self, filter: Arc<dyn Filter>) {
        self.filters.push(filter);
    }

    /// The filters stacked over the member, innermost first.
    pub fn filters(&self) -> &[Arc<dyn Filter>] {
        &self.filters
    }

    /// What the filters say of `op` of `len` bytes at absolute member byte
    /// `offset` (`durable`: a write that is durable once done, FUA), the
    /// outermost first; the first that does not pass decides.
    #[inline]
    pub fn filter_verdict(&self, op: Op, offset: u64, len: u64, durable: bool) -> Verdict {
        for f in self.filters.iter().rev() {
            match f.before(self, op, offset, len, durable) {
                Verdict::Pass => {}
                v => return v,
            }
        }
        Verdict::Pass
    }

    /// The filters' verdict on a blocking I/O, as a `Result`; a torn
    /// write is done in part here and then reported failed.
    fn injected(&self, op: Op, offset: u64, buf: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        // The blocking helpers' writes are synced (superblocks) or
        // RWF_DSYNC (the bitmap): durable.
        let errno = match self.filter_verdict(op, offset, buf.len() as u64, true) {
            Verdict::Pass => return Ok(()),
            Verdict::Fail(errno) => errno,
            Verdict::Tear(n) => {
                let _ = self.file.write_all_at(&buf[..n], offset);
                libc::EIO
            }
        };
        Err(Error::io(
            &format!("cannot {} {} bytes at offset {offset} of", if op == Op::Read { "read" } else { "write" }, buf.len()),
            Path::new(&self.name),
            std::io::Error::from_raw_os_error(errno),
        ))
    }

    /// Name as given (path or `mem:` spec).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Kind of member.
    pub fn kind(&self) -> MemberKind {
        self.kind
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// True when opened with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.direct
    }
    /// Logical block size in bytes (smallest aligned I/O).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
    /// The emulated ceilings, if any.
    pub fn throttle(&self) -> Option<&Arc<Throttle>> {
        self.throttle.as_ref()
    }

    /// True once the member refused a discard or zeroing (fallocate(2)
    /// failed with EOPNOTSUPP: a loop device or file on a filesystem
    /// without hole punching, a drive without deallocate). Such a member
    /// is not failed: the engine writes zeros where it would have punched,
    /// and the NBD export turns clients' TRIMs into no-ops (as md turns
    /// discard off for an array whose member lacks it).
    pub fn no_fallocate(&self) -> bool {
        self.no_fallocate.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records that the member refused a discard or zeroing; says so once
    /// on stderr (the first time for this member).
    pub fn set_no_fallocate(&self) {
        if !self.no_fallocate.swap(true, std::sync::atomic::Ordering::Relaxed) {
            if self.kind == MemberKind::BlockDevice {
                // Its discards are real discards (see `discards`); what it
                // refused is a zeroing.
                eprintln!(
                    "uraid: warning: member {} refused a zeroing (fallocate: EOPNOTSUPP); it is not failed: \
                     zeroings write zeros on it from now on",
                    self.name
                );
                return;
            }
            eprintln!(
                "uraid: warning: member {} does not support discard (EOPNOTSUPP); it is not failed: \
                 discards and zeroings write zeros on it from now on, and TRIM from clients is ignored",
                self.name
            );
        }
    }

    /// A block device's discard and zeroing limits as sysfs gave them when
    /// it was opened; `None` for files and `mem:` drives (and for a block
    /// device whose sysfs directory could not be read).
    pub fn queue_limits(&self) -> Option<QueueLimits> {
        self.limits
    }

    /// Whether a discard sent to this member reaches the drive: a block
    /// device whose `discard_max_bytes` is not 0 and that has not refused
    /// one ([`set_no_discard`](Self::set_no_discard)); a file or `mem:`
    /// drive that has not refused hole punching ([`no_fallocate`](Self::no_fallocate)).
    pub fn discards(&self) -> bool {
        match self.kind {
            MemberKind::BlockDevice => {
                self.limits.is_none_or(|l| l.discard_max > 0) && !self.no_discard.load(std::sync::atomic::Ordering::Relaxed)
            }
            _ => !self.no_fallocate(),
        }
    }

    /// Whether a range of this member can be made to read back as zeros
    /// without writing zero bytes from memory: a block device with
    /// WRITE_ZEROES (`write_zeroes_max_bytes` not 0; without it the kernel
    /// writes pages of zeros), a file or `mem:` drive with hole punching;
    /// false once the member refused one ([`no_fallocate`](Self::no_fallocate)).
    pub fn zeroes_cheaply(&self) -> bool {
        let hw = self.kind != MemberKind::BlockDevice || self.limits.is_none_or(|l| l.write_zeroes_max > 0);
        hw && !self.no_fallocate()
    }

    /// Records that the block device refused a discard (EOPNOTSUPP) its
    /// limits promised; says so once on stderr. The member is not failed:
    /// discards to it are dropped from now on (a discard is a hint).
    pub fn set_no_discard(&self) {
        if !self.no_discard.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "uraid: warning: member {} refused a discard (EOPNOTSUPP) although its queue limits allow one; \
                 it is not failed: discards to it are dropped from now on, and TRIM from clients is ignored",
                self.name
            );
        }
    }

    /// Reads exactly `buf.len()` bytes at byte `offset` (control path:
    /// superblocks and signatures). `buf` must be an aligned [`crate::IoBuf`]
    /// region when the member is O_DIRECT.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.injected(Op::Read, offset, buf)?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| Error::io(&format!("cannot read {} bytes at offset {offset} of", buf.len()), Path::new(&self.name), e))
    }

    /// Writes all of `buf` at byte `offset` and makes it durable (control
    /// path). Same alignment rule as [`read_exact_at`](Self::read_exact_at).
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.injected(Op::Write, offset, buf)?;
        self.file
            .write_all_at(buf, offset)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| Error::io(&format!("cannot write {} bytes at offset {offset} of", buf.len()), Path::new(&self.name), e))
    }

    /// Writes all of `buf` at byte `offset` in one `pwritev2` with
    /// `RWF_DSYNC`: durable when it returns (FUA on a drive), without a
    /// flush of the rest of the device (the journal's record writes). Same
    /// alignment rule as [`read_exact_at`](Self::read_exact_at); fault
    /// plans apply. Errors: `Io` (a short write counts as one).
    pub fn write_dsync_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.write_dsync_vectored_at(&[buf], offset)
    }

    /// As [`write_dsync_at`](Self::write_dsync_at), for the buffers `bufs`
    /// back to back from `offset`, in one `pwritev2(RWF_DSYNC)` (at most
    /// `IOV_MAX` buffers): the journal's group commit writes a run of
    /// records without copying them together. An injected fault sees it
    /// as one write of their total length. Errors: as `write_dsync_at`.
    pub fn write_dsync_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let what = || format!("cannot write {total} bytes at offset {offset} of");
        let errno = match self.filter_verdict(Op::Write, offset, total as u64, true) {
            Verdict::Pass => None,
            Verdict::Fail(errno) => Some(errno),
            Verdict::Tear(n) => {
                // As one write of the buffers copied together, torn.
                use std::os::unix::fs::FileExt;
                let mut one = Vec::with_capacity(total);
                bufs.iter().for_each(|b| one.extend_from_slice(b));
                let _ = self.file.write_all_at(&one[..n.min(total)], offset);
                Some(libc::EIO)
            }
        };
        if let Some(errno) = errno {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::from_raw_os_error(errno)));
        }
        let Ok(off) = libc::off_t::try_from(offset) else {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::from_raw_os_error(libc::EINVAL)));
        };
        let iov: Vec<libc::iovec> = bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }).collect();
        let Ok(count) = libc::c_int::try_from(iov.len()) else {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::from_raw_os_error(libc::EINVAL)));
        };
        // SAFETY: `iov` names the buffers of `bufs`, which outlive the
        // call, on the descriptor this member owns.
        let n = unsafe { libc::pwritev2(self.file.as_raw_fd(), iov.as_ptr(), count, off, libc::RWF_DSYNC) };
        if n < 0 {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::last_os_error()));
        }
        if n as usize != total {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::other("short write")));
        }
        Ok(())
    }
}

/// A block device's discard and zeroing limits (its request queue's, in
/// sysfs), which decide how the engine sends a discard or a zeroing to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// Largest discard the device takes at once, in bytes
    /// (`discard_max_bytes`); 0 when it does not discard.
    pub discard_max: u64,
    /// The unit the device discards in, in bytes (`discard_granularity`).
    pub discard_granularity: u64,
    /// Largest WRITE_ZEROES the device takes at once, in bytes
    /// (`write_zeroes_max_bytes`); 0 when it has none (many SATA SSDs,
    /// null_blk): a zeroing is then written as pages of zeros.
    pub write_zeroes_max: u64,
}

impl QueueLimits {
    /// The limits of the block device numbered `rdev` (major and minor),
    /// from `/sys/dev/block/MAJ:MIN/queue/` (a partition's are its
    /// disk's, one directory up). `None` when sysfs does not have them.
    pub fn of_device(rdev: u64) -> Option<QueueLimits> {
        let dev = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)));
        Self::read(&dev.join("queue")).or_else(|| Self::read(&dev.join("../queue")))
    }

    /// The limits in queue directory `dir` (`discard_max_bytes`,
    /// `discard_granularity`, `write_zeroes_max_bytes`, each a decimal
    /// number of bytes); `None` when the first two cannot be read. A
    /// missing `write_zeroes_max_bytes` (kernels before 4.10) reads as 0.
    pub fn read(dir: &Path) -> Option<QueueLimits> {
        let num = |f: &str| std::fs::read_to_string(dir.join(f)).ok()?.trim().parse::<u64>().ok();
        Some(QueueLimits {
            discard_max: num("discard_max_bytes")?,
            discard_granularity: num("discard_granularity")?,
            write_zeroes_max: num("write_zeroes_max_bytes").unwrap_or(0),
        })
    }
}

fn block_device_geometry(file: &File, p: &Path) -> Result<(u64, u32)> {
    // From <linux/fs.h>: BLKGETSIZE64 = _IOR(0x12, 114, size_t), BLKSSZGET = _IO(0x12, 104).
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    const BLKSSZGET: libc::c_ulong = 0x1268;
    let mut size: u64 = 0;
    let mut ssz: libc::c_int = 0;
    // SAFETY: both ioctls write one integer of the given type through the pointer.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if r != 0 {
        return Err(Error::io("cannot get the size of", p, std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut ssz as *mut libc::c_int) };
    if r != 0 || ssz <= 0 {
        ssz = 512;
    }
    Ok((size, ssz as u32))
}

/// The offset and length alignment O_DIRECT I/O on `file` needs (statx
/// `STATX_DIOALIGN`, Linux 6.1; 512 when the kernel or filesystem does not
/// say), at least 512 and at most 64 KiB: a file on a filesystem over 4Kn
/// storage needs 4096.
fn file_dio_align(file: &File) -> u32 {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx on a valid descriptor with an empty path and
    // AT_EMPTY_PATH writes only into `stx`, which outlives the call.
    let r = unsafe { libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return 512;
    }
    let a = stx.stx_dio_offset_align;
    if a.is_power_of_two() {
        a.clamp(512, 64 << 10)
    } else {
        512
    }
}

/// Nanoseconds on the monotonic clock since the first read in this process
/// (the injected clock's: see [`crate::clock`]).
pub use crate::clock::now_ns;

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

    /// Admits an I/O of `bytes` issued at `now` (ns, [`now_ns`]) and returns
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
            match self.next_free_ns.compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return end + self.lat_ns,
                Err(c) => cur = c,
            }
        }
    }
}

/// Checks that no drive is named twice in `specs`.
///
/// Errors: `InvalidInput` naming both spellings of the duplicate.
pub fn check_distinct(specs: &[MemberSpec]) -> Result<Vec<Identity>> {
    let mut ids: Vec<Identity> = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        let id = s.identity()?;
        if let Some(j) = ids.iter().position(|x| *x == id) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("member {} is given twice (also as {}); name each drive once", s, specs[j]),
            ));
        }
        ids.push(id);
        let _ = i;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_mem_spec() {
        let s: MemberSpec = "mem:1G,bw=250M,iops=25000,lat=20".parse().unwrap();
        assert_eq!(
            s,
            MemberSpec::Mem(MemSpec { size: 1 << 30, limits: Limits { bw: 250_000_000, iops: 25_000, lat_us: 20 } })
        );
        assert_eq!(s.to_string(), "mem:1G,bw=250000000,iops=25000,lat=20");
        assert!("mem:1G,foo=1".parse::<MemberSpec>().unwrap_err().to_string().contains("unknown mem: option 'foo'"));
        assert!("mem:1K".parse::<MemberSpec>().is_err());
        assert!("mem:".parse::<MemberSpec>().is_err());
        assert!("".parse::<MemberSpec>().is_err());
    }

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

    /// A lock whose holder has exited but whose file is still open
    /// elsewhere (as a killed process's io_uring keeps it for a while) is
    /// waited for past the 2 s given to a live holder.
    #[test]
    fn a_lock_held_for_an_exited_process_is_waited_for() {
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("uraid-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m0");
        std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let held = File::open(&path).unwrap();
        // SAFETY: the child only calls flock and _exit (async-signal-safe)
        // before it ends; the parent reaps it below.
        let pid = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                // The lock belongs to the open file description shared with
                // the parent, and /proc/locks names this child as its holder.
                libc::flock(held.as_raw_fd(), libc::LOCK_EX);
                libc::_exit(0);
            }
            pid
        };
        // The child stays a zombie (not reaped) until the open below is
        // done: its pid cannot go to another process meanwhile, which
        // /proc/locks would then name as a live holder.
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| st.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'))) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(5));
            drop(held);
        });
        let spec = MemberSpec::Path(path.clone());
        let t0 = std::time::Instant::now();
        let m = Member::open(&spec, OpenMode { write: true, exclusive: true });
        release.join().unwrap();
        let mut st = 0;
        // SAFETY: waitpid(2) on this test's own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(m.is_ok(), "after {:?}: {}", t0.elapsed(), m.unwrap_err());
        // A live holder (this process, through another descriptor) is still
        // refused after the short wait.
        let again = Member::open(&spec, OpenMode { write: true, exclusive: true }).unwrap_err();
        assert!(again.to_string().contains("in use by another uraid process"), "{again}");
        drop(m);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
