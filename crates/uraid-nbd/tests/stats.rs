//! [`Server::stats`] counts what clients of a running server do: a client
//! over a unix socket sends known requests to the test server's export
//! (`tests/harness/mod.rs`), and the export's figures follow, also across
//! a volume replacement and after the connection ends.

mod harness;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::*;
use uraid_nbd::proto::*;
use uraid_nbd::{Listener, Server, StatsSnapshot, LATENCY_BOUNDS_US};

/// A client past NBD_OPT_GO of the export, with simple replies.
struct Client(UnixStream);

impl Client {
    fn connect(path: &std::path::Path) -> Client {
        let mut s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).expect("greeting");
        s.write_all(&handshake()).expect("GO");
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h).expect("option reply");
            assert_eq!(u64::from_be_bytes(h[..8].try_into().unwrap()), OPT_REPLY_MAGIC);
            let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
            s.read_exact(&mut data).expect("option reply data");
            match typ {
                REP_ACK => return Client(s),
                REP_INFO => {}
                _ => panic!("GO refused: {typ:#x}"),
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).expect("send");
    }

    /// Reads a simple reply (and `data` bytes after a successful one);
    /// returns its handle and error.
    fn reply(&mut self, data: usize) -> (u64, u32) {
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).expect("reply");
        assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), SIMPLE_REPLY_MAGIC);
        let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
        if err == 0 && data > 0 {
            self.0.read_exact(&mut vec![0u8; data]).expect("read data");
        }
        (u64::from_be_bytes(h[8..].try_into().unwrap()), err)
    }
}

/// The export's figures once `done` holds of them (a reply is counted
/// just after the server hands it to the socket, so the client may see it
/// first); fails after 5 s.
fn stats_when(server: &Server, done: impl Fn(&StatsSnapshot) -> bool) -> StatsSnapshot {
    let t = Instant::now();
    loop {
        let s = server.stats(EXPORT).expect("the export has stats");
        if done(&s) {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the figures never got there: {s:#?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn stats_count_the_requests_of_every_connection() {
    let server = Arc::new(test_server());
    let path = std::env::temp_dir().join(format!("uraid-nbd-stats-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = Listener::Unix(UnixListener::bind(&path).expect("bind"), path.clone());
    let running = {
        let server = server.clone();
        std::thread::spawn(move || server.run(&listener).expect("run"))
    };
    assert_eq!(server.stats(EXPORT), Some(StatsSnapshot::default()));
    assert_eq!(server.stats("nosuch"), None);

    let mut c = Client::connect(&path);
    let s = stats_when(&server, |s| s.connections == 1);
    assert_eq!(s.connections_total, 1);

    // 6 WRITEs of 8 KiB, pipelined, then 10 READs of 4 KiB, 3 FLUSHes,
    // and a READ past the end (an error).
    for i in 0..6u64 {
        c.send(&request(0, CMD_WRITE, i, i * 8192, 8192));
        c.send(&[i as u8; 8192]);
    }
    for _ in 0..6 {
        assert_eq!(c.reply(0).1, 0);
    }
    for i in 0..10u64 {
        c.send(&request(0, CMD_READ, 100 + i, i * 4096, 4096));
    }
    for _ in 0..10 {
        assert_eq!(c.reply(4096).1, 0);
    }
    for i in 0..3u64 {
        c.send(&request(0, CMD_FLUSH, 200 + i, 0, 0));
    }
    c.send(&request(0, CMD_READ, 300, 2 << 20, 4096));
    let mut errors = 0;
    for _ in 0..4 {
        errors += (c.reply(0).1 != 0) as u32;
    }
    assert_eq!(errors, 1);
    let s = stats_when(&server, |s| s.flushes == 3 && s.reads == 11);
    assert_eq!((s.reads, s.writes, s.flushes, s.trims, s.write_zeroes), (11, 6, 3, 0, 0));
    assert_eq!((s.read_bytes, s.write_bytes, s.errors), (10 * 4096, 6 * 8192, 1));
    assert_eq!((s.in_flight, s.connections, s.connections_total), (0, 1, 1));
    for (h, n) in [(&s.read_latency, 11), (&s.write_latency, 6)] {
        assert_eq!(h.count, n);
        assert_eq!(h.counts.len(), LATENCY_BOUNDS_US.len() + 1);
        assert_eq!(h.counts.iter().sum::<u64>(), n);
        // Memory drives: nothing near the +Inf bucket.
        assert_eq!(h.counts[LATENCY_BOUNDS_US.len()], 0);
        assert!(h.mean_us() < 1_000_000.0, "{h:?}");
    }

    // A WRITE whose payload has not all come is in flight.
    c.send(&request(0, CMD_WRITE, 400, 0, 8192));
    c.send(&[7u8; 4096]);
    stats_when(&server, |s| s.in_flight == 1);
    c.send(&[7u8; 4096]);
    assert_eq!(c.reply(0), (400, 0));
    let s = stats_when(&server, |s| s.writes == 7);
    assert_eq!((s.in_flight, s.write_bytes, s.write_latency.count), (0, 7 * 8192, 7));

    // The export moves to another volume: the figures go on.
    server.replace_volume(EXPORT, server.volume(EXPORT).expect("volume")).expect("replace");
    c.send(&request(0, CMD_READ, 500, 0, 4096));
    assert_eq!(c.reply(4096), (500, 0));
    let before_close = stats_when(&server, |s| s.reads == 12);

    // The connection ends: its counts stay, it is no longer open.
    c.send(&request(0, CMD_DISC, 600, 0, 0));
    drop(c);
    let s = stats_when(&server, |s| s.connections == 0);
    assert_eq!(s, StatsSnapshot { connections: 0, ..before_close.clone() });

    // A second connection adds to them.
    let mut c = Client::connect(&path);
    c.send(&request(0, CMD_WRITE, 1, 0, 4096));
    c.send(&[1u8; 4096]);
    assert_eq!(c.reply(0), (1, 0));
    let s = stats_when(&server, |s| s.writes == 8);
    assert_eq!((s.reads, s.write_bytes, s.connections, s.connections_total, s.in_flight), (12, 7 * 8192 + 4096, 1, 2, 0));
    let d = s.delta(&before_close);
    assert_eq!((d.writes, d.write_bytes, d.write_latency.count, d.reads, d.connections_total), (1, 4096, 1, 0, 1));
    // The default export's name is "".
    assert_eq!(server.stats(""), Some(s));

    drop(c);
    stats_when(&server, |s| s.connections == 0);
    server.shutdown_flag().store(true, std::sync::atomic::Ordering::Relaxed);
    running.join().expect("server thread");
}
