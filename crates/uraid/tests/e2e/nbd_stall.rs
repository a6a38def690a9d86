//! `uraid serve` against clients that announce 32 MiB WRITEs, send 1000
//! bytes of the payload and go silent (issue 28, item 1): an honest
//! client's reads are answered at once meanwhile, the server's resident
//! memory stays within the README's bound, and each silent payload's
//! connection is closed after `--payload-timeout`, its buffers freed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use uraid_core::{BlockDevice, BlockQueue};
use uraid_nbd::client::{NbdDevice, NbdUri};

use crate::util::*;

const MIB: u64 = 1 << 20;
/// The largest WRITE a client may send, bytes.
const PAYLOAD: u32 = 32 << 20;

/// A RAID 5 of 128 MiB over three sparse files, named `name`.
fn array(dir: &std::path::Path, name: &str) -> Vec<PathBuf> {
    let m = sparse_files(dir, "m", 3, 64 << 20);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", name], &strs(&m)));
    m
}

/// A client that completes the handshake of export `name` by hand,
/// announces a 32 MiB WRITE at `offset`, sends 1000 bytes of its payload
/// and then nothing.
fn staller(port: &str, name: &str, offset: u64) -> TcpStream {
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).expect("greeting");
    assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
    // Fixed newstyle, no zeroes; NBD_OPT_GO (7) of `name`, no info asked.
    let mut go = 3u32.to_be_bytes().to_vec();
    go.extend(b"IHAVEOPT");
    go.extend(7u32.to_be_bytes());
    go.extend((name.len() as u32 + 6).to_be_bytes());
    go.extend((name.len() as u32).to_be_bytes());
    go.extend(name.as_bytes());
    go.extend(0u16.to_be_bytes());
    s.write_all(&go).expect("GO");
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).expect("option reply");
        let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
        s.read_exact(&mut data).expect("option reply data");
        match u32::from_be_bytes(h[12..16].try_into().unwrap()) {
            1 => break, // NBD_REP_ACK
            3 => {}     // NBD_REP_INFO
            t => panic!("GO refused ({t:#x}): {}", String::from_utf8_lossy(&data)),
        }
    }
    // NBD_CMD_WRITE (1), then the first 1000 bytes of its payload.
    let mut w = 0x2560_9513u32.to_be_bytes().to_vec();
    w.extend(0u16.to_be_bytes());
    w.extend(1u16.to_be_bytes());
    w.extend(1u64.to_be_bytes());
    w.extend(offset.to_be_bytes());
    w.extend(PAYLOAD.to_be_bytes());
    w.extend([0xa5u8; 1000]);
    s.write_all(&w).expect("WRITE");
    s
}

/// Resident memory of process `pid`, MiB.
fn rss_mib(pid: u32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = st.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    kib / 1024
}

/// uraid's own client on export `name`, giving up after 10 s without a
/// reply.
fn device(port: &str, name: &str) -> NbdDevice {
    let uri: NbdUri = format!("nbd://127.0.0.1:{port}/{name}").parse().expect("uri");
    let mut dev = NbdDevice::connect(&uri).expect("connect");
    dev.set_reply_timeout(Duration::from_secs(10));
    dev
}

#[test]
fn an_honest_read_is_answered_at_once_while_32_clients_stall_their_write_payloads() {
    let _g = shared();
    let d = tmpdir();
    let m = array(d.path(), "stall");
    // The defaults: 512M of buffers, 64 connections, 30 s payload timeout.
    let (srv, port) = serve_tcp(&m, &[]);
    let pid = srv.0.id();
    let base = rss_mib(pid);
    let stallers: Vec<TcpStream> = (0..32u64).map(|i| staller(&port, "stall", (i % 3) * PAYLOAD as u64)).collect();
    // The server takes what it will of them.
    let mut peak = base;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        peak = peak.max(rss_mib(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    let dev = device(&port, "stall");
    let mut q = dev.open_queue(1).expect("queue");
    let mut lat = Vec::new();
    for (i, len) in [4096usize, 4096, 4096, 4096, 4096, 1 << 20].into_iter().enumerate() {
        let t = Instant::now();
        let got = q.read_at(i as u64 * MIB, len).unwrap_or_else(|e| panic!("the honest {len}-byte read was not answered: {e}"));
        lat.push((len, t.elapsed()));
        assert_eq!(got.len(), len);
        peak = peak.max(rss_mib(pid));
    }
    let worst = lat.iter().filter(|(l, _)| *l == 4096).map(|(_, t)| *t).max().unwrap();
    for (len, t) in &lat {
        eprintln!("honest {len}-byte read with 32 stalled 32 MiB writers: {:.2} ms", t.as_secs_f64() * 1e3);
    }
    eprintln!("worst 4 KiB read latency: {:.2} ms (target 1 s)", worst.as_secs_f64() * 1e3);
    // The README's bound: --buffer-memory (512M) + about 1 MiB per
    // connection (34 here: the stallers, the client's probe and queue) +
    // a few MiB.
    let bound = base + 512 + 34 + 8;
    eprintln!("server RSS: {base} MiB at the start, {peak} MiB at the peak with 32 stalled writers (bound {bound} MiB)");
    assert!(worst < Duration::from_secs(10), "an honest 4 KiB read took {worst:?}");
    assert!(peak <= bound, "RSS rose from {base} to {peak} MiB: over the bound of {bound} MiB");
    drop(stallers);
}

#[test]
fn write_payloads_that_stop_arriving_are_cut_after_the_payload_timeout() {
    let _g = shared();
    let d = tmpdir();
    let m = array(d.path(), "cut");
    let (srv, port) = serve_tcp(&m, &["--payload-timeout", "1"]);
    let pid = srv.0.id();
    let mut stallers: Vec<TcpStream> = (0..32u64).map(|i| staller(&port, "cut", (i % 3) * PAYLOAD as u64)).collect();
    let t0 = Instant::now();
    // Those that hold a buffer are cut after 1 s, the others then get one
    // and are cut 1 s later.
    for (i, s) in stallers.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let mut b = [0u8; 64];
        loop {
            match s.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "stalled writer {i} still connected after {:?}", t0.elapsed());
        }
    }
    eprintln!("32 stalled writers cut in {:.1} s with --payload-timeout 1", t0.elapsed().as_secs_f64());
    // The server says so, once for each; its stderr is a file it holds.
    let log = std::fs::read_to_string(format!("/proc/{pid}/fd/2")).expect("the server's stderr");
    let cut: Vec<&str> = log.lines().filter(|l| l.contains("then nothing for 1 s (--payload-timeout)")).collect();
    eprintln!("{}", cut.first().copied().unwrap_or("(no line)"));
    assert_eq!(cut.len(), 32, "not one line per cut connection:\n{log}");
    assert!(cut[0].contains("sent 1000 of the 33554432 bytes of a WRITE payload"), "{}", cut[0]);
    // Their buffers are back: an honest 32 MiB write and read go.
    let data: Vec<u8> = (0..PAYLOAD as usize).map(|i| (i / 4096) as u8).collect();
    let mut q = device(&port, "cut").open_queue(1).expect("queue");
    q.write_at(0, &data).expect("an honest 32 MiB write after the cut");
    assert!(q.read_at(0, data.len()).expect("32 MiB read") == data, "the 32 MiB write did not read back");
    eprintln!("server RSS after the cut: {} MiB", rss_mib(pid));
}
