//! A null ublk target, for measuring: `/dev/ublkbN` whose every request
//! is answered at once, with no engine behind it (READs return whatever
//! the tag's buffer holds, WRITEs go nowhere). It is the floor of the
//! ublk export: what the kernel's ublk driver and the queue thread's
//! rings cost, without uraid's engine. bench/export.py runs it beside
//! `uraid serve --ublk` (the `ublk-null` example is its command).
//!
//! Its queue threads are made like the export's (same depth, buffers,
//! ring without COOP_TASKRUN, CPU affinity), and wait in one of two ways:
//! - [`Wait::OneRing`]: one `io_uring_enter` per batch on the ublk ring
//!   submits the commits and waits for the next requests (the floor);
//! - [`Wait::TwoRings`]: the wait of the export's queue loop without its
//!   engine: the commits submitted on the ublk ring, then a wait on a
//!   second ring (made like the engine's) holding a poll of the ublk
//!   ring's fd, with a timeout. Against `OneRing`, what the second ring
//!   costs.

use std::sync::Arc;

use io_uring::{opcode, types, IoUring};
use libublk::ctrl::UblkCtrlBuilder;
use libublk::io::{UblkDev, UblkQueue};
use libublk::{sys, UblkFlags};

use crate::queue::{init_ring, io_cmd, push_ublk};
use crate::{ublk_error, Error};

/// How a queue thread waits for requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// One ring: commits and wait in one `io_uring_enter`.
    OneRing,
    /// The export's way: a second ring polls the ublk ring's fd.
    TwoRings,
}

/// Settings of a null device.
#[derive(Debug, Clone)]
pub struct NullOptions {
    /// Queues (one thread each).
    pub queues: u16,
    /// Requests in flight per queue (tags).
    pub depth: u16,
    /// Size of the device, bytes (a multiple of 4096).
    pub size: u64,
    pub wait: Wait,
}

/// User data of the poll in the second ring.
const POLL_TAG: u64 = u64::MAX;

/// Makes the null device, prints its path (`/dev/ublkbN`) on stdout once
/// it serves, and serves it until SIGINT or SIGTERM; then stops and
/// deletes it. Errors: ublk unusable here ([`crate::support::check`]),
/// the device cannot be made or started.
pub fn run(opts: &NullOptions) -> Result<(), Error> {
    let features = crate::support::check()?;
    crate::ctrl_ring()?;
    // The signals that end it are taken by sigwait below, in this thread
    // only: block them before the queue threads (which inherit the mask).
    // SAFETY: a zeroed sigset_t is valid for sigemptyset, and the set
    // lives across the calls that use it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let encode = if features.ioctl_encode() { sys::UBLK_F_CMD_IOCTL_ENCODE as u64 } else { 0 };
    let ctrl = UblkCtrlBuilder::default()
        .name("uraid-null")
        .id(-1)
        .nr_queues(opts.queues.max(1))
        .depth(opts.depth.max(1))
        .io_buf_bytes(crate::DEFAULT_BUF_BYTES)
        .ctrl_flags(encode)
        .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
        .build()
        .map_err(|e| Error(format!("ublk: cannot add the null device: {}", ublk_error(&e))))?;
    ctrl.disown();
    let size = opts.size & !4095;
    let dev = UblkDev::new(
        "uraid-null".to_string(),
        move |d: &mut UblkDev| {
            let info = d.dev_info;
            d.tgt.dev_size = size;
            d.tgt.params = sys::ublk_params {
                types: sys::UBLK_PARAM_TYPE_BASIC,
                basic: sys::ublk_param_basic {
                    logical_bs_shift: 12,
                    physical_bs_shift: 12,
                    io_min_shift: 12,
                    io_opt_shift: 12,
                    max_sectors: info.max_io_buf_bytes >> 9,
                    dev_sectors: size >> 9,
                    ..Default::default()
                },
                ..Default::default()
            };
            Ok(())
        },
        &ctrl,
    );
    let dev = match dev {
        Ok(d) => Arc::new(d),
        Err(e) => {
            let _ = ctrl.del_dev();
            return Err(Error(format!("ublk: cannot open the null device: {}", ublk_error(&e))));
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    for qid in 0..dev.dev_info.nr_hw_queues {
        let (dev, tx, wait) = (dev.clone(), tx.clone(), opts.wait);
        threads.push(std::thread::spawn(move || serve(qid, &dev, wait, tx)));
    }
    drop(tx);
    let mut failed = None;
    for _ in 0..threads.len() {
        match rx.recv() {
            // Held to their queue's CPUs as the export's are.
            Ok(Ok((qid, tid))) if crate::queue::pin_threads(dev.dev_info.nr_hw_queues) => ctrl.set_thread_affinity(qid, tid),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(_) => failed = failed.or(Some("a queue thread ended".to_string())),
        }
    }
    let started = match failed {
        Some(e) => Err(Error(format!("ublk: {e}"))),
        None => ctrl.start_dev(&dev).map(|_| ()).map_err(|e| Error(format!("ublk: cannot start the null device: {}", ublk_error(&e)))),
    };
    if started.is_ok() {
        println!("/dev/ublkb{}", dev.dev_info.dev_id);
        let mut sig = 0;
        // SAFETY: `set` holds the blocked signals; `sig` is a valid int.
        unsafe { libc::sigwait(&set, &mut sig) };
    }
    // The queues' commands end with the device; their threads then end.
    let _ = ctrl.kill_dev();
    for t in threads {
        let _ = t.join();
    }
    drop(dev);
    let _ = ctrl.del_dev();
    started
}

/// One queue thread: fetches every tag, reports (queue id, thread id) or
/// why not on `ready`, then answers each request at once until the
/// kernel ends the commands.
fn serve(qid: u16, dev: &UblkDev, wait: Wait, ready: std::sync::mpsc::Sender<Result<(u16, libc::pid_t), String>>) {
    let depth = dev.dev_info.queue_depth;
    let setup = (|| {
        init_ring(depth as u32)?;
        let q = UblkQueue::new(qid, dev).map_err(|e| format!("cannot set up ublk queue {qid}: {}", ublk_error(&e)))?;
        let second = match wait {
            Wait::OneRing => None,
            Wait::TwoRings => Some(
                IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder()
                    .setup_single_issuer()
                    .setup_defer_taskrun()
                    .build(depth as u32 * 2)
                    .map_err(|e| format!("cannot make the second io_uring: {e}"))?,
            ),
        };
        Ok::<_, String>((q, second))
    })();
    let (q, mut second) = match setup {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let encode = dev.dev_info.flags & sys::UBLK_F_CMD_IOCTL_ENCODE as u64 != 0;
    let (fetch, commit) = if encode {
        (sys::UBLK_U_IO_FETCH_REQ, sys::UBLK_U_IO_COMMIT_AND_FETCH_REQ)
    } else {
        (sys::UBLK_IO_FETCH_REQ, sys::UBLK_IO_COMMIT_AND_FETCH_REQ)
    };
    let bytes = dev.dev_info.max_io_buf_bytes as usize;
    let mut bufs: Vec<uraid_core::IoBuf> = (0..depth).map(|_| uraid_core::IoBuf::new(bytes)).collect();
    let addr = |bufs: &mut Vec<uraid_core::IoBuf>, tag: u16| bufs[tag as usize].as_mut_ptr() as u64;
    for tag in 0..depth {
        // SAFETY: every tag's buffer lives in `bufs` until this thread
        // ends, after the kernel ended every command (or is forgotten).
        unsafe { push_ublk(&io_cmd(qid, tag, fetch, -1, addr(&mut bufs, tag))) };
    }
    if let Err(e) = libublk::io::with_task_io_ring_mut(|r| r.submit()) {
        let _ = ready.send(Err(format!("cannot fetch the requests of ublk queue {qid}: {e}")));
        std::mem::forget(bufs);
        return;
    }
    dev.notify_buffer_registration_complete(false);
    // SAFETY: gettid has no preconditions.
    let _ = ready.send(Ok((qid, unsafe { libc::gettid() })));
    let ring_fd = std::os::fd::AsRawFd::as_raw_fd(&q);
    let ts = types::Timespec::new().nsec(100_000_000);
    let mut cqes = Vec::with_capacity(depth as usize);
    let mut ended = 0;
    let mut poll_armed = false;
    while ended < depth as usize {
        libublk::io::with_task_io_ring_mut(|r| cqes.extend(r.completion().map(|c| (c.user_data() as u16, c.result()))));
        for (tag, res) in cqes.drain(..) {
            if res == sys::UBLK_IO_RES_OK as i32 {
                let answer = (q.get_iod(tag).nr_sectors << 9) as i32;
                // SAFETY: as above.
                unsafe { push_ublk(&io_cmd(qid, tag, commit, answer, addr(&mut bufs, tag))) };
            } else {
                ended += 1;
            }
        }
        if ended == depth as usize {
            break;
        }
        let res = match second.as_mut() {
            None => libublk::io::with_task_io_ring_mut(|r| r.submit_and_wait(1)),
            Some(ring) => {
                let _ = libublk::io::with_task_io_ring_mut(|r| r.submit());
                if !poll_armed {
                    let sqe = opcode::PollAdd::new(types::Fd(ring_fd), libc::POLLIN as u32).build().user_data(POLL_TAG);
                    // SAFETY: a poll names no memory.
                    let _ = unsafe { ring.submission().push(&sqe) };
                    poll_armed = true;
                }
                let r = ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
                for c in ring.completion() {
                    if c.user_data() == POLL_TAG {
                        poll_armed = false;
                    }
                }
                r
            }
        };
        if let Err(e) = res {
            if !matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::ETIME) | Some(libc::EAGAIN) | Some(libc::EBUSY)) {
                eprintln!("ublk-null: queue {qid}: io_uring_enter: {e}");
                std::mem::forget(bufs);
                return;
            }
        }
    }
}
