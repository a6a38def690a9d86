//! WRITE payloads that stop arriving, against a real server on a unix
//! socket (a RAID 5 volume on `mem:` members, served by [`Server::run`]):
//! the connection is closed after the payload timeout and its buffers go
//! back to the pool; meanwhile every other connection is served, since
//! each has a reserve of the buffer memory no other connection can take,
//! and buffers an idle connection keeps for reuse are given back when
//! another one waits for room.

mod harness;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::*;
use uraid_core::{BlockDevice, BlockQueue};
use uraid_nbd::client::{NbdDevice, NbdUri};
use uraid_nbd::proto::*;
use uraid_nbd::{Listener, Server, ServerOptions};

const MIB: usize = 1 << 20;

/// A server running on a unix socket of its own; stopped when dropped.
struct Running {
    server: Arc<Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// A directory of its own for the socket, removed when dropped.
    dir: PathBuf,
}

impl Running {
    /// Serves a 64 MiB volume with `opts`.
    fn start(opts: ServerOptions) -> Running {
        let server = Arc::new(mem_server(512, opts));
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!("uraid-nbd-stall-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("socket dir");
        let l = UnixListener::bind(dir.join("s")).expect("bind");
        let listener = Listener::Unix(l, dir.join("s"));
        let s = server.clone();
        let thread = std::thread::spawn(move || s.run(&listener).expect("server runs"));
        Running { server, thread: Some(thread), dir }
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("s")
    }

    /// uraid's own client on the export, giving up after 10 s without a
    /// reply.
    fn device(&self) -> NbdDevice {
        let uri: NbdUri = format!("nbd+unix:///{EXPORT}?socket={}", self.sock().display()).parse().expect("uri");
        let mut dev = NbdDevice::connect(&uri).expect("connect");
        dev.set_reply_timeout(Duration::from_secs(10));
        dev
    }

    /// A client in the transmission phase, by a handshake made by hand.
    fn raw(&self) -> UnixStream {
        let mut s = UnixStream::connect(self.sock()).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).expect("greeting");
        s.write_all(&handshake()).expect("handshake");
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h).expect("option reply");
            let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
            s.read_exact(&mut data).expect("option reply data");
            assert_eq!(typ & 0x8000_0000, 0, "GO refused: {}", String::from_utf8_lossy(&data));
            if typ == REP_ACK {
                return s;
            }
        }
    }

    /// A client that sends a 32 MiB WRITE at `offset` and 1000 bytes of
    /// its payload, then nothing.
    fn staller(&self, offset: u64) -> UnixStream {
        let mut s = self.raw();
        let mut r = request(0, CMD_WRITE, 1, offset, MAX_PAYLOAD);
        r.extend([0x5a; 1000]);
        s.write_all(&r).expect("WRITE header");
        s
    }

    /// Waits (at most 10 s) until the connections hold `test` of buffer
    /// bytes.
    fn wait_buffers(&self, what: &str, test: impl Fn(usize) -> bool) {
        let t0 = Instant::now();
        while !test(self.server.buffer_bytes()) {
            assert!(t0.elapsed() < Duration::from_secs(10), "{what}: the connections hold {} bytes", self.server.buffer_bytes());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.shutdown_flag().store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads until the server closes `s`; the time that took (None: still
/// open after 10 s).
fn closed_within_10s(s: &mut UnixStream) -> Option<Duration> {
    let t0 = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut b = [0u8; 4096];
    while t0.elapsed() < Duration::from_secs(10) {
        match s.read(&mut b) {
            Ok(0) => return Some(t0.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(t0.elapsed()),
        }
    }
    None
}

/// Writes 32 MiB of a pattern through uraid's client and reads it back.
fn big_round_trip(dev: &NbdDevice, seed: u8) {
    let data: Vec<u8> = (0..MAX_PAYLOAD as usize).map(|i| (i / 4096) as u8 ^ seed).collect();
    let mut q = dev.open_queue(1).expect("queue");
    q.write_at(0, &data).expect("32 MiB write");
    assert!(q.read_at(0, data.len()).expect("32 MiB read") == data, "the 32 MiB write did not read back");
}

#[test]
fn a_write_payload_that_stops_arriving_is_cut_after_the_timeout_and_its_buffers_freed() {
    let timeout = Duration::from_secs(1);
    let r = Running::start(ServerOptions { payload_timeout: timeout, ..Default::default() });
    let mut taken = r.staller(0);
    let sent = Instant::now();
    r.wait_buffers("a 32 MiB payload being read", |b| b >= MAX_PAYLOAD as usize);
    // A WRITE past the end is refused at once; its payload is skipped as
    // it comes, and stops coming too.
    let mut refused = r.raw();
    let mut w = request(0, CMD_WRITE, 2, 64 << 20, MAX_PAYLOAD);
    w.extend([1u8; 1000]);
    refused.write_all(&w).unwrap();
    let mut reply = [0u8; 16];
    refused.read_exact(&mut reply).expect("an error reply to the WRITE past the end");
    assert_eq!(u32::from_be_bytes(reply[4..8].try_into().unwrap()), ENOSPC);
    closed_within_10s(&mut taken).expect("the stalled WRITE's connection was not closed within 10 s");
    let cut = sent.elapsed();
    eprintln!("stalled payload: connection closed {:.2} s after its last byte (payload timeout {timeout:?})", cut.as_secs_f64());
    // Never before the payload stopped for the whole timeout.
    assert!(cut >= timeout, "closed {cut:?} after the last byte, before the payload timeout");
    assert!(closed_within_10s(&mut refused).is_some(), "the stalled skipped payload's connection was not closed");
    r.wait_buffers("every buffer back once the connections are closed", |b| b == 0);
    // An honest client's 32 MiB write, which needs that memory, goes.
    big_round_trip(&r.device(), 1);
}

#[test]
fn small_requests_are_served_while_stalled_payloads_hold_every_shared_byte() {
    // 88 MiB shared (96 MiB - 8 connections x 1 MiB reserved): two 32 MiB
    // payloads fit, the third stalled writer waits for room.
    let opts = ServerOptions {
        conn_buffer_bytes: 32 * MIB,
        buffer_bytes: 96 * MIB,
        max_connections: 8,
        payload_timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let r = Running::start(opts);
    assert_eq!(r.server.reserve_bytes(), MIB);
    let _stallers: Vec<UnixStream> = (0..4).map(|i| r.staller(i * MAX_PAYLOAD as u64 / 2)).collect();
    r.wait_buffers("two stalled payloads", |b| b >= 2 * MAX_PAYLOAD as usize);
    std::thread::sleep(Duration::from_millis(300));
    let dev = r.device();
    let mut q = dev.open_queue(4).expect("queue");
    for len in [4096, 64 << 10, MIB] {
        let t0 = Instant::now();
        let got = q.read_at(40 * MIB as u64, len).unwrap_or_else(|e| panic!("a {len}-byte read next to stalled writers: {e}"));
        eprintln!("{len}-byte read answered in {:.1} ms next to 4 stalled 32 MiB writers", t0.elapsed().as_secs_f64() * 1e3);
        assert_eq!(got.len(), len);
    }
    q.write_at(48 * MIB as u64, &[7u8; 4096]).expect("a 4 KiB write next to stalled writers");
    assert!(r.server.buffer_bytes() <= 96 * MIB, "the connections hold {} bytes, over the pool", r.server.buffer_bytes());
}

#[test]
fn buffers_an_idle_connection_keeps_are_given_back_when_another_waits() {
    // 40 MiB shared (44 MiB - 4 x 1 MiB): an idle connection keeping 16 MiB
    // for reuse would leave too little for a 32 MiB write.
    let opts = ServerOptions { conn_buffer_bytes: 32 * MIB, buffer_bytes: 44 * MIB, max_connections: 4, ..Default::default() };
    let r = Running::start(opts);
    let mut idle = r.raw();
    // Eight 2 MiB READs in one send: read together, eight buffers, kept
    // for reuse once the replies are sent.
    let reqs: Vec<u8> = (0..8u64).flat_map(|i| request(0, CMD_READ, i, i * 2 * MIB as u64, 2 * MIB as u32)).collect();
    idle.write_all(&reqs).unwrap();
    let mut back = vec![0u8; 16 + 2 * MIB];
    for _ in 0..8 {
        idle.read_exact(&mut back).expect("READ reply");
        assert_eq!(u32::from_be_bytes(back[4..8].try_into().unwrap()), 0, "READ failed");
    }
    r.wait_buffers("the idle connection's buffers kept for reuse", |b| b >= 12 * MIB);
    let t0 = Instant::now();
    big_round_trip(&r.device(), 2);
    eprintln!("32 MiB write and read next to an idle connection that kept 16 MiB: {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    drop(idle);
}
