//! `uraid serve` against hostile and failing clients: each test is one
//! behaviour that used to stop, exhaust or hang the server (clients that
//! hang up with replies due, WRITE headers without payloads, reads never
//! read, connections past the limit, stalled handshakes, endless options,
//! descriptors running out, a TLS client that goes away), then a chaos run
//! of them all against a RAID 5 export while fio verifies its own data on
//! a connection of its own and real clients are killed with SIGKILL.
//!
//! Every test ends with a SIGTERM that must stop the server cleanly in
//! under 5 s ("stopped cleanly", exit 0), whatever the clients still do.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::RngCore;

use crate::util::*;

/// The NBD magic numbers and codes the raw clients use (NBD proto.md).
const OPT_GO: u32 = 7;
const OPT_LIST: u32 = 3;
const OPT_STARTTLS: u32 = 5;
const REP_ACK: u32 = 1;
const REP_ERR_POLICY: u32 = 0x8000_0002;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;

/// A RAID 5 over three 64 MiB files (128 MiB of capacity) named `name`.
fn raid5(dir: &Path, name: &str) -> Vec<PathBuf> {
    let m = sparse_files(dir, "m", 3, 64 << 20);
    let mut args = vec!["create", "--level", "5", "--chunk", "64K", "--name", name];
    args.extend(m.iter().map(|p| s(p)));
    uraid_ok(&args);
    m
}

/// A running `uraid serve`; its stderr goes to a file (read at the end).
struct Srv {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl Srv {
    fn start(members: &[PathBuf], dir: &Path, extra: &[&str]) -> Srv {
        Srv::start_with(members, dir, extra, |_| {})
    }

    fn start_with(members: &[PathBuf], dir: &Path, extra: &[&str], tweak: impl FnOnce(&mut Command)) -> Srv {
        let socket = dir.join("s.sock");
        let log = dir.join("serve.log");
        let mut cmd = Command::new(URAID);
        cmd.arg("serve").arg("--socket").arg(&socket).args(extra).args(members);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
        tweak(&mut cmd);
        let mut child = cmd.spawn().expect("cannot start uraid serve");
        let t0 = Instant::now();
        while UnixStream::connect(&socket).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("uraid serve exited ({st}) before listening: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "uraid serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Srv { child: Some(child), socket, log }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// Panics with the server's log when it is no longer running.
    fn assert_up(&mut self, when: &str) {
        if let Ok(Some(st)) = self.child.as_mut().expect("running").try_wait() {
            panic!("uraid serve died {when}: {st}\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }

    /// Resident memory now, in MiB.
    fn rss_mib(&self) -> u64 {
        let st = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kb: u64 = st
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        kb / 1024
    }

    fn uri(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.socket.display())
    }

    /// SIGTERM; asserts a clean stop within `limit`; returns the log.
    fn stop_within(mut self, limit: Duration) -> String {
        let mut child = self.child.take().expect("running");
        let t0 = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("uraid serve did not stop within 60 s of SIGTERM\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = t0.elapsed();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(st.success(), "uraid serve exited with {st}:\n{log}");
        assert!(took < limit, "uraid serve took {took:?} to stop (limit {limit:?}):\n{log}");
        assert!(log.contains("stopped cleanly"), "no clean stop:\n{log}");
        log
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A raw client speaking just enough NBD to misbehave precisely.
struct Raw {
    s: UnixStream,
}

impl Raw {
    /// Connects and reads the greeting.
    fn greet(socket: &Path) -> Raw {
        let mut s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        // A payload the server never takes fails the test, not hangs it.
        s.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello).unwrap();
        assert_eq!(&hello[..16], b"NBDMAGICIHAVEOPT");
        Raw { s }
    }

    fn option(&mut self, opt: u32, data: &[u8]) -> std::io::Result<()> {
        let mut m = b"IHAVEOPT".to_vec();
        m.extend(opt.to_be_bytes());
        m.extend((data.len() as u32).to_be_bytes());
        m.extend(data);
        self.s.write_all(&m)
    }

    /// One option reply: (reply type, data).
    fn option_reply(&mut self) -> std::io::Result<(u32, Vec<u8>)> {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h)?;
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut d = vec![0u8; len];
        self.s.read_exact(&mut d)?;
        Ok((u32::from_be_bytes(h[12..16].try_into().unwrap()), d))
    }

    fn go_data(name: &str) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend(name.as_bytes());
        d.extend(0u16.to_be_bytes());
        d
    }

    /// A client in the transmission phase of export `name`, or the
    /// server's error reply to its GO: (reply type, message).
    fn go(socket: &Path, name: &str) -> Result<Raw, (u32, Vec<u8>)> {
        let mut r = Raw::greet(socket);
        r.s.write_all(&3u32.to_be_bytes()).unwrap();
        r.option(OPT_GO, &Raw::go_data(name)).unwrap();
        loop {
            match r.option_reply().unwrap() {
                (REP_ACK, _) => return Ok(r),
                (3, _) => {}
                e => return Err(e),
            }
        }
    }

    /// A client in the transmission phase of export `name`.
    fn connect(socket: &Path, name: &str) -> Raw {
        Raw::go(socket, name).unwrap_or_else(|(e, d)| panic!("GO failed with reply {e:#x}: {}", String::from_utf8_lossy(&d)))
    }

    /// [`connect`](Self::connect), again while the server says it has
    /// no place left (for at most 10 s).
    fn connect_when_free(socket: &Path, name: &str) -> Raw {
        let t0 = Instant::now();
        loop {
            match Raw::go(socket, name) {
                Ok(r) => return r,
                Err((REP_ERR_POLICY, _)) if t0.elapsed() < Duration::from_secs(10) => std::thread::sleep(Duration::from_millis(50)),
                Err((e, d)) => panic!("GO failed with reply {e:#x}: {}", String::from_utf8_lossy(&d)),
            }
        }
    }

    fn request(cmd: u16, handle: u64, offset: u64, len: u32) -> Vec<u8> {
        let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
        r.extend(0u16.to_be_bytes());
        r.extend(cmd.to_be_bytes());
        r.extend(handle.to_be_bytes());
        r.extend(offset.to_be_bytes());
        r.extend(len.to_be_bytes());
        r
    }

    fn send(&mut self, cmd: u16, handle: u64, offset: u64, len: u32, payload: &[u8]) -> std::io::Result<()> {
        let mut r = Raw::request(cmd, handle, offset, len);
        r.extend(payload);
        self.s.write_all(&r)
    }

    /// One simple reply: (handle, error), then `data` bytes of READ data.
    fn reply(&mut self, data: usize) -> (u64, u32, Vec<u8>) {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x6744_6698, "reply magic");
        let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let mut d = vec![0u8; if err == 0 { data } else { 0 }];
        self.s.read_exact(&mut d).unwrap();
        (u64::from_be_bytes(h[8..16].try_into().unwrap()), err, d)
    }

    /// Reads until EOF or a reset within `limit`: true when the server
    /// closed the connection.
    fn closed_within(&mut self, limit: Duration) -> bool {
        let t0 = Instant::now();
        self.s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut b = vec![0u8; 1 << 20];
        while t0.elapsed() < limit {
            match self.s.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

/// A well-behaved client's round trip: writes `len` random bytes at
/// `offset` and reads them back.
fn round_trip(socket: &Path, name: &str, offset: u64, len: usize, seed: &str) {
    let mut c = Raw::connect(socket, name);
    let mut data = vec![0u8; len];
    rng(seed).fill_bytes(&mut data);
    c.send(CMD_WRITE, 1, offset, len as u32, &data).unwrap();
    assert_eq!(c.reply(0).1, 0, "write failed");
    c.send(CMD_READ, 2, offset, len as u32, &[]).unwrap();
    let (h, e, back) = c.reply(len);
    assert_eq!((h, e), (2, 0), "read failed");
    assert!(back == data, "read back other data");
}

#[test]
fn a_client_that_hangs_up_at_any_step_never_stops_the_server() {
    let _g = shared();
    let d = tmpdir();
    let m = raid5(d.path(), "hang");
    let mut srv = Srv::start(&m, d.path(), &[]);
    let sock = srv.socket.clone();
    for round in 0..10 {
        // With 32 MiB READs in flight (their replies cannot all be in the
        // socket's buffer when the client goes).
        let mut c = Raw::connect(&sock, "hang");
        for i in 0..4u64 {
            c.send(CMD_READ, i, i * (32 << 20), 32 << 20, &[]).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        drop(c);
        // In the middle of a WRITE payload.
        let mut c = Raw::connect(&sock, "hang");
        c.send(CMD_WRITE, 9, 0, 1 << 20, &vec![7u8; 300 << 10]).unwrap();
        drop(c);
        // During the handshake: after the greeting, in an option's data.
        drop(Raw::greet(&sock));
        let mut c = Raw::greet(&sock);
        c.s.write_all(&3u32.to_be_bytes()).unwrap();
        c.s.write_all(b"IHAVEOPT\0\0\0\x07\0\0\0\x40ab").unwrap();
        drop(c);
        srv.assert_up(&format!("after clients hung up (round {round})"));
    }
    std::thread::sleep(Duration::from_millis(300));
    srv.assert_up("after clients hung up");
    round_trip(&sock, "hang", 1 << 20, 256 << 10, "hang");
    srv.stop_within(Duration::from_secs(5));
}

#[test]
fn write_headers_without_payloads_and_reads_never_read_keep_memory_bounded() {
    let _g = shared();
    let d = tmpdir();
    let m = raid5(d.path(), "mem");
    // The defaults: 64M a connection, 512M in all (the README's bound).
    let mut srv = Srv::start(&m, d.path(), &["--client-timeout", "3"]);
    let sock = srv.socket.clone();
    let base = srv.rss_mib();
    let mut hostile = Vec::new();
    // Connections that each send 16 READs of 32 MiB and never read: 512 MiB
    // each if the server took them all.
    for _ in 0..6 {
        let mut c = Raw::connect(&sock, "mem");
        let mut reqs = Vec::new();
        for i in 0..16u64 {
            reqs.extend(Raw::request(CMD_READ, i, (i % 4) * (32 << 20), 32 << 20));
        }
        c.s.write_all(&reqs).unwrap();
        hostile.push(c);
    }
    // Connections that each announce a 32 MiB WRITE and send 4 KiB of it.
    for _ in 0..6 {
        let mut c = Raw::connect(&sock, "mem");
        c.send(CMD_WRITE, 1, 0, 32 << 20, &[1u8; 4096]).unwrap();
        hostile.push(c);
    }
    // A connection that floods zero-length and refused requests and never
    // reads the replies.
    let mut flood = Raw::connect(&sock, "mem");
    flood.s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut reqs = Vec::new();
    for i in 0..20_000u64 {
        reqs.extend(Raw::request(CMD_READ, i, if i % 2 == 0 { 0 } else { u64::MAX - 4095 }, if i % 2 == 0 { 0 } else { 4096 }));
    }
    let _ = flood.s.write_all(&reqs);
    let mut peak = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        peak = peak.max(srv.rss_mib());
        std::thread::sleep(Duration::from_millis(50));
    }
    srv.assert_up("with hostile clients");
    // A well-behaved client is served meanwhile.
    round_trip(&sock, "mem", 64 << 20, 1 << 20, "mem");
    peak = peak.max(srv.rss_mib());
    eprintln!("RSS: {base} MiB at the start, {peak} MiB at the peak");
    assert!(peak < base + 512 + 64, "RSS rose from {base} to {peak} MiB: over the 512 MiB buffer bound");
    // The readers that never read are disconnected after --client-timeout
    // (3 s without progress; checked after it: reading would be progress).
    std::thread::sleep(Duration::from_secs(5));
    for (i, c) in hostile.iter_mut().take(6).enumerate() {
        assert!(c.closed_within(Duration::from_secs(15)), "non-reading client {i} was not disconnected");
    }
    srv.stop_within(Duration::from_secs(5));
}

#[test]
fn connections_past_the_limit_are_refused_politely() {
    let _g = shared();
    require_tool("nbdinfo", "libnbd-bin");
    let d = tmpdir();
    let m = raid5(d.path(), "lim");
    let mut srv = Srv::start(&m, d.path(), &["--max-connections", "3"]);
    let sock = srv.socket.clone();
    // Srv::start's readiness probe (a bare connect) holds a place until
    // its thread sees the hang-up, which a loaded machine may delay: the
    // three take their places once it is free.
    let held: Vec<Raw> = (0..3).map(|_| Raw::connect_when_free(&sock, "lim")).collect();
    // The fourth is told why, in the handshake.
    let mut c = Raw::greet(&sock);
    c.s.write_all(&3u32.to_be_bytes()).unwrap();
    c.option(OPT_GO, &Raw::go_data("lim")).unwrap();
    let (typ, msg) = c.option_reply().unwrap();
    let msg = String::from_utf8_lossy(&msg).to_string();
    assert_eq!(typ, REP_ERR_POLICY, "reply {typ:#x}: {msg}");
    assert!(msg.contains("too many connections") && msg.contains("at most 3"), "message: {msg}");
    let out = Command::new("nbdinfo").arg(srv.uri("lim")).output().unwrap();
    assert!(!out.status.success(), "nbdinfo got through past the limit");
    // The connections in service are not disturbed.
    for (i, mut h) in held.into_iter().enumerate() {
        h.send(CMD_READ, 5, 0, 4096, &[]).unwrap();
        assert_eq!(h.reply(4096).1, 0, "connection {i} disturbed");
        if i == 0 {
            drop(h); // frees a place
        } else {
            std::mem::forget(h);
        }
    }
    let t0 = Instant::now();
    loop {
        let out = Command::new("nbdinfo").arg(srv.uri("lim")).output().unwrap();
        if out.status.success() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "a freed place is not taken: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(100));
    }
    srv.assert_up("after refusals");
    srv.stop_within(Duration::from_secs(5));
}

#[test]
fn a_stalled_handshake_ends_at_its_deadline_and_endless_options_are_cut() {
    let _g = shared();
    let d = tmpdir();
    let m = raid5(d.path(), "slow");
    let mut srv = Srv::start(&m, d.path(), &["--handshake-timeout", "2"]);
    let sock = srv.socket.clone();
    // Greeted, then silent.
    let mut silent = Raw::greet(&sock);
    // Sends one byte a second: each read makes progress, the deadline holds.
    let mut trickle = Raw::greet(&sock);
    trickle.s.write_all(&3u32.to_be_bytes()).unwrap();
    let t0 = Instant::now();
    let mut cut = false;
    for b in b"IHAVEOPT\0\0\0\x03\0\0\0\0" {
        if trickle.s.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(cut || trickle.closed_within(Duration::from_secs(5)), "a trickling handshake outlived its deadline");
    assert!(t0.elapsed() < Duration::from_secs(8), "the trickling handshake lasted {:?}", t0.elapsed());
    assert!(silent.closed_within(Duration::from_secs(5)), "a silent handshake outlived its deadline");
    // Options without end: LIST again and again.
    let mut chatty = Raw::greet(&sock);
    chatty.s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut answered = 0;
    for _ in 0..100 {
        if chatty.option(OPT_LIST, &[]).is_err() {
            break;
        }
        // LIST: one SERVER reply per export, then ACK (or the refusal).
        match chatty.option_reply() {
            Ok((2, _)) => {
                chatty.option_reply().unwrap();
                answered += 1;
            }
            Ok((REP_ERR_POLICY, msg)) => {
                assert!(String::from_utf8_lossy(&msg).contains("options"), "{}", String::from_utf8_lossy(&msg));
                break;
            }
            Ok((t, _)) => panic!("unexpected reply {t:#x}"),
            Err(_) => break,
        }
    }
    assert_eq!(answered, 32, "options answered in one handshake");
    assert!(chatty.closed_within(Duration::from_secs(5)), "the endless handshake was not closed");
    srv.assert_up("after stalled handshakes");
    round_trip(&sock, "slow", 0, 64 << 10, "slow");
    srv.stop_within(Duration::from_secs(5));
}

#[test]
fn a_stop_ends_within_seconds_whatever_the_clients_do() {
    let _g = shared();
    let d = tmpdir();
    let m = raid5(d.path(), "stop");
    // Default timeouts (10 s handshake, 30 s client): the stop must not
    // wait for them.
    let srv = Srv::start(&m, d.path(), &[]);
    let sock = srv.socket.clone();
    let _silent = Raw::greet(&sock);
    let mut reader = Raw::connect(&sock, "stop");
    let mut reqs = Vec::new();
    for i in 0..16u64 {
        reqs.extend(Raw::request(CMD_READ, i, (i % 4) * (32 << 20), 32 << 20));
    }
    reader.s.write_all(&reqs).unwrap();
    let mut writer = Raw::connect(&sock, "stop");
    writer.send(CMD_WRITE, 1, 0, 32 << 20, &[3u8; 8192]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    srv.stop_within(Duration::from_secs(5));
}

#[test]
fn running_out_of_descriptors_is_transient() {
    let _g = shared();
    let d = tmpdir();
    let m = raid5(d.path(), "fds");
    let mut srv = Srv::start_with(&m, d.path(), &[], |cmd| {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit only, in the child between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: 48, rlim_max: 48 };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let sock = srv.socket.clone();
    // Far more connections than descriptors: accept(2) fails with EMFILE.
    let mut conns = Vec::new();
    for _ in 0..80 {
        match UnixStream::connect(&sock) {
            Ok(c) => conns.push(c),
            Err(_) => break,
        }
    }
    std::thread::sleep(Duration::from_millis(800));
    srv.assert_up("while descriptors ran out");
    drop(conns);
    let t0 = Instant::now();
    loop {
        // The backlog drains (each stale connection is taken and closed).
        let ok = std::panic::catch_unwind(|| round_trip(&sock, "fds", 0, 4096, "fds")).is_ok();
        if ok {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no client served after the descriptors came back");
        std::thread::sleep(Duration::from_millis(200));
    }
    srv.assert_up("after descriptors came back");
    let log = srv.stop_within(Duration::from_secs(5));
    assert!(log.contains("cannot accept a connection"), "no warning about accept(2):\n{log}");
}

/// A CA, a server certificate and a client certificate it signed, in
/// libnbd's layout (`ca-cert.pem`, `client-cert.pem`, `client-key.pem`),
/// and a second directory with only the CA (a client without a
/// certificate). Returns (server cert, server key, CA, with-cert dir,
/// without-cert dir).
pub(crate) fn pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf, PathBuf) {
    let ossl = |args: &[&str]| {
        run_tool(Command::new("openssl").args(args).current_dir(dir));
    };
    ossl(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=uraid test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", "ca-key.pem", "-out", "ca-cert.pem"]);
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n").unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for who in ["server", "client"] {
        ossl(&["req", "-newkey", "rsa:2048", "-nodes", "-subj", &format!("/CN={who}"), "-keyout", &format!("{who}-key.pem"), "-out", &format!("{who}.csr")]);
        ossl(&["x509", "-req", "-in", &format!("{who}.csr"), "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-days", "2", "-extfile", &format!("{who}.ext"), "-out", &format!("{who}-cert.pem")]);
    }
    let with = dir.join("with-cert");
    let without = dir.join("without-cert");
    for (d, files) in [(&with, &["ca-cert.pem", "client-cert.pem", "client-key.pem"][..]), (&without, &["ca-cert.pem"][..])] {
        std::fs::create_dir_all(d).unwrap();
        for f in files {
            std::fs::copy(dir.join(f), d.join(f)).unwrap();
        }
    }
    (dir.join("server-cert.pem"), dir.join("server-key.pem"), dir.join("ca-cert.pem"), with, without)
}

#[test]
fn tls_verify_peer_refuses_clients_without_a_certificate_of_the_ca() {
    let _g = shared();
    require_tool("nbdinfo", "libnbd-bin");
    require_tool("openssl", "openssl");
    let d = tmpdir();
    let m = raid5(d.path(), "pki");
    let (cert, key, ca, with, without) = pki(d.path());
    let (mut child, port) =
        serve_tcp(&m, &["--tls-cert", s(&cert), "--tls-key", s(&key), "--tls-verify-peer", "--tls-ca", s(&ca)]);
    let uri = |dir: &Path| format!("nbds://localhost:{port}/pki?tls-certificates={}", dir.display());
    let ok = Command::new("nbdinfo").arg(uri(&with)).output().unwrap();
    assert!(ok.status.success(), "a client with a certificate of the CA was refused: {}", String::from_utf8_lossy(&ok.stderr));
    assert_contains(&String::from_utf8_lossy(&ok.stdout), &["with TLS"], "nbdinfo");
    let refused = Command::new("nbdinfo").arg(uri(&without)).output().unwrap();
    assert!(!refused.status.success(), "a client without a certificate got through");
    // openssl s_client presents no certificate either: refused too.
    let mut sc = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-starttls", "nbd"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    // Older openssl has no NBD STARTTLS: then libnbd's refusal is the test.
    if let Ok(c) = sc.as_mut() {
        let _ = c.wait();
    }
    // A raw client that asks for TLS, sends half a ClientHello and goes.
    for _ in 0..10 {
        let mut t = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut hello = [0u8; 18];
        t.read_exact(&mut hello).unwrap();
        t.write_all(&3u32.to_be_bytes()).unwrap();
        let mut o = b"IHAVEOPT".to_vec();
        o.extend(OPT_STARTTLS.to_be_bytes());
        o.extend(0u32.to_be_bytes());
        t.write_all(&o).unwrap();
        let mut rep = [0u8; 20];
        t.read_exact(&mut rep).unwrap();
        assert_eq!(u32::from_be_bytes(rep[12..16].try_into().unwrap()), REP_ACK);
        t.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.0.try_wait().unwrap().is_none(), "uraid serve died after TLS clients went away");
    let again = Command::new("nbdinfo").arg(uri(&with)).output().unwrap();
    assert!(again.status.success(), "not served after the TLS hang-ups: {}", String::from_utf8_lossy(&again.stderr));
}

#[test]
fn the_socket_is_owner_only_and_a_stale_one_is_replaced() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let _g = shared();
    let d = tmpdir();
    let m = raid5(d.path(), "perm");
    // A stale socket (bound, its server gone) where the new one goes.
    let sock = d.path().join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let srv = Srv::start(&m, d.path(), &[]);
    let md = std::fs::metadata(&srv.socket).unwrap();
    assert!(md.file_type().is_socket());
    assert_eq!(md.permissions().mode() & 0o777, 0o600, "socket mode");
    round_trip(&srv.socket, "perm", 0, 4096, "perm");
    srv.stop_within(Duration::from_secs(5));
    // A wider mode on request.
    let srv = Srv::start(&m, d.path(), &["--socket-mode", "0660"]);
    assert_eq!(std::fs::metadata(&srv.socket).unwrap().permissions().mode() & 0o777, 0o660, "--socket-mode 0660");
    srv.stop_within(Duration::from_secs(5));
    // A file that is not a socket is never removed.
    std::fs::write(&sock, b"precious").unwrap();
    let mut args = vec!["serve", "--socket", s(&sock)];
    args.extend(m.iter().map(|p| s(p)));
    uraid_fails(&args, &["is not a socket"]);
    assert_eq!(std::fs::read(&sock).unwrap(), b"precious");
    // A directory anyone may write to without the sticky bit is refused.
    let open = d.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let in_open = open.join("x.sock");
    let mut args = vec!["serve", "--socket", s(&in_open)];
    args.extend(m.iter().map(|p| s(p)));
    uraid_fails(&args, &["no sticky bit"]);
}

/// Runs `cmd` for `ms` milliseconds, then SIGKILLs it.
fn kill_after(mut cmd: Command, ms: u64) {
    let mut c = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("client");
    std::thread::sleep(Duration::from_millis(ms));
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn chaos_clients_never_disturb_a_verifying_fio_job() {
    let _g = shared();
    require_tool("fio", "fio");
    require_tool("nbdcopy", "libnbd-bin");
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let m = raid5(d.path(), "chaos");
    let mut srv = Srv::start(&m, d.path(), &["--client-timeout", "3", "--max-connections", "24"]);
    let sock = srv.socket.clone();
    let uri = srv.uri("chaos");
    let base = srv.rss_mib();
    // The job whose data must verify: the first 32 MiB, its own connection.
    let fio = Command::new("fio")
        .args(["--name=verify", "--ioengine=nbd", "--rw=randwrite", "--bs=4k,64k", "--iodepth=16", "--size=32M"])
        .args(["--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0", "--do_verify=1", "--loops=3"])
        .arg(format!("--uri={uri}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0;
    for round in 0..4u64 {
        // Real clients killed with SIGKILL mid-run, on the upper half.
        let mut f = Command::new("fio");
        f.args(["--name=victim", "--ioengine=nbd", "--rw=randrw", "--bs=64k", "--iodepth=32", "--size=32M", "--offset=64M", "--time_based", "--runtime=30"])
            .arg(format!("--uri={uri}"));
        kill_after(f, 400 + 100 * round);
        let mut q = Command::new("qemu-io");
        q.args(["-f", "raw", "-c", "write -P 0x33 64M 16M", "-c", "read 64M 16M", &format!("nbd+unix:///chaos?socket={}", sock.display())]);
        kill_after(q, 150);
        // (nbdcopy reads: a writing one would overwrite fio's area.)
        let mut c = Command::new("nbdcopy");
        c.arg(format!("nbd+unix:///chaos?socket={}", sock.display())).arg(d.path().join("copy"));
        kill_after(c, 200);
        // Raw misbehaviour: hang-ups with reads due, WRITE headers without
        // payloads, unread reads, garbage, a stalled handshake.
        let mut r = Raw::connect(&sock, "chaos");
        r.send(CMD_READ, 1, 96 << 20, 32 << 20, &[]).unwrap();
        drop(r);
        let mut r = Raw::connect(&sock, "chaos");
        let _ = r.send(CMD_WRITE, 2, 96 << 20, 32 << 20, &[9u8; 1024]);
        std::mem::forget(r);
        let mut r = Raw::connect(&sock, "chaos");
        let mut reqs = Vec::new();
        for i in 0..8u64 {
            reqs.extend(Raw::request(CMD_READ, i, 96 << 20, 16 << 20));
        }
        let _ = r.s.write_all(&reqs);
        std::mem::forget(r);
        let mut r = Raw::connect(&sock, "chaos");
        let _ = r.s.write_all(&[0xffu8; 4096]);
        drop(r);
        std::mem::forget(Raw::greet(&sock));
        peak = peak.max(srv.rss_mib());
        srv.assert_up(&format!("in chaos round {round}"));
    }
    let out = fio.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("err= 0"), "the verifying fio job failed:\n{text}");
    assert!(!text.contains("verify: bad") && !text.contains("crc32c mismatch"), "fio verify errors:\n{text}");
    peak = peak.max(srv.rss_mib());
    eprintln!("chaos: RSS {base} MiB at the start, {peak} MiB at the peak");
    assert!(peak < base + 512 + 64, "RSS rose from {base} to {peak} MiB");
    srv.assert_up("after the chaos");
    srv.stop_within(Duration::from_secs(5));
}

/// SIGTERM; waits for the exit (at most `limit`, else panics); returns
/// (exit status, log).
fn stop_any(mut srv: Srv, limit: Duration) -> (std::process::ExitStatus, String) {
    let mut child = srv.child.take().expect("running");
    let t0 = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st, std::fs::read_to_string(&srv.log).unwrap_or_default());
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("uraid serve did not stop within {limit:?} of SIGTERM\n{}", std::fs::read_to_string(&srv.log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A panic in one connection's engine queue (a bug: the
/// URAID_FAILPOINT_QUEUE_PANIC failpoint panics as a member write of a
/// WRITE at its offset completes, the stripe's lock held) ends that
/// connection only: a verifying fio job on another connection passes, a
/// write to the same stripe from another client completes (the lock went
/// with the queue; before, it was held for ever and that write hung), the
/// buffers it held go back to the server's budget, the server stops within
/// seconds, and it leaves the array unclean (a write
/// was cut short) so that the next assemble resyncs it: `check` then finds
/// no mismatch.
#[test]
fn a_panic_in_one_connection_ends_only_that_connection() {
    let _g = shared();
    require_tool("fio", "fio");
    let d = tmpdir();
    let m = raid5(d.path(), "panic");
    let at: u64 = 64 << 20;
    // A small server-wide buffer budget: the 16 MiB the panicking
    // connection holds must come back to it, or the 32 MiB write below
    // waits for room for ever.
    let mut srv = Srv::start_with(&m, d.path(), &["--conn-buffer", "32M", "--buffer-memory", "40M"], |c| {
        c.env("URAID_FAILPOINT_QUEUE_PANIC", at.to_string());
    });
    let fio = Command::new("fio")
        .args(["--name=verify", "--ioengine=nbd", "--rw=randwrite", "--bs=4k,64k", "--iodepth=16", "--size=32M"])
        .args(["--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0", "--do_verify=1", "--loops=2"])
        .arg(format!("--uri={}", srv.uri("panic")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut r = Raw::connect(&srv.socket, "panic");
    r.send(CMD_WRITE, 1, at, 16 << 20, &vec![7u8; 16 << 20]).unwrap();
    // Generous: the unwinding queue waits up to 2 s for its member I/O,
    // longer on a loaded machine; the point is that it closes at all.
    if !r.closed_within(Duration::from_secs(60)) {
        panic!("the connection whose thread panicked was not closed within 60 s; the server's log:\n{}", std::fs::read_to_string(&srv.log).unwrap_or_default());
    }
    srv.assert_up("after a connection's thread panicked");
    let mut c = Raw::connect(&srv.socket, "panic");
    c.s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.send(CMD_WRITE, 2, at + 4096, 4096, &[8u8; 4096]).unwrap();
    assert_eq!(c.reply(0).1, 0, "a write to the stripe the panicking queue held failed");
    round_trip(&srv.socket, "panic", at + (1 << 20), 256 << 10, "after the panic");
    round_trip(&srv.socket, "panic", 88 << 20, 32 << 20, "the buffer budget after the panic");
    let out = fio.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("err= 0"), "the verifying fio job failed:\n{text}");
    srv.assert_up("after the fio job");
    let (st, log) = stop_any(srv, Duration::from_secs(30));
    assert!(log.contains("a connection's thread panicked"), "the panic was not reported:\n{log}");
    assert!(!st.success() && log.contains("was not marked clean"), "serve did not leave the array unclean ({st}):\n{log}");
    let members: Vec<&str> = m.iter().map(|p| s(p)).collect();
    let st = uraid_ok(&[&["status"][..], &members].concat());
    assert!(!st.stdout.contains("members, clean"), "the array is marked clean after the panic:\n{}", st.stdout);
    // The assemble resyncs the regions the bitmap kept dirty.
    uraid_ok(&[&["assemble"][..], &members].concat());
    let st = uraid_ok(&[&["status"][..], &members].concat());
    assert!(st.stdout.contains("members, clean"), "not clean after the assemble:\n{}", st.stdout);
    let c = uraid_ok(&[&["check"][..], &m.iter().map(|p| s(p)).collect::<Vec<_>>()].concat());
    assert!(c.stdout.contains("mismatches 0"), "check after the panic: {}", c.stdout);
}

/// The volume cache's flusher thread panicking (URAID_FAILPOINT_FLUSHER_PANIC,
/// once there is dirty data) never hangs a FLUSH, a writer or the stop: the
/// FLUSH fails with EIO and says why in the log, later writes fail, the
/// server stays up and stops within seconds, without marking the array
/// clean. (Before, the FLUSH waited for ever for a flusher that was gone.)
#[test]
fn a_panic_in_the_cache_flusher_fails_flushes_and_never_hangs() {
    let _g = shared();
    let d = tmpdir();
    let m = sparse_files(d.path(), "m", 3, 64 << 20);
    let mut args = vec!["create", "--level", "5", "--chunk", "64K", "--name", "fpanic", "--cache", "writeback"];
    args.extend(m.iter().map(|p| s(p)));
    uraid_ok(&args);
    let mut srv = Srv::start_with(&m, d.path(), &[], |c| {
        c.env("URAID_FAILPOINT_FLUSHER_PANIC", "1");
    });
    let mut c = Raw::connect(&srv.socket, "fpanic");
    c.s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.send(CMD_WRITE, 1, 0, 65536, &[5u8; 65536]).unwrap();
    assert_eq!(c.reply(0).1, 0, "the cached write failed");
    c.send(3, 2, 0, 0, &[]).unwrap();
    let (h, e, _) = c.reply(0);
    assert_eq!((h, e), (2, 5), "the FLUSH after the flusher's panic did not fail with EIO");
    c.send(CMD_WRITE, 3, 1 << 20, 4096, &[6u8; 4096]).unwrap();
    assert_eq!(c.reply(0).1, 5, "a write after the flusher's panic did not fail with EIO");
    // Reads are still served (from the cache where it holds the data).
    c.send(CMD_READ, 4, 0, 4096, &[]).unwrap();
    let (_, e, back) = c.reply(4096);
    assert!(e == 0 && back == vec![5u8; 4096], "a read after the flusher's panic failed");
    srv.assert_up("after the flusher's panic");
    drop(c);
    let (st, log) = stop_any(srv, Duration::from_secs(30));
    assert!(log.contains("flusher thread panicked"), "the panic was not reported:\n{log}");
    assert!(!st.success() && !log.contains("stopped cleanly"), "serve called a stop clean after the flusher died ({st}):\n{log}");
    uraid_ok(&[&["assemble"][..], &m.iter().map(|p| s(p)).collect::<Vec<_>>()].concat());
}
