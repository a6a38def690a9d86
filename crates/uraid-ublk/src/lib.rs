//! uraid-ublk: a volume as a Linux block device, `/dev/ublkbN`, served
//! from user space through the kernel's ublk driver (`ublk_drv`, Linux
//! 6.0+; uraid needs 6.5+) with the `libublk` crate for its control
//! commands.
//!
//! - [`UblkExport::start`] makes the device (or re-attaches to one left
//!   by a server that died: user recovery) and starts one thread per
//!   ublk queue, each with its own engine queue (`queue`).
//! - [`UblkExport`] is an [`Export`]: the service pauses it, swaps its
//!   volume (and grows the device with it where the kernel can) and
//!   resumes it like the NBD export.
//! - [`UblkExport::stop`] stops and deletes the device (a clean stop).
//!   A server that dies instead (kill -9, a crash) leaves the device
//!   quiesced, its I/O waiting: the next [`UblkExport::start`] with
//!   [`Attach::Recover`] takes it over, and the requests that were in
//!   flight are issued again (`UBLK_F_USER_RECOVERY_REISSUE`), so a
//!   filesystem mounted on it goes on.
//! - [`params`]: block sizes and the I/O hints (`io_min` = chunk,
//!   `io_opt` = full stripe) mkfs aligns to; [`support`]: what the
//!   kernel lacks when ublk cannot be used.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use io_uring::{squeue, IoUring};
use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::io::UblkDev;
use libublk::{sys, UblkError, UblkFlags};
use uraid_core::export::stats::ExportStats;
use uraid_core::export::{Export, StatsSnapshot};
use uraid_core::Volume;

pub mod params;
#[doc(hidden)]
pub mod null;
mod queue;
pub mod support;

/// What went wrong, said for a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// A libublk error in words (its own Display hides the errno).
pub(crate) fn ublk_error(e: &UblkError) -> String {
    match e {
        UblkError::UringIOError(n) | UblkError::OtherError(n) => std::io::Error::from_raw_os_error(-n).to_string(),
        UblkError::IOError(e) => e.to_string(),
        other => other.to_string(),
    }
}

/// Requests in flight per queue (tags), by default.
pub const DEFAULT_DEPTH: u16 = 64;
/// Largest request, bytes: each tag's buffer (512 KiB). 1 MiB was tried
/// (a 1 MiB request then reaches the server whole): in one VM run SEQ1M
/// Q8T1 read rose 8%, but RND4K Q32T1 read fell to 82% unthrottled and
/// from 98% to 97% of 4 drives throttled, so it stays 512 KiB.
pub const DEFAULT_BUF_BYTES: u32 = 512 << 10;

/// How the device is found or made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// A new device, with this id (`/dev/ublkbN`) or the first free one.
    New(Option<u32>),
    /// Re-attach to device N, left quiesced by a server that died (see
    /// [`probe`]).
    Recover(u32),
}

/// Settings of a ublk export.
#[derive(Debug, Clone)]
pub struct UblkOptions {
    /// The array's UUID, kept with the device (its JSON in
    /// /run/ublksrvd) so that a re-attach checks it is the same array.
    /// Empty: a temporary array, made without user recovery (its data
    /// does not outlive the server).
    pub uuid: String,
    /// The device's name in the driver's JSON (the array's name).
    pub name: String,
    /// New device or re-attach.
    pub attach: Attach,
    /// Refuse writes, and make the device read-only.
    pub read_only: bool,
    /// Queues (one thread and engine queue each); 0: one per CPU, at
    /// most 4. Ignored on a re-attach (the device's own).
    pub queues: u16,
    /// Requests in flight per queue; ignored on a re-attach.
    pub depth: u16,
}

/// What the driver says of an existing device ([`probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its id, N of /dev/ublkbN.
    pub dev_id: u32,
    /// UBLK_S_DEV_DEAD (0), _LIVE (1), _QUIESCED (2) or _FAIL_IO (3).
    pub state: u16,
    /// The process that serves (or served) it.
    pub pid: i32,
    /// Made with user recovery.
    pub recoverable: bool,
    /// The array UUID its server recorded (its JSON), if any.
    pub uuid: Option<String>,
}

impl DeviceInfo {
    /// Served by a live process.
    pub fn live(&self) -> bool {
        self.state as u32 == sys::UBLK_S_DEV_LIVE
    }
    /// Left by a server that died, waiting for another (user recovery).
    pub fn quiesced(&self) -> bool {
        self.state as u32 == sys::UBLK_S_DEV_QUIESCED
    }
}

/// Makes the calling thread's ring for control commands (libublk keeps
/// one per thread).
fn ctrl_ring() -> Result<(), Error> {
    libublk::ublk_init_ctrl_task_ring(|r| {
        if r.is_none() {
            *r = Some(IoUring::<squeue::Entry128>::builder().build(16).map_err(UblkError::IOError)?);
        }
        Ok(())
    })
    .map_err(|e| Error(format!("ublk: cannot make an io_uring for control commands: {}", ublk_error(&e))))
}

/// What the driver says of device `dev_id`: `None` when there is none.
/// Errors: the driver cannot be asked (see [`support::check`]).
pub fn probe(dev_id: u32) -> Result<Option<DeviceInfo>, Error> {
    if !std::path::Path::new(&format!("/sys/class/ublk-char/ublkc{dev_id}")).exists() {
        return Ok(None);
    }
    ctrl_ring()?;
    let ctrl = match UblkCtrl::new_simple(dev_id as i32) {
        Ok(c) => c,
        Err(UblkError::UringIOError(e)) if e == -libc::ENODEV => return Ok(None),
        Err(e) => return Err(Error(format!("ublk: cannot ask the driver about device {dev_id}: {}", ublk_error(&e)))),
    };
    let info = ctrl.dev_info();
    let uuid = ctrl.get_target_data_from_json().and_then(|v| v.get("uuid").and_then(|u| u.as_str()).map(str::to_string));
    // Leave the device alone when this handle goes.
    ctrl.disown();
    Ok(Some(DeviceInfo {
        dev_id,
        state: info.state,
        pid: info.ublksrv_pid,
        recoverable: info.flags & support::RECOVERY == support::RECOVERY,
        uuid,
    }))
}

/// Deletes device `dev_id` (one left stopped, or not ours to recover).
/// Errors: the driver refused.
pub fn delete(dev_id: u32) -> Result<(), Error> {
    ctrl_ring()?;
    let ctrl = UblkCtrl::new_simple(dev_id as i32).map_err(|e| Error(format!("ublk: device {dev_id}: {}", ublk_error(&e))))?;
    ctrl.disown();
    ctrl.del_dev().map(|_| ()).map_err(|e| Error(format!("ublk: cannot delete device {dev_id}: {}", ublk_error(&e))))
}

/// The state the control path and the queue threads share.
#[derive(Debug)]
pub(crate) struct Live {
    current: Mutex<Arc<Volume>>,
    /// Bumped by every replacement and pause; queues compare it with theirs.
    pub(crate) generation: AtomicU64,
    pub(crate) paused: AtomicBool,
    /// Queue threads serving, and those of them parked by a pause.
    pub(crate) active: AtomicUsize,
    pub(crate) parked: AtomicUsize,
    /// The device never started: the queue threads end at their next
    /// tick, whatever the kernel holds.
    pub(crate) abandon: AtomicBool,
    /// Bytes the kernel was told (the device's size).
    capacity: AtomicU64,
    block_size: u32,
    pub(crate) stats: ExportStats,
}

impl Live {
    pub(crate) fn volume(&self) -> (Arc<Volume>, u64) {
        let v = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (v, self.generation.load(Ordering::Acquire))
    }

    fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The device and its threads, stopped once.
struct Device {
    ctrl: UblkCtrl,
    dev: Option<Arc<UblkDev>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    live: Arc<Live>,
}

struct Inner {
    live: Arc<Live>,
    dev_id: u32,
    bdev: String,
    /// The driver takes UPDATE_SIZE.
    can_resize: bool,
    /// The device was made with UBLK_F_USER_COPY (see `queue.rs`).
    user_copy: bool,
    /// The user was told the device keeps its size.
    resize_told: AtomicBool,
    /// The array's name, for what the user is told.
    name: String,
    device: Mutex<Option<Device>>,
}

/// A ublk export: `/dev/ublkbN` serving a volume. Clones are handles to
/// the same export. [`stop`](Self::stop) ends it (also done when the last
/// handle goes).
#[derive(Clone)]
pub struct UblkExport {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for UblkExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UblkExport").field("bdev", &self.inner.bdev).finish()
    }
}

/// A [`UblkExport`] not kept alive by this handle ([`UblkExport::downgrade`]).
#[derive(Clone)]
pub struct WeakUblkExport(std::sync::Weak<Inner>);

impl WeakUblkExport {
    /// The export, while a handle on it is left.
    pub fn upgrade(&self) -> Option<UblkExport> {
        self.0.upgrade().map(|inner| UblkExport { inner })
    }
}

/// The first CPUs-or-4 queues, as the default.
fn default_queues() -> u16 {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) as u16
}

impl UblkExport {
    /// Makes the device (or re-attaches to it) and serves `vol` on it.
    /// Returns once `/dev/ublkbN` exists and serves (the kernel has read
    /// its partition table through it). Writes to stderr what the user
    /// should know (a stripe width the device cannot advertise).
    ///
    /// Errors: ublk unusable here ([`support::check`]), the device id is
    /// taken, a re-attach to a device that is not quiesced, was made for
    /// another array, has another block size or is larger than `vol`;
    /// a queue that cannot be set up.
    pub fn start(vol: Arc<Volume>, opts: &UblkOptions) -> Result<UblkExport, Error> {
        let features = support::check()?;
        ctrl_ring()?;
        let ctrl = new_ctrl(opts, features.ioctl_encode(), features.user_copy() && user_copy_wanted())?;
        // This code deletes the device itself (stop), never libublk's drop.
        ctrl.disown();
        let info = ctrl.dev_info();
        let dev_id = info.dev_id;
        let delete_new = |why: Error| -> Error {
            if matches!(opts.attach, Attach::New(_)) {
                let _ = ctrl.del_dev();
            }
            why
        };
        if let Attach::Recover(_) = opts.attach {
            check_recover(&ctrl, &vol, opts)?;
            ctrl.start_user_recover()
                .map_err(|e| Error(format!("ublk: cannot start the recovery of device {dev_id}: {}", ublk_error(&e))))?;
        }
        let p = params::for_volume(&vol, opts.read_only, info.max_io_buf_bytes);
        let uuid = opts.uuid.clone();
        let name = opts.name.clone();
        let tgt_params = p.params;
        let dev = UblkDev::new(
            "uraid".to_string(),
            move |d: &mut UblkDev| {
                d.tgt.dev_size = tgt_params.basic.dev_sectors << 9;
                d.tgt.params = tgt_params;
                d.set_target_json(serde_json::json!({ "uuid": uuid, "array": name }));
                Ok(())
            },
            &ctrl,
        )
        .map_err(|e| delete_new(Error(format!("ublk: cannot open /dev/ublkc{dev_id}: {}", ublk_error(&e)))))?;
        let dev = Arc::new(dev);
        let user_copy = dev.dev_info.flags & sys::UBLK_F_USER_COPY as u64 != 0;
        let live = Live::new(&vol);
        let (threads, tids) = match spawn_queues(&dev, &live, opts.read_only, dev_id) {
            Ok(q) => q,
            Err(e) => return Err(delete_new(e)),
        };
        let mut device = Device { ctrl, dev: Some(dev), threads, live: live.clone() };
        let new = matches!(opts.attach, Attach::New(_));
        let tids = match tids {
            Ok(tids) => tids,
            Err(e) => {
                device.abandon(new);
                return Err(Error(format!("ublk: {e}")));
            }
        };
        device.run(tids, new, dev_id)?;
        if let Some(n) = &p.note {
            queue::log(format_args!("uraid serve: /dev/ublkb{dev_id}: {n}"));
        }
        let e = UblkExport {
            inner: Arc::new(Inner {
                live,
                dev_id,
                bdev: format!("/dev/ublkb{dev_id}"),
                can_resize: features.update_size(),
                user_copy,
                resize_told: AtomicBool::new(false),
                name: opts.name.clone(),
                device: Mutex::new(Some(device)),
            }),
        };
        if let Attach::Recover(_) = opts.attach {
            // The array may have grown while nobody served the device.
            e.follow_capacity(vol.capacity(), true);
        }
        Ok(e)
    }

    /// N of /dev/ublkbN.
    pub fn dev_id(&self) -> u32 {
        self.inner.dev_id
    }

    /// The block device, `/dev/ublkbN`.
    pub fn bdev(&self) -> &str {
        &self.inner.bdev
    }

    /// Whether uraid copies the requests' data itself, by io_uring's
    /// workers off the queue threads (the device was made with
    /// UBLK_F_USER_COPY), rather than the kernel on the queue threads.
    pub fn user_copy(&self) -> bool {
        self.inner.user_copy
    }

    /// Stops the device (its users see it go: a mounted filesystem gets
    /// I/O errors) once every request in flight is answered, ends the
    /// queue threads and deletes the device. Call it with the export
    /// resumed. Idempotent. Errors: the driver refused to delete it (it
    /// is stopped all the same).
    pub fn stop(&self) -> Result<(), Error> {
        let device = self.inner.device.lock().unwrap_or_else(|e| e.into_inner()).take();
        match device {
            Some(mut d) => {
                ctrl_ring()?;
                d.stop(true).map_err(|e| Error(format!("ublk: device {}: {e}", self.inner.dev_id)))
            }
            None => Ok(()),
        }
    }

    /// Leaves the device to the next server (a takeover): it is neither
    /// stopped nor deleted, and the queue threads keep holding what the
    /// kernel gave them until this process exits. The kernel then ends
    /// the queues' commands and, the device having user recovery, leaves
    /// it quiesced, its requests waiting (those this process took and did
    /// not answer are issued again to the next server,
    /// UBLK_F_USER_RECOVERY_REISSUE). Call it with the export paused and
    /// quiet ([`Export::is_quiet`]): nothing is in the engine then, and
    /// nothing goes to it any more. Afterwards [`stop`](Self::stop) and
    /// the last handle's drop do nothing.
    pub fn leave(&self) {
        let device = self.inner.device.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Not dropped: its drop would stop the device, and joining the
        // queue threads would wait for commands only the exit ends (6.12
        // waits for them when a ring's files are unregistered).
        std::mem::forget(device);
    }

    /// A handle that does not keep the export (nor its device) alive.
    pub fn downgrade(&self) -> WeakUblkExport {
        WeakUblkExport(Arc::downgrade(&self.inner))
    }

    /// Bytes the kernel's device has: the volume's capacity, or less
    /// after the volume grew where the driver cannot resize a device
    /// (no UPDATE_SIZE before Linux 6.16).
    pub fn device_bytes(&self) -> u64 {
        self.inner.live.capacity.load(Ordering::Acquire)
    }

    /// The kernel's size of the device follows a volume of `capacity`
    /// bytes: UPDATE_SIZE where the driver has it, else the user is told
    /// once what to do.
    fn follow_capacity(&self, capacity: u64, at_start: bool) {
        let told = self.inner.live.capacity.load(Ordering::Acquire);
        if capacity <= told && !at_start {
            return;
        }
        let device = self.inner.device.lock().unwrap_or_else(|e| e.into_inner());
        let Some(d) = device.as_ref() else { return };
        let mut p = sys::ublk_params::default();
        let now = if at_start && ctrl_ring().is_ok() && d.ctrl.get_params(&mut p).is_ok() { p.basic.dev_sectors << 9 } else { told };
        // A re-attached device keeps the size it was made with.
        self.inner.live.capacity.store(now, Ordering::Release);
        if capacity <= now {
            return;
        }
        let b = &self.inner.bdev;
        if self.inner.can_resize {
            match ctrl_ring().map_err(|e| e.0).and_then(|_| d.ctrl.update_size(capacity).map_err(|e| ublk_error(&e))) {
                Ok(_) => {
                    self.inner.live.capacity.store(capacity, Ordering::Release);
                    queue::log(format_args!("uraid serve: {b} grew from {now} to {capacity} bytes (resize2fs or xfs_growfs can follow)"));
                }
                Err(e) => queue::log(format_args!("uraid serve: {b} could not grow to {capacity} bytes: {e}; it keeps {now}")),
            }
        } else if !self.inner.resize_told.swap(true, Ordering::AcqRel) {
            let n = &self.inner.name;
            queue::log(format_args!(
                "uraid serve: the volume grew to {capacity} bytes, but this kernel's ublk driver cannot resize a device \
                 (UPDATE_SIZE: Linux 6.16+): {b} keeps {now} bytes until the export restarts. To use the new size: \
                 unmount {b}, then `uraid stop {n}` and `uraid serve {n} --ublk` (a new device, of the new size), \
                 mount it and grow the filesystem (resize2fs, xfs_growfs). A re-attach (`uraid serve {n} --ublk \
                 --takeover`, or a restart after a crash) keeps the mount but not the new size"
            ));
        }
    }
}

/// Checks that device `ctrl` (opened to re-attach) may be taken over for
/// `vol`: left quiesced by a server that died, made for this array, same
/// block size, not larger than the volume.
fn check_recover(ctrl: &UblkCtrl, vol: &Volume, opts: &UblkOptions) -> Result<(), Error> {
    let info = ctrl.dev_info();
    let n = info.dev_id;
    if info.state as u32 == sys::UBLK_S_DEV_LIVE {
        return Err(Error(format!(
            "ublk: /dev/ublkb{n} is served by process {} already: two servers cannot attach to one device \
             (stop that one first: `uraid stop {}`)",
            info.ublksrv_pid, opts.name
        )));
    }
    if info.state as u32 != sys::UBLK_S_DEV_QUIESCED {
        return Err(Error(format!("ublk: /dev/ublkb{n} is not waiting for a server (state {}): it cannot be re-attached", info.state)));
    }
    if info.flags & support::RECOVERY != support::RECOVERY {
        return Err(Error(format!("ublk: /dev/ublkb{n} was made without user recovery: it cannot be re-attached")));
    }
    let uuid = ctrl.get_target_data_from_json().and_then(|v| v.get("uuid").and_then(|u| u.as_str()).map(str::to_string));
    if let Some(u) = uuid.filter(|u| *u != opts.uuid) {
        return Err(Error(format!("ublk: /dev/ublkb{n} serves array {u}, not {}: it is not re-attached", opts.uuid)));
    }
    let mut p = sys::ublk_params::default();
    ctrl.get_params(&mut p).map_err(|e| Error(format!("ublk: cannot read the parameters of /dev/ublkb{n}: {}", ublk_error(&e))))?;
    let bs = 1u64 << p.basic.logical_bs_shift;
    if bs != vol.block_size() as u64 {
        return Err(Error(format!("ublk: /dev/ublkb{n} has blocks of {bs} bytes, the array {}: it is not re-attached", vol.block_size())));
    }
    if p.basic.dev_sectors << 9 > vol.capacity() {
        return Err(Error(format!(
            "ublk: /dev/ublkb{n} has {} bytes, more than the array's {}: it is not re-attached",
            p.basic.dev_sectors << 9,
            vol.capacity()
        )));
    }
    Ok(())
}

/// Whether a new device copies its requests' data itself
/// (UBLK_F_USER_COPY, where the driver has it): yes, unless the
/// environment sets `URAID_UBLK_USER_COPY=0` (to measure the kernel's
/// copy against it). A re-attached device keeps what it was made with.
fn user_copy_wanted() -> bool {
    std::env::var("URAID_UBLK_USER_COPY").map_or(true, |v| v != "0")
}

/// The control device of a new device (`opts.attach` New) or of the one
/// to recover; `ioctl_encode`: the kernel takes the encoded commands;
/// `user_copy`: a new device is made with UBLK_F_USER_COPY.
/// Errors: the id is taken, or the device cannot be added or opened.
fn new_ctrl(opts: &UblkOptions, ioctl_encode: bool, user_copy: bool) -> Result<UblkCtrl, Error> {
    let recovery = if opts.uuid.is_empty() { 0 } else { support::RECOVERY };
    let encode = if ioctl_encode { sys::UBLK_F_CMD_IOCTL_ENCODE as u64 } else { 0 };
    let encode = encode | if user_copy && matches!(opts.attach, Attach::New(_)) { sys::UBLK_F_USER_COPY as u64 } else { 0 };
    let (id, dev_flags) = match opts.attach {
        Attach::New(id) => (id.map_or(-1, |i| i as i32), UblkFlags::UBLK_DEV_F_ADD_DEV),
        Attach::Recover(id) => (id as i32, UblkFlags::UBLK_DEV_F_RECOVER_DEV),
    };
    let queues = if opts.queues == 0 { default_queues() } else { opts.queues };
    let depth = if opts.depth == 0 { DEFAULT_DEPTH } else { opts.depth };
    UblkCtrlBuilder::default()
        .name("uraid")
        .id(id)
        .nr_queues(queues)
        .depth(depth)
        .io_buf_bytes(DEFAULT_BUF_BYTES)
        .ctrl_flags(recovery | encode)
        .dev_flags(dev_flags)
        .build()
        .map_err(|e| {
            Error(match (opts.attach, &e) {
                (Attach::New(Some(n)), UblkError::UringIOError(c)) if *c == -libc::EEXIST => {
                    format!("ublk: device {n} (/dev/ublkb{n}) exists already: give another --ublk-id, or none")
                }
                _ => format!("ublk: cannot {} the device: {}", if id < 0 { "add" } else { "open" }, ublk_error(&e)),
            })
        })
}

impl Live {
    /// The shared state of the queues serving `vol`, not paused.
    fn new(vol: &Arc<Volume>) -> Arc<Live> {
        Arc::new(Live {
            current: Mutex::new(vol.clone()),
            generation: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            abandon: AtomicBool::new(false),
            capacity: AtomicU64::new(vol.capacity()),
            block_size: vol.block_size(),
            stats: ExportStats::default(),
        })
    }
}

/// A queue thread started by [`spawn_queues`], and what each one said
/// once ready: (queue id, thread id), or the first failure.
type Queues = (Vec<std::thread::JoinHandle<()>>, Result<Vec<(u16, libc::pid_t)>, String>);

/// Starts one thread per hardware queue of `dev` of device `dev_id` and
/// waits until each is ready or failed. Errors: a thread could not be
/// started (those started are left to end with the device).
fn spawn_queues(dev: &Arc<UblkDev>, live: &Arc<Live>, read_only: bool, dev_id: u32) -> Result<Queues, Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    for qid in 0..dev.dev_info.nr_hw_queues {
        let cfg = queue::QueueConfig {
            qid,
            depth: dev.dev_info.queue_depth,
            buf_bytes: dev.dev_info.max_io_buf_bytes as usize,
            read_only,
            ioctl_encode: dev.dev_info.flags & sys::UBLK_F_CMD_IOCTL_ENCODE as u64 != 0,
            user_copy: dev.dev_info.flags & sys::UBLK_F_USER_COPY as u64 != 0,
            cdev_fd: dev.tgt.fds[0],
        };
        let (dev, live, tx) = (dev.clone(), live.clone(), tx.clone());
        let t = std::thread::Builder::new()
            .name(format!("ublk{dev_id}q{qid}"))
            .spawn(move || queue::serve(cfg, &dev, &live, tx))
            .map_err(|e| Error(format!("ublk: cannot start a queue thread: {e}")))?;
        threads.push(t);
    }
    drop(tx);
    let mut failed = None;
    let mut tids = Vec::new();
    for _ in 0..threads.len() {
        match rx.recv() {
            Ok(Ok(t)) => tids.push(t),
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(_) => failed = failed.or(Some("a queue thread ended".to_string())),
        }
    }
    Ok((threads, failed.map_or(Ok(tids), Err)))
}

impl Device {
    /// Starts the device whose queue threads `tids` (queue id, thread id)
    /// are ready: pins them, names them in libublk's JSON, and starts it
    /// (`new`) or ends its recovery. Errors: the driver refused; the
    /// device is then abandoned (deleted when `new`).
    fn run(&mut self, tids: Vec<(u16, libc::pid_t)>, new: bool, dev_id: u32) -> Result<(), Error> {
        let d = self.dev.clone().expect("set above");
        for (qid, tid) in tids {
            // Each queue's thread on the CPUs whose requests it gets (when
            // they are several: see queue::pin_threads), and in libublk's
            // JSON of the device.
            if queue::pin_threads(d.dev_info.nr_hw_queues) {
                self.ctrl.set_thread_affinity(qid, tid);
            }
            let _ = self.ctrl.configure_queue(&d, qid, tid);
        }
        if let Err(e) = self.ctrl.start_dev(&d) {
            let what = if new { "start" } else { "end the recovery of" };
            let msg = format!("ublk: cannot {what} device {dev_id}: {}", ublk_error(&e));
            drop(d);
            self.abandon(new);
            return Err(Error(msg));
        }
        Ok(())
    }

    /// Ends a device that did not start: its queue threads end (closing
    /// their rings cancels their commands), and a new device is deleted.
    fn abandon(&mut self, delete: bool) {
        self.live.abandon.store(true, Ordering::Release);
        let _ = self.ctrl.kill_dev();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.dev = None;
        if delete {
            let _ = self.ctrl.del_dev();
        }
    }

    /// Stops the device (STOP_DEV: the kernel answers what is in flight
    /// through the queues, then ends their commands), joins the queue
    /// threads, and deletes the device when `delete`.
    fn stop(&mut self, delete: bool) -> Result<(), String> {
        let stopped = self.ctrl.kill_dev();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The queues are gone; the last handle on /dev/ublkcN goes now,
        // which DEL_DEV waits for.
        self.dev = None;
        stopped.map_err(|e| format!("cannot stop it: {}", ublk_error(&e)))?;
        if delete {
            self.ctrl.del_dev().map_err(|e| format!("cannot delete it: {}", ublk_error(&e)))?;
        }
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(mut d) = self.device.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            if ctrl_ring().is_ok() {
                let _ = d.stop(true);
            }
        }
    }
}

impl Export for UblkExport {
    fn kind(&self) -> &'static str {
        "ublk"
    }
    fn address(&self) -> String {
        self.inner.bdev.clone()
    }
    fn volume(&self) -> Arc<Volume> {
        self.inner.live.volume().0
    }
    fn stats(&self) -> StatsSnapshot {
        self.inner.live.stats.snapshot()
    }
    fn replace_volume(&self, vol: Arc<Volume>) -> Result<(), String> {
        let live = &self.inner.live;
        let told = live.capacity.load(Ordering::Acquire);
        if vol.capacity() < told || vol.block_size() != live.block_size {
            return Err(format!(
                "the new volume has {} bytes in blocks of {}; {} has {told} in blocks of {}",
                vol.capacity(),
                vol.block_size(),
                self.inner.bdev,
                live.block_size
            ));
        }
        let grown = vol.capacity();
        *live.current.lock().unwrap_or_else(|p| p.into_inner()) = vol;
        live.generation.fetch_add(1, Ordering::AcqRel);
        self.follow_capacity(grown, false);
        Ok(())
    }
    fn pause(&self) {
        self.inner.live.set_paused(true);
    }
    fn is_quiet(&self) -> bool {
        let l = &self.inner.live;
        l.paused.load(Ordering::Acquire) && l.parked.load(Ordering::Acquire) == l.active.load(Ordering::Acquire)
    }
    fn resume(&self) {
        self.inner.live.set_paused(false);
    }
}
