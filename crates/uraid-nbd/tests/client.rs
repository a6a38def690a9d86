//! uraid's NBD client (`uraid_nbd::client`, what `uraid bench nbd+unix://`
//! runs on) against real servers and a hostile one:
//!
//! - uraid's own server over a RAID 5 volume on `mem:` members: data
//!   written through the client at many sizes and queue depths reads back
//!   through the client and, independently, from the volume itself;
//! - nbdkit (the memory plugin; its blocksize-policy filter for block size
//!   constraints, its error filter for failing I/O), a server uraid did not
//!   write;
//! - a server that breaks the protocol in each of the ways a reply can, or
//!   goes silent: every request in flight fails with an error that says
//!   what happened, and nothing panics or hangs.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::io::member::{MemSpec, MemberSpec, OpenMode};
use uraid_core::raid::geometry::Geometry;
use uraid_core::{BlockDevice, BlockQueue, Completion, ErrorKind, IoBuf, Level, Member, Op, Request, Volume};
use uraid_nbd::client::{NbdDevice, NbdQueue, NbdUri};
use uraid_nbd::proto::*;
use uraid_nbd::{Export, Listener, Server, ServerOptions};

/// A directory of its own for one server's socket, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn sock(&self) -> PathBuf {
        self.0.join("s")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!("uraid-nbd-client-{}-{tag}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    Scratch(d)
}

/// uraid serve in this process: a RAID 5 volume (3 `mem:` members, 64 KiB
/// chunk, `stripes` stripes) exported as "vol" on a unix socket.
struct Uraid {
    server: Arc<Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    uri: NbdUri,
    volume: Arc<Volume>,
    _dir: Option<Scratch>,
}

impl Uraid {
    fn start(stripes: u64, opts: ServerOptions) -> Uraid {
        Uraid::start_on(stripes, opts, false)
    }

    /// Like [`start`](Self::start), on TCP (127.0.0.1, a port the kernel
    /// picks) when `tcp`.
    fn start_on(stripes: u64, opts: ServerOptions, tcp: bool) -> Uraid {
        let chunk = 64 << 10;
        let spec = MemberSpec::Mem(MemSpec { size: DATA_OFFSET + stripes * chunk, limits: Default::default() });
        let ms: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).expect("mem: member")).collect();
        let g = Geometry::new(Level::Raid5, 3, chunk, stripes * chunk).expect("geometry");
        let volume = Volume::new(Arc::new(ms), g, DATA_OFFSET).expect("volume");
        let server = Arc::new(Server::new(vec![Export { name: "vol".into(), description: "client test".into(), volume: volume.clone() }], opts));
        let (listener, uri, dir) = if tcp {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let uri = format!("nbd://{}/vol", l.local_addr().expect("address"));
            (Listener::Tcp(l), uri, None)
        } else {
            let dir = scratch("uraid");
            let sock = dir.sock();
            let l = UnixListener::bind(&sock).expect("bind");
            (Listener::Unix(l, sock.clone()), format!("nbd+unix:///vol?socket={}", sock.display()), Some(dir))
        };
        let s = server.clone();
        let thread = std::thread::spawn(move || s.run(&listener).expect("server runs"));
        Uraid { server, thread: Some(thread), uri: uri.parse().expect("uri"), volume, _dir: dir }
    }
}

impl Drop for Uraid {
    fn drop(&mut self) {
        self.server.shutdown_flag().store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// nbdkit on a unix socket in the foreground; killed when dropped.
struct Nbdkit {
    child: Child,
    uri: NbdUri,
    _dir: Scratch,
}

impl Nbdkit {
    fn start(args: &[&str]) -> Nbdkit {
        let dir = scratch("nbdkit");
        let sock = dir.sock();
        let child = Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(&sock)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nbdkit runs (scripts/test installs it)");
        let t = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "nbdkit did not come up: {args:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nbdkit { child, uri: format!("nbd+unix:///?socket={}", sock.display()).parse().expect("uri"), _dir: dir }
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn buf_of(data: &[u8]) -> IoBuf {
    let mut b = IoBuf::new(data.len());
    b.copy_from_slice(data);
    b
}

/// Drives `q` with `ops` (write or read, offset, len) keeping up to
/// `depth` in flight; a write puts new random bytes in `model` as it is
/// issued and sends them, a read is checked, when it completes, against
/// what `model` held when it was issued.
fn run_ops(q: &mut NbdQueue, model: &mut [u8], ops: &[(bool, u64, usize)], depth: usize, rng: &mut SmallRng) {
    let mut next = 0;
    let mut expect: Vec<Option<Vec<u8>>> = vec![None; ops.len()];
    let mut out: Vec<Completion> = Vec::new();
    let mut done = 0;
    let mut flying: Vec<usize> = Vec::new();
    while done < ops.len() {
        while next < ops.len() && q.in_flight() < depth {
            let (write, off, len) = ops[next];
            // Racing writes have no defined result: one that would overlap
            // a request in flight (or a read a write) waits for it.
            let clash = |k: &(bool, u64, usize)| (k.0 || write) && k.1 < off + len as u64 && off < k.1 + k.2 as u64;
            if flying.iter().any(|&i| clash(&ops[i])) {
                break;
            }
            flying.push(next);
            let (o, l) = (off as usize, len);
            let req = if write {
                rng.fill_bytes(&mut model[o..o + l]);
                Request::write(off, len, buf_of(&model[o..o + l]), next as u64)
            } else {
                expect[next] = Some(model[o..o + l].to_vec());
                Request::read(off, len, IoBuf::new(len), next as u64)
            };
            q.push(req).map_err(|r| r.error).expect("request taken");
            q.submit();
            next += 1;
        }
        q.wait(1, &mut out);
        for c in out.drain(..) {
            let i = c.tag as usize;
            flying.retain(|&f| f != i);
            assert_eq!(c.result.as_ref().map_err(|e| e.to_string()), Ok(&ops[i].2), "op {i} {:?}", ops[i]);
            if let Some(want) = &expect[i] {
                let got = &c.buf.as_ref().expect("read buffer")[..ops[i].2];
                assert!(got == &want[..], "read {i} at {} of {} bytes differs from what was written", ops[i].1, ops[i].2);
            }
            done += 1;
        }
    }
}

#[test]
fn data_written_through_the_client_reads_back_from_uraid_serve() {
    let u = Uraid::start(96, ServerOptions::default());
    let dev = NbdDevice::connect(&u.uri).expect("connect");
    let info = dev.info();
    assert_eq!(info.size, u.volume.capacity());
    assert!(!info.read_only());
    assert_eq!(dev.capacity(), u.volume.capacity());
    let size = dev.capacity() as usize;
    let bs = dev.block_size() as u64;
    let mut model = vec![0u8; size];
    let mut rng = SmallRng::seed_from_u64(7);
    // Write it all first (1 MiB writes, QD 4), so every read has a model.
    let all: Vec<(bool, u64, usize)> = (0..size / (1 << 20)).map(|i| (true, (i << 20) as u64, 1 << 20)).collect();
    let mut q = dev.open_queue(32).expect("queue");
    run_ops(&mut q, &mut model, &all, 4, &mut rng);
    // 4 KiB random reads and writes at QD 32; then large ones (more than
    // the receive buffer and the socket's buffers) mixed at QD 8, where a
    // client that blocked in a send would deadlock with the server.
    for (depth, sizes, n) in [(32, &[4096usize][..], 3000), (8, &[512, 65536, 1 << 20, 3 << 20][..], 120)] {
        let ops: Vec<(bool, u64, usize)> = (0..n)
            .map(|_| {
                let len = sizes[rng.random_range(0..sizes.len())].max(bs as usize);
                let off = rng.random_range(0..(size - len) as u64 / bs) * bs;
                (rng.random_bool(0.5), off, len)
            })
            .collect();
        run_ops(&mut q, &mut model, &ops, depth, &mut rng);
    }
    BlockQueue::flush(&mut q).expect("flush");
    drop(q);
    // Independently of the client: the volume holds the model.
    let back = u.volume.read_at(0, size).expect("volume read");
    assert!(back == model, "the volume does not hold what the client wrote");
    dev.flush().expect("flush on a connection of its own");
}

#[test]
fn requests_the_export_cannot_take_are_refused_before_they_are_sent() {
    let u = Uraid::start(16, ServerOptions::default());
    let dev = NbdDevice::connect(&u.uri).expect("connect");
    let mut q = dev.open_queue(2).expect("queue");
    let size = dev.capacity();
    let kind = |q: &mut NbdQueue, r: Request| q.push(r).err().map(|r| r.error.kind());
    assert_eq!(kind(&mut q, Request::read(size, 4096, IoBuf::new(4096), 0)), Some(ErrorKind::OutOfRange));
    assert_eq!(kind(&mut q, Request::read(size - 4096, 8192, IoBuf::new(8192), 0)), Some(ErrorKind::OutOfRange));
    assert_eq!(kind(&mut q, Request::read(100, 4096, IoBuf::new(4096), 0)), Some(ErrorKind::InvalidInput));
    assert_eq!(kind(&mut q, Request::read(0, 8192, IoBuf::new(4096), 0)), Some(ErrorKind::InvalidInput), "buffer shorter than the request");
    // Depth 2: the third is refused as Busy, the two complete.
    assert_eq!(kind(&mut q, Request::read(0, 4096, IoBuf::new(4096), 0)), None);
    assert_eq!(kind(&mut q, Request::read(4096, 4096, IoBuf::new(4096), 1)), None);
    assert_eq!(kind(&mut q, Request::read(8192, 4096, IoBuf::new(4096), 2)), Some(ErrorKind::Busy));
    let mut out = Vec::new();
    while q.in_flight() > 0 {
        q.wait(1, &mut out);
    }
    assert!(out.iter().all(|c| c.result.is_ok()));
    drop(q);
    drop(u);
    // A read-only export: writes are refused here, reads go.
    let u = Uraid::start(16, ServerOptions { read_only: true, ..Default::default() });
    let dev = NbdDevice::connect(&u.uri).expect("connect");
    assert!(dev.info().read_only());
    let mut q = dev.open_queue(1).expect("queue");
    let e = q.push(Request::write(0, 4096, IoBuf::new(4096), 0)).expect_err("write on a read-only export");
    assert!(e.error.to_string().contains("read-only"), "{}", e.error);
    assert_eq!(q.read_at(0, 4096).expect("read").len(), 4096);
}

#[test]
fn an_unknown_export_or_no_server_is_a_clear_error() {
    let u = Uraid::start(16, ServerOptions::default());
    let mut uri = u.uri.clone();
    uri.name = "nope".into();
    let e = NbdDevice::connect(&uri).expect_err("unknown export");
    assert!(e.to_string().contains("no export named 'nope'"), "{e}");
    let none: NbdUri = "nbd+unix:///vol?socket=/nonexistent/uraid.sock".parse().expect("uri");
    let e = NbdDevice::connect(&none).expect_err("no server");
    assert!(e.to_string().contains("cannot connect") && e.to_string().contains("is the server running"), "{e}");
}

#[test]
fn nbdkit_exports_are_read_and_written_within_their_block_sizes() {
    let k = Nbdkit::start(&[
        "--filter=blocksize-policy",
        "memory",
        "16M",
        "blocksize-minimum=4096",
        "blocksize-preferred=65536",
        "blocksize-maximum=1M",
        "blocksize-error-policy=error",
    ]);
    let dev = NbdDevice::connect(&k.uri).expect("connect to nbdkit");
    let i = dev.info();
    assert_eq!((i.size, i.min_block, i.preferred_block, i.max_payload), (16 << 20, 4096, 65536, 1 << 20), "{}", dev.describe());
    let mut q = dev.open_queue(16).expect("queue");
    // 512 bytes is below the export's minimum: refused here, not sent.
    let e = q.push(Request::read(0, 512, IoBuf::new(512), 0)).expect_err("below the minimum block");
    assert_eq!(e.error.kind(), ErrorKind::InvalidInput);
    let e = q.push(Request::read(0, 2 << 20, IoBuf::new(2 << 20), 0)).expect_err("above the maximum");
    assert_eq!(e.error.kind(), ErrorKind::InvalidInput);
    let mut model = vec![0u8; 16 << 20];
    let mut rng = SmallRng::seed_from_u64(11);
    let ops: Vec<(bool, u64, usize)> = (0..800)
        .map(|i| {
            let len = [4096usize, 65536, 1 << 20][i % 3];
            (i < 300 || rng.random_bool(0.4), rng.random_range(0..((16 << 20) - len as u64) / 4096) * 4096, len)
        })
        .collect();
    run_ops(&mut q, &mut model, &ops, 16, &mut rng);
    // Read everything back in 1 MiB pieces.
    let whole: Vec<(bool, u64, usize)> = (0..16).map(|i| (false, i << 20, 1 << 20)).collect();
    run_ops(&mut q, &mut model, &whole, 4, &mut rng);
    // Trim and zeroing, as nbdkit's memory plugin offers them.
    let mut out = Vec::new();
    q.push(Request { op: Op::WriteZeroes { no_hole: false }, offset: 0, len: 1 << 20, buf: None, tag: 1, fua: true }).map_err(|r| r.error).expect("zero");
    q.wait(1, &mut out);
    assert!(out.pop().expect("completion").result.is_ok());
    assert_eq!(q.read_at(0, 1 << 20).expect("read"), vec![0u8; 1 << 20]);
}

#[test]
fn errors_the_server_returns_fail_only_their_request() {
    let k = Nbdkit::start(&["--filter=error", "memory", "8M", "error=EIO", "error-pread-rate=100%"]);
    let dev = NbdDevice::connect(&k.uri).expect("connect");
    let mut q = dev.open_queue(4).expect("queue");
    let e = q.read_at(4096, 4096).expect_err("nbdkit fails every read");
    assert_eq!(e.errno(), libc::EIO);
    assert!(e.to_string().contains("the server failed Read of 4096 bytes at 4096"), "{e}");
    // The connection goes on: writes still work.
    q.write_at(0, &[7u8; 4096]).expect("write after a failed read");
    let k = Nbdkit::start(&["--filter=error", "memory", "8M", "error=ENOSPC", "error-pwrite-rate=100%"]);
    let mut q = NbdDevice::connect(&k.uri).expect("connect").open_queue(1).expect("queue");
    assert_eq!(q.write_at(0, &[1u8; 4096]).expect_err("write fails").errno(), libc::ENOSPC);
}

/// What a hostile server does after a correct handshake, once it has read
/// the first request.
#[derive(Clone, Copy, Debug)]
enum Misdeed {
    BadMagic,
    UnknownHandle,
    Structured,
    CloseInFlight,
    CloseMidData,
    /// Reads the request and answers nothing, with the connection open.
    Silent,
}

/// A server that negotiates correctly (size 1 MiB) and then misbehaves.
fn hostile(misdeed: Misdeed) -> (NbdUri, std::thread::JoinHandle<()>, Scratch) {
    let dir = scratch("hostile");
    let sock = dir.sock();
    let l = UnixListener::bind(&sock).expect("bind");
    let t = std::thread::spawn(move || {
        // The device's probe connection, then the queue's.
        for conn in 0..2 {
            let (mut s, _) = l.accept().expect("accept");
            handshake(&mut s, 1 << 20);
            let mut req = [0u8; REQUEST_LEN];
            if s.read_exact(&mut req).is_err() {
                continue;
            }
            let h = parse_request(&req).expect("request");
            if conn == 0 || h.cmd == CMD_DISC {
                continue;
            }
            match misdeed {
                Misdeed::BadMagic => s.write_all(&[0xab; 16]).expect("send"),
                Misdeed::UnknownHandle => s.write_all(&simple_reply(h.handle + 1000, 0)).expect("send"),
                Misdeed::Structured => s.write_all(&structured_header(h.handle, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0)).expect("send"),
                Misdeed::CloseInFlight => {}
                // Longer than the client's reply timeout (1 s) here.
                Misdeed::Silent => std::thread::sleep(Duration::from_secs(4)),
                Misdeed::CloseMidData => {
                    s.write_all(&simple_reply(h.handle, 0)).expect("send");
                    s.write_all(&[0u8; 100]).expect("send");
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    (format!("nbd+unix:///x?socket={}", sock.display()).parse().expect("uri"), t, dir)
}

/// The server's half of a fixed newstyle handshake that answers GO with
/// the export's size.
fn handshake(s: &mut UnixStream, size: u64) {
    handshake_flags(s, size, TF_HAS_FLAGS | TF_SEND_FLUSH);
}

/// [`handshake`] telling the transmission flags `flags`.
fn handshake_flags(s: &mut UnixStream, size: u64, flags: u16) {
    greet_and_read_go(s);
    let mut info = Vec::new();
    info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    info.extend_from_slice(&size.to_be_bytes());
    info.extend_from_slice(&flags.to_be_bytes());
    s.write_all(&option_reply(OPT_GO, REP_INFO, &info)).expect("info");
    s.write_all(&option_reply(OPT_GO, REP_ACK, &[])).expect("ack");
}

#[test]
fn a_server_that_breaks_the_protocol_fails_the_requests_in_flight_clearly() {
    for (m, says) in [
        (Misdeed::BadMagic, "bad magic"),
        (Misdeed::UnknownHandle, "which no request in flight has"),
        (Misdeed::Structured, "structured reply"),
        (Misdeed::CloseInFlight, "closed the connection with requests in flight"),
        (Misdeed::CloseMidData, "closed the connection in the middle of a reply"),
        (Misdeed::Silent, "the server sent nothing for 1 s with 1 requests in flight"),
    ] {
        let (uri, t, _dir) = hostile(m);
        let mut dev = NbdDevice::connect(&uri).expect("connect");
        dev.set_reply_timeout(Duration::from_secs(1));
        let mut q = dev.open_queue(4).expect("queue");
        q.push(Request::read(0, 4096, IoBuf::new(4096), 9)).map_err(|r| r.error).expect("push");
        let mut out = Vec::new();
        let t0 = Instant::now();
        while q.in_flight() > 0 {
            q.wait(1, &mut out);
            assert!(t0.elapsed() < Duration::from_secs(10), "{m:?}: no completion");
        }
        let c = out.pop().expect("a completion");
        assert_eq!(c.tag, 9);
        let e = c.result.expect_err("the request fails");
        assert!(e.to_string().contains(says), "{m:?}: {e}");
        assert!(c.buf.is_some(), "the buffer comes back");
        // Nothing more is taken on a connection out of step.
        assert!(!q.has_room());
        assert!(q.push(Request::read(0, 4096, IoBuf::new(4096), 1)).is_err());
        drop(q);
        t.join().expect("hostile server thread");
    }
}

#[test]
fn a_broken_handshake_is_a_clear_error() {
    type Act = Box<dyn Fn(&mut UnixStream) + Send>;
    let cases: Vec<(&str, Act)> = vec![
        ("not an NBD server", Box::new(|s: &mut UnixStream| s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").expect("send"))),
        (
            "oldstyle",
            Box::new(|s: &mut UnixStream| {
                let mut g = NBDMAGIC.to_be_bytes().to_vec();
                g.extend_from_slice(&0x0000_4202_8186_1253_u64.to_be_bytes());
                g.extend_from_slice(&[0u8; 2]);
                s.write_all(&g).expect("send");
            }),
        ),
        (
            "without telling the export's size",
            Box::new(|s: &mut UnixStream| {
                greet_and_read_go(s);
                s.write_all(&option_reply(OPT_GO, REP_ACK, &[])).expect("ack");
            }),
        ),
        (
            "at most",
            Box::new(|s: &mut UnixStream| {
                greet_and_read_go(s);
                let mut r = option_reply(OPT_GO, REP_INFO, &[]);
                r[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
                s.write_all(&r).expect("send");
            }),
        ),
        (
            "break the spec's rules",
            Box::new(|s: &mut UnixStream| {
                greet_and_read_go(s);
                let mut info = INFO_EXPORT.to_be_bytes().to_vec();
                info.extend_from_slice(&(1u64 << 20).to_be_bytes());
                info.extend_from_slice(&TF_HAS_FLAGS.to_be_bytes());
                s.write_all(&option_reply(OPT_GO, REP_INFO, &info)).expect("info");
                let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                for v in [3000u32, 4096, 1 << 20] {
                    bs.extend_from_slice(&v.to_be_bytes());
                }
                s.write_all(&option_reply(OPT_GO, REP_INFO, &bs)).expect("block sizes");
                s.write_all(&option_reply(OPT_GO, REP_ACK, &[])).expect("ack");
            }),
        ),
        ("closed the connection", Box::new(|s: &mut UnixStream| greet_and_read_go(s))),
    ];
    for (says, act) in cases {
        let dir = scratch("handshake");
        let sock = dir.sock();
        let l = UnixListener::bind(&sock).expect("bind");
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            act(&mut s);
        });
        let uri: NbdUri = format!("nbd+unix:///x?socket={}", sock.display()).parse().expect("uri");
        let e = NbdDevice::connect(&uri).expect_err(says);
        assert!(e.to_string().contains(says), "wanted '{says}': {e}");
        t.join().expect("server thread");
    }
}

fn greet_and_read_go(s: &mut UnixStream) {
    let mut g = NBDMAGIC.to_be_bytes().to_vec();
    g.extend_from_slice(&IHAVEOPT.to_be_bytes());
    g.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&g).expect("greeting");
    let mut f = [0u8; 4];
    s.read_exact(&mut f).expect("flags");
    let mut oh = [0u8; 16];
    s.read_exact(&mut oh).expect("option");
    let o = parse_option_header(&oh).expect("header");
    let mut d = vec![0u8; o.len as usize];
    s.read_exact(&mut d).expect("data");
}


/// A server that does not offer FLUSH may not be sent one (the spec): the
/// client completes it at once, and the queue is empty afterwards. The
/// server here answers nothing, so a FLUSH sent would never complete.
#[test]
fn a_flush_the_export_does_not_take_completes_at_once() {
    let dir = scratch("noflush");
    let sock = dir.sock();
    let l = UnixListener::bind(&sock).expect("bind");
    let t = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = l.accept().expect("accept");
            handshake_flags(&mut s, 1 << 20, TF_HAS_FLAGS);
            // Whatever comes (a DISC at the end), nothing is answered.
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
            assert!(sink.len() % REQUEST_LEN == 0 && sink.chunks(REQUEST_LEN).all(|r| parse_request(r.try_into().unwrap()).is_some_and(|h| h.cmd == CMD_DISC)), "the client sent a request other than DISC: {sink:?}");
        }
    });
    let uri: NbdUri = format!("nbd+unix:///x?socket={}", sock.display()).parse().expect("uri");
    let dev = NbdDevice::connect(&uri).expect("connect");
    let mut q = dev.open_queue(2).expect("queue");
    BlockQueue::flush(&mut q).expect("a flush with nothing to flush");
    assert_eq!(q.in_flight(), 0, "the flush is still counted in flight");
    drop(q);
    t.join().expect("server thread");
}

#[test]
fn the_client_speaks_tcp_too() {
    let u = Uraid::start_on(16, ServerOptions::default(), true);
    assert!(u.uri.to_string().starts_with("nbd://127.0.0.1:"), "{}", u.uri);
    let dev = NbdDevice::connect(&u.uri).expect("connect over TCP");
    let mut q = dev.open_queue(8).expect("queue");
    let mut model = vec![0u8; dev.capacity() as usize];
    let mut rng = SmallRng::seed_from_u64(3);
    let ops: Vec<(bool, u64, usize)> = (0..400).map(|i| (i < 200 || rng.random_bool(0.5), rng.random_range(0..(model.len() as u64 - 65536) / 4096) * 4096, 65536)).collect();
    run_ops(&mut q, &mut model, &ops, 8, &mut rng);
    drop(q);
    let whole = u.volume.read_at(0, model.len()).expect("volume read");
    assert!(whole == model, "the volume does not hold what was written over TCP");
}

/// The server passes a TRIM down only while the served volume's stack says
/// it discards (`Caps::discard`, asked of the connection's queue): on
/// RAID 5 over `mem:` members it does (the range then reads back as
/// zeros); once a member refused hole punching it does not, and the
/// server answers TRIM at once with the data kept (a discard is a hint).
/// The client's caps are what the handshake said.
#[test]
fn a_trim_goes_down_only_while_the_volume_says_it_discards() {
    let u = Uraid::start(16, ServerOptions::default());
    let dev = NbdDevice::connect(&u.uri).expect("connect");
    let caps = dev.caps();
    assert!(caps.discard && caps.write_zeroes && caps.flush && caps.fua, "{caps:?}");
    assert_eq!(caps.capacity, u.volume.caps().capacity);
    let mut q = dev.open_queue(4).expect("queue");
    let data = vec![0x77u8; 128 << 10];
    let trim = |q: &mut NbdQueue| q.run(Request { op: Op::Discard, offset: 0, len: data.len(), buf: None, tag: 1, fua: false }).result.expect("trim");
    q.write_at(0, &data).unwrap();
    trim(&mut q);
    assert!(q.read_at(0, data.len()).unwrap().iter().all(|&b| b == 0), "a TRIM the volume takes left the data");
    u.volume.raid().members()[1].set_no_fallocate();
    assert!(!u.volume.caps().discard);
    q.write_at(0, &data).unwrap();
    trim(&mut q);
    assert!(q.read_at(0, data.len()).unwrap() == data, "a TRIM went down to a volume that does not discard");
}
