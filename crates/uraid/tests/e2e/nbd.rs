//! The NBD export with real clients: nbdinfo, nbdcopy, qemu-img, qemu-io,
//! fio's nbd engine, nbdfuse + losetup + mkfs.ext4 + mount + fstrim, and
//! raw sockets for several connections and for malformed input.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, RngCore};

use crate::util::*;

/// A running `uraid serve` on a unix socket, stopped with SIGTERM on drop.
struct Served {
    child: Option<ChildGuard>,
    socket: PathBuf,
    name: String,
}

impl Served {
    fn start(members: &[PathBuf], socket: &Path, extra: &[&str]) -> Served {
        Served::start_env(members, socket, extra, &[])
    }

    fn start_env(members: &[PathBuf], socket: &Path, extra: &[&str], env: &[(&str, String)]) -> Served {
        let mut cmd = Command::new(URAID);
        cmd.arg("serve").arg("--socket").arg(socket).args(extra).args(members);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = ChildGuard(cmd.spawn().expect("cannot start uraid serve"));
        let t0 = Instant::now();
        while UnixStream::connect(socket).is_err() {
            if let Ok(Some(st)) = child.0.try_wait() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).ok();
                panic!("uraid serve exited ({st}) before listening: {err}");
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "uraid serve did not listen on {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        let name = Served::export_name(socket);
        Served { child: Some(child), socket: socket.to_path_buf(), name }
    }

    fn export_name(socket: &Path) -> String {
        let out = run_tool(Command::new("nbdinfo").arg("--list").arg("--json").arg(format!("nbd+unix:///?socket={}", socket.display())));
        let j: serde_json::Value = serde_json::from_str(&out).expect("nbdinfo --json");
        j["exports"][0]["export-name"].as_str().expect("an export").to_string()
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///{}?socket={}", self.name, self.socket.display())
    }

    /// SIGTERM, then the exit status and output.
    fn stop(mut self) -> (std::process::ExitStatus, String, String) {
        let mut g = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(g.0.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Some(st) = g.0.try_wait().expect("wait") {
                let mut out = String::new();
                let mut err = String::new();
                g.0.stdout.take().map(|mut o| o.read_to_string(&mut out));
                g.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
                std::mem::forget(g);
                return (st, out, err);
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "uraid serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(g) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(g.0.id() as i32, libc::SIGTERM) };
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn array(dir: &Path, n: usize, size: u64, name: &str) -> Vec<PathBuf> {
    let m = sparse_files(dir, "m", n, size);
    let mut args = vec!["create", "--level", "0", "--chunk", "64K", "--name", name];
    args.extend(m.iter().map(|p| s(p)));
    uraid_ok(&args);
    m
}

fn tools() {
    require_tool("nbdinfo", "libnbd-bin");
    require_tool("nbdcopy", "libnbd-bin");
}

#[test]
fn nbdinfo_shows_size_flags_and_exports() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = array(d.path(), 3, 40 << 20, "info");
    let srv = Served::start(&m, &d.path().join("s.sock"), &[]);
    assert_eq!(srv.name, "info");
    let out = run_tool(Command::new("nbdinfo").arg("--json").arg(srv.uri()));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &j["exports"][0];
    // 3 members x (40 MiB - 1 MiB data offset, rounded to 64K chunks).
    assert_eq!(e["export-size"].as_u64(), Some(3 * (39 << 20)));
    for flag in ["can_flush", "can_fua", "can_trim", "can_zero", "can_multi_conn", "can_fast_zero"] {
        assert_eq!(e[flag].as_bool(), Some(true), "{flag} in {out}");
    }
    assert_eq!(e["is_read_only"].as_bool(), Some(false));
    assert_eq!(e["block_size_minimum"].as_u64(), Some(512));
    assert_eq!(e["block_size_maximum"].as_u64(), Some(32 << 20));
    let list = run_tool(Command::new("nbdinfo").arg("--list").arg(format!("nbd+unix:///?socket={}", srv.socket.display())));
    assert_contains(&list, &["export=\"info\"", "RAID 0 over 3 members"], "nbdinfo --list");
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve exit {st}: {err}");
    assert_contains(&err, &["stopped cleanly"], "serve stderr");
    let ex = uraid_ok(&["examine", "--json", s(&m[0])]);
    assert_contains(&ex.stdout, &["\"Clean\""], "superblock state after a clean stop");
}

#[test]
fn nbdcopy_qemu_img_and_qemu_io_move_data_exactly() {
    let _g = shared();
    tools();
    require_tool("qemu-img", "qemu-utils");
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let m = array(d.path(), 2, 48 << 20, "copy");
    let srv = Served::start(&m, &d.path().join("s.sock"), &[]);
    let mut rng = rng("nbdcopy");
    let mut data = vec![0u8; 20 << 20];
    rng.fill_bytes(&mut data);
    let src = d.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    run_tool(Command::new("nbdcopy").arg(&src).arg(srv.uri()));
    let back = d.path().join("back.bin");
    run_tool(Command::new("nbdcopy").arg(srv.uri()).arg(&back));
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got.len() as u64, 2 * (47 << 20), "nbdcopy copies the whole export");
    assert!(first_difference(&got[..data.len()], &data).is_none(), "nbdcopy round trip differs");
    assert!(got[data.len()..].iter().all(|&b| b == 0), "bytes past the copy are not zero");

    // qemu-img: convert a different image in, then compare.
    rng.fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();
    run_tool(Command::new("qemu-img").args(["convert", "-n", "-f", "raw", "-O", "raw"]).arg(&src).arg(srv.uri()));
    let cmp = run_tool(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw"]).arg(&src).arg(srv.uri()));
    assert_contains(&cmp, &["identical"], "qemu-img compare");
    // ... and a changed byte is noticed (the comparison can fail).
    let mut one = data.clone();
    one[12345] ^= 1;
    std::fs::write(&src, &one).unwrap();
    let st = Command::new("qemu-img").args(["compare", "-q", "-f", "raw", "-F", "raw"]).arg(&src).arg(srv.uri()).status().unwrap();
    assert_eq!(st.code(), Some(1), "qemu-img compare must see the difference");

    // qemu-io: asynchronous patterns with verification, flush and zeroing.
    let out = run_tool(
        Command::new("qemu-io")
            .args(["-f", "raw"])
            .args(["-c", "aio_write -P 0xa5 0 1M", "-c", "aio_write -P 0x5a 1M 3M", "-c", "aio_flush"])
            .args(["-c", "aio_read -P 0xa5 0 1M", "-c", "aio_read -P 0x5a 1M 3M", "-c", "aio_flush"])
            .args(["-c", "write -z 512K 64K", "-c", "read -P 0 512K 64K", "-c", "read -P 0xa5 576K 448K"])
            .args(["-c", "write -P 0x11 -f 7M 4k", "-c", "read -P 0x11 7M 4k"])
            .arg(srv.uri()),
    );
    assert!(!out.contains("Pattern verification failed"), "qemu-io: {out}");
    assert!(!out.to_lowercase().contains("error"), "qemu-io: {out}");
}

#[test]
fn fio_nbd_engine_verifies_crc32c_with_jobs_and_qd32() {
    let _g = shared();
    require_tool("fio", "fio");
    let d = tmpdir();
    let m = array(d.path(), 4, 40 << 20, "fio");
    let srv = Served::start(&m, &d.path().join("s.sock"), &[]);
    let out = run_tool(
        Command::new("fio")
            .args(["--name=nbdjob", "--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--iodepth=32"])
            .args(["--numjobs=3", "--size=32M", "--offset_increment=40M", "--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0"])
            .arg(format!("--uri={}", srv.uri()))
            .arg("--group_reporting"),
    );
    assert!(out.contains("err= 0"), "fio: {out}");
    assert!(!out.contains("verify: bad") && !out.contains("crc32c mismatch"), "fio verify errors: {out}");
}

fn allocated(paths: &[PathBuf]) -> u64 {
    paths.iter().map(|p| std::fs::metadata(p).unwrap().blocks() * 512).sum()
}

fn make_tree(root: &Path, rng: &mut impl Rng) {
    for dir in ["a", "a/b", "c"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        for f in 0..5 {
            let len = rng.random_range(0..300_000);
            let mut b = vec![0u8; len];
            rng.fill_bytes(&mut b);
            std::fs::write(root.join(dir).join(format!("f{f}")), b).unwrap();
        }
    }
}

#[test]
fn ext4_on_the_export_survives_a_restart_and_fstrim_frees_member_space() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = array(d.path(), 2, 96 << 20, "fs");
    let sock = d.path().join("s.sock");
    let tree = d.path().join("tree");
    make_tree(&tree, &mut rng("ext4"));

    let srv = Served::start(&m, &sock, &[]);
    let mut fs = FsOnNbd::attach(&srv.uri(), d.path(), true);
    run_tool(Command::new("cp").arg("-a").arg(&tree).arg(fs.mnt.join("tree")));
    run_tool(&mut Command::new("sync"));
    fs.detach();
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve: {err}");

    // Assemble and serve again: the tree is there, byte for byte.
    let srv = Served::start(&m, &sock, &[]);
    let mut fs = FsOnNbd::attach(&srv.uri(), d.path(), false);
    run_tool(Command::new("diff").arg("-r").arg(&tree).arg(fs.mnt.join("tree")));

    // fstrim: a large file written then deleted; the members' allocated
    // size must drop after fstrim.
    let mut big = vec![0u8; 48 << 20];
    rand::rng().fill_bytes(&mut big);
    std::fs::write(fs.mnt.join("big"), &big).unwrap();
    run_tool(&mut Command::new("sync"));
    let before = allocated(&m);
    std::fs::remove_file(fs.mnt.join("big")).unwrap();
    run_tool(&mut Command::new("sync"));
    run_tool(Command::new("fstrim").arg(&fs.mnt));
    let after = allocated(&m);
    assert!(after + (32 << 20) < before, "fstrim freed too little: members allocated {before} bytes before, {after} after");
    fs.detach();
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve: {err}");
}

/// A raw NBD client over a unix socket (simple replies, no structured).
struct Raw {
    s: UnixStream,
    size: u64,
}

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

impl Raw {
    fn greet(socket: &Path) -> UnixStream {
        let mut s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello).unwrap();
        assert_eq!(&hello[..16], b"NBDMAGICIHAVEOPT");
        s
    }

    fn option(s: &mut UnixStream, opt: u32, data: &[u8]) {
        let mut m = b"IHAVEOPT".to_vec();
        m.extend(be32(opt));
        m.extend(be32(data.len() as u32));
        m.extend(data);
        s.write_all(&m).unwrap();
    }

    /// Reads one option reply: (option, reply type, data).
    fn option_reply(s: &mut UnixStream) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), 0x3e889045565a9);
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut d = vec![0u8; len];
        s.read_exact(&mut d).unwrap();
        (u32::from_be_bytes(h[8..12].try_into().unwrap()), u32::from_be_bytes(h[12..16].try_into().unwrap()), d)
    }

    fn go_data(name: &str) -> Vec<u8> {
        let mut d = be32(name.len() as u32).to_vec();
        d.extend(name.as_bytes());
        d.extend(0u16.to_be_bytes());
        d
    }

    fn connect(socket: &Path, name: &str) -> Raw {
        let mut s = Raw::greet(socket);
        s.write_all(&be32(3)).unwrap();
        Raw::option(&mut s, 7, &Raw::go_data(name));
        let mut size = 0;
        loop {
            let (_, typ, d) = Raw::option_reply(&mut s);
            match typ {
                3 if u16::from_be_bytes([d[0], d[1]]) == 0 => size = u64::from_be_bytes(d[2..10].try_into().unwrap()),
                3 => {}
                1 => break,
                e => panic!("GO failed with reply {e:#x}: {}", String::from_utf8_lossy(&d)),
            }
        }
        Raw { s, size }
    }

    fn send(&mut self, flags: u16, cmd: u16, handle: u64, offset: u64, len: u32, payload: &[u8]) {
        let mut r = 0x25609513u32.to_be_bytes().to_vec();
        r.extend(flags.to_be_bytes());
        r.extend(cmd.to_be_bytes());
        r.extend(handle.to_be_bytes());
        r.extend(offset.to_be_bytes());
        r.extend(be32(len));
        r.extend(payload);
        self.s.write_all(&r).unwrap();
    }

    /// Reads a simple reply: (handle, error).
    fn reply(&mut self) -> (u64, u32) {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x67446698, "reply magic");
        (u64::from_be_bytes(h[8..16].try_into().unwrap()), u32::from_be_bytes(h[4..8].try_into().unwrap()))
    }

    fn write(&mut self, handle: u64, offset: u64, data: &[u8]) -> u32 {
        self.send(0, 1, handle, offset, data.len() as u32, data);
        let (h, e) = self.reply();
        assert_eq!(h, handle);
        e
    }

    fn read(&mut self, handle: u64, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.send(0, 0, handle, offset, len, &[]);
        let (h, e) = self.reply();
        assert_eq!(h, handle);
        if e != 0 {
            return Err(e);
        }
        let mut d = vec![0u8; len as usize];
        self.s.read_exact(&mut d).unwrap();
        Ok(d)
    }

    /// True when the server closed the connection (EOF within the timeout).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe),
            Ok(_) => false,
        }
    }
}

#[test]
fn flush_on_one_connection_covers_writes_of_another() {
    let _g = shared();
    tools();
    // In every cache mode: a FLUSH on one connection makes the writes that
    // others had acknowledged durable on the members (write-back holds
    // them in memory until then) or, with the journal, in the journal; and
    // a FUA write or zeroing is durable when answered.
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for mode in ["off", "writethrough", "writeback", "journal"] {
        let d = tmpdir();
        let mut m = sparse_files(d.path(), "m", 2, 8 << 20);
        // A flusher that waits for nobody: a dirty limit far above what is
        // written, so only the flush can explain the bytes on the members.
        let mut args = vec!["create", "--level", "0", "--chunk", "64K", "--name", "multi", "--cache", mode, "--cache-size", "64M", "--dirty-limit", "32M"];
        let j = d.path().join("journal");
        std::fs::File::create(&j).unwrap().set_len(72 << 20).unwrap();
        if mode == "journal" {
            args.extend(["--journal", s(&j)]);
        }
        args.extend([s(&m[0]), s(&m[1])]);
        uraid_ok(&args);
        if mode == "journal" {
            m.push(j.clone());
        }
        let srv = Served::start(&m, &d.path().join("s.sock"), &[]);
        let mut a = Raw::connect(&srv.socket, "multi");
        let mut b = Raw::connect(&srv.socket, "multi");
        let mut c = Raw::connect(&srv.socket, "multi");
        let mut data = vec![0u8; 192 << 10];
        rng("multi").fill_bytes(&mut data);
        // 64K chunks on 2 members: logical 64K..256K spans both members.
        assert_eq!(a.write(1, 64 << 10, &data), 0);
        b.send(0, 3, 2, 0, 0, &[]);
        assert_eq!(b.reply(), (2, 0), "{mode}: flush on connection b");
        assert_eq!(c.read(3, 64 << 10, data.len() as u32).unwrap(), data, "{mode}: connection c sees a's write");
        let on_members = |mode: &str| {
            // Chunk 1 (logical 64K) is member 1's first chunk.
            let m1 = std::fs::read(&m[1]).unwrap();
            assert_eq!(&m1[DATA_OFFSET as usize..DATA_OFFSET as usize + (64 << 10)], &data[..64 << 10], "{mode}");
            let m0 = std::fs::read(&m[0]).unwrap();
            assert_eq!(&m0[DATA_OFFSET as usize + (64 << 10)..DATA_OFFSET as usize + (128 << 10)], &data[64 << 10..128 << 10], "{mode}");
        };
        if mode == "journal" {
            assert!(has(&std::fs::read(&j).unwrap(), &data), "journal: the flushed write is not in the journal");
        } else {
            on_members(mode);
        }
        // FUA write on c, read back on a, and durable already.
        let fua = [0x77u8; 4096];
        c.send(1, 1, 4, 0, 4096, &fua);
        assert_eq!(c.reply(), (4, 0));
        assert_eq!(a.read(5, 0, 4096).unwrap(), fua.to_vec(), "{mode}");
        if mode == "journal" {
            assert!(has(&std::fs::read(&j).unwrap(), &fua), "journal: the FUA write is not in the journal");
        } else {
            let m0 = std::fs::read(&m[0]).unwrap();
            assert_eq!(&m0[DATA_OFFSET as usize..DATA_OFFSET as usize + 4096], &fua[..], "{mode}: FUA write not on the member");
        }
        // A FUA zeroing over it (NBD_CMD_WRITE_ZEROES = 6): answered once
        // durable, so on the member already (the engine syncs the members
        // it zeroed; with the journal, its record holds it).
        c.send(1, 6, 6, 0, 4096, &[]);
        assert_eq!(c.reply(), (6, 0), "{mode}: FUA write-zeroes");
        assert_eq!(a.read(7, 0, 4096).unwrap(), vec![0u8; 4096], "{mode}: the FUA zeroing does not read back");
        if mode != "journal" {
            let m0 = std::fs::read(&m[0]).unwrap();
            assert!(m0[DATA_OFFSET as usize..DATA_OFFSET as usize + 4096].iter().all(|&x| x == 0), "{mode}: FUA zeroing not on the member");
        }
        drop((a, b, c));
        let (st, _, err) = srv.stop();
        assert!(st.success(), "{mode}: {err}");
        if mode.starts_with("write") && mode != "writethrough" || mode == "journal" {
            assert_contains(&err, &[&format!("cache {mode}"), "written back"], "serve prints the cache counters");
        }
        // A clean stop writes everything back (and empties the journal).
        on_members(mode);
    }
}

#[test]
fn leaving_the_journal_mode_after_a_crash_replays_the_journal_first() {
    let _g = shared();
    tools();
    // A write acknowledged from the journal and not yet written back when
    // serve is killed lives only in the journal: `uraid config --cache
    // off` must put it on the members before the journal is dropped.
    let data = [0x5au8; 4096];
    let at = DATA_OFFSET as usize + (64 << 10);
    for attempt in 0.. {
        assert!(attempt < 5, "serve wrote the write back before every SIGKILL: nothing was tested");
        let d = tmpdir();
        let mut m = sparse_files(d.path(), "m", 2, 8 << 20);
        let j = sparse_file(d.path(), "journal", 72 << 20);
        uraid_ok(&["create", "--level", "1", "--name", "jr", "--cache", "journal", "--journal", s(&j), s(&m[0]), s(&m[1])]);
        m.push(j.clone());
        let mut srv = Served::start(&m, &d.path().join("s.sock"), &[]);
        let mut a = Raw::connect(&srv.socket, "jr");
        // 4 KiB of a line: the flusher leaves it for DIRTY_EXPIRE (500 ms).
        assert_eq!(a.write(1, 64 << 10, &data), 0);
        srv.child.take().expect("running").kill_and_release(&m);
        let on = |p: &std::path::Path| std::fs::read(p).unwrap()[at..at + 4096] == data;
        if on(&m[0]) || on(&m[1]) {
            continue;
        }
        let out = uraid_ok(&["config", "--cache", "off", s(&m[0]), s(&m[1]), s(&j)]);
        assert_contains(&out.stderr, &["replayed 1 record"], "config says what it replayed");
        assert!(on(&m[0]) && on(&m[1]), "the acknowledged write is not on both members after leaving the journal mode");
        // The members alone now make the array, and it reads the write.
        let srv = Served::start(&m[..2], &d.path().join("s2.sock"), &[]);
        let mut b = Raw::connect(&srv.socket, "jr");
        assert_eq!(b.read(2, 64 << 10, 4096).unwrap(), data.to_vec());
        drop(b);
        let (st, _, err) = srv.stop();
        assert!(st.success(), "{err}");
        break;
    }
}

#[test]
fn malformed_input_gets_the_spec_answer_and_writes_nothing() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = array(d.path(), 2, 8 << 20, "bad");
    let srv = Served::start(&m, &d.path().join("s.sock"), &[]);
    let snap = Snapshot::take(&m);
    let sock = srv.socket.clone();

    // Handshake: unknown client flags -> closed.
    let mut s = Raw::greet(&sock);
    s.write_all(&be32(0x80)).unwrap();
    assert!(Raw { s, size: 0 }.closed(), "unknown client flags must close");
    // Bad option magic -> closed.
    let mut s = Raw::greet(&sock);
    s.write_all(&be32(3)).unwrap();
    s.write_all(b"NOTMAGIC\0\0\0\x07\0\0\0\0").unwrap();
    assert!(Raw { s, size: 0 }.closed(), "bad option magic must close");
    // Options: unknown, too big, unknown export, malformed GO, STARTTLS.
    let mut s = Raw::greet(&sock);
    s.write_all(&be32(3)).unwrap();
    Raw::option(&mut s, 99, &[]);
    assert_eq!(Raw::option_reply(&mut s).1, 0x8000_0001, "unknown option: ERR_UNSUP");
    Raw::option(&mut s, 7, &vec![0u8; 20 << 10]);
    assert_eq!(Raw::option_reply(&mut s).1, 0x8000_0009, "oversized option: ERR_TOO_BIG");
    Raw::option(&mut s, 7, &Raw::go_data("nosuch"));
    let (_, typ, msg) = Raw::option_reply(&mut s);
    assert_eq!(typ, 0x8000_0006, "unknown export: ERR_UNKNOWN");
    assert_contains(&String::from_utf8_lossy(&msg), &["nosuch", "bad"], "ERR_UNKNOWN message");
    Raw::option(&mut s, 7, &[0, 0, 0, 200, 1]);
    assert_eq!(Raw::option_reply(&mut s).1, 0x8000_0003, "malformed GO: ERR_INVALID");
    Raw::option(&mut s, 5, &[]);
    assert_eq!(Raw::option_reply(&mut s).1, 0x8000_0002, "STARTTLS without TLS: ERR_POLICY");
    Raw::option(&mut s, 3, b"x");
    assert_eq!(Raw::option_reply(&mut s).1, 0x8000_0003, "LIST with data: ERR_INVALID");
    // A huge option length is a hard disconnect.
    let mut hdr = b"IHAVEOPT".to_vec();
    hdr.extend(be32(7));
    hdr.extend(be32(1 << 30));
    s.write_all(&hdr).unwrap();
    assert!(Raw { s, size: 0 }.closed(), "a 1 GiB option must close");

    // Transmission.
    let mut c = Raw::connect(&sock, "bad");
    let size = c.size;
    assert_eq!(c.read(1, 1, 512), Err(22), "misaligned read: EINVAL");
    assert_eq!(c.read(2, size - 512, 1024), Err(22), "read past the end: EINVAL");
    assert_eq!(c.read(3, u64::MAX - 100, 512), Err(22), "offset overflow: EINVAL");
    assert_eq!(c.write(4, size, &[1u8; 512]), 28, "write past the end: ENOSPC (payload consumed)");
    assert_eq!(c.write(5, 3, &[1u8; 512]), 22, "misaligned write: EINVAL");
    c.send(0, 99, 6, 0, 0, &[]);
    assert_eq!(c.reply(), (6, 22), "unknown command: EINVAL");
    c.send(0x40, 0, 7, 0, 512, &[]);
    assert_eq!(c.reply(), (7, 22), "unknown flag: EINVAL");
    c.send(2, 0, 8, 0, 512, &[]);
    assert_eq!(c.reply(), (8, 22), "NO_HOLE on a read: EINVAL");
    c.send(0, 6, 9, size, 4096, &[]);
    assert_eq!(c.reply(), (9, 28), "write-zeroes past the end: ENOSPC");
    c.send(0, 4, 10, size - 4096, 8192, &[]);
    assert_eq!(c.reply(), (10, 22), "trim past the end: EINVAL");
    assert!(c.read(11, 0, 4096).is_ok(), "the connection still works");
    // Bad request magic: hard disconnect.
    c.s.write_all(&[0u8; 28]).unwrap();
    assert!(c.closed(), "bad request magic must close");
    // An oversized write: disconnect without reading 64 MiB.
    let mut c = Raw::connect(&sock, "bad");
    c.send(0, 1, 1, 0, 64 << 20, &[]);
    assert!(c.closed(), "a 64 MiB write must close");
    // A request after DISC gets no reply; the connection closes.
    let mut c = Raw::connect(&sock, "bad");
    c.send(0, 2, 1, 0, 0, &[]);
    // The server may already have hung up (EPIPE here): that is allowed.
    let mut late = 0x25609513u32.to_be_bytes().to_vec();
    late.extend([0, 0, 0, 1]);
    late.extend([0u8; 20]);
    let _ = c.s.write_all(&late);
    assert!(c.closed(), "after DISC the server closes without replying");
    // A client that vanishes mid-request costs nothing.
    let mut c = Raw::connect(&sock, "bad");
    c.send(0, 1, 1, 0, 4096, &[5u8; 100]);
    drop(c);

    snap.assert_unchanged("malformed NBD input");
    // The server is still serving.
    let mut c = Raw::connect(&sock, "bad");
    assert_eq!(c.read(1, 0, 512).unwrap(), vec![0u8; 512]);
}

#[test]
fn read_only_export_and_second_server_are_refused() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = array(d.path(), 2, 8 << 20, "ro");
    let srv = Served::start(&m, &d.path().join("s.sock"), &["--read-only"]);
    let snap = Snapshot::take(&m);
    let mut c = Raw::connect(&srv.socket, "ro");
    assert_eq!(c.write(1, 0, &[1u8; 4096]), 1, "write on a read-only export: EPERM");
    c.send(0, 4, 2, 0, 4096, &[]);
    assert_eq!(c.reply(), (2, 1), "trim on a read-only export: EPERM");
    let other = d.path().join("t.sock");
    let mut args = vec!["serve".to_string(), "--socket".into(), other.display().to_string()];
    args.extend(m.iter().map(|p| p.display().to_string()));
    uraid_fails(&args, &["in use"]);
    drop(c);
    let (st, _, err) = srv.stop();
    assert!(st.success(), "{err}");
    // Only the superblocks may change (clean state, event counter).
    for (i, p) in m.iter().enumerate() {
        let before = snap.bytes(i);
        let now = std::fs::read(p).unwrap();
        assert_eq!(&now[SB_SIZE..], &before[SB_SIZE..], "{}: data changed on a read-only export", p.display());
    }
}

#[test]
fn non_loopback_tcp_without_tls_is_refused() {
    let _g = shared();
    let d = tmpdir();
    let m = array(d.path(), 1, 8 << 20, "tcp");
    let args = ["serve", "--tcp", "0.0.0.0:10999", s(&m[0])];
    uraid_fails(&args, &["not a loopback address", "--insecure"]);
}

#[test]
fn tls_export_works_with_libnbd_and_refuses_clear_text() {
    let _g = shared();
    tools();
    require_tool("openssl", "openssl");
    let d = tmpdir();
    let m = array(d.path(), 2, 16 << 20, "sec");
    let (cert, key) = self_signed_cert(d.path());
    std::fs::copy(&cert, d.path().join("ca-cert.pem")).unwrap();
    let (_child, port) = serve_tcp(&m, &["--tls-cert", s(&cert), "--tls-key", s(&key)]);
    let tls_uri = format!("nbds://localhost:{port}/sec?tls-certificates={}", d.path().display());
    let info = run_tool(Command::new("nbdinfo").arg(&tls_uri));
    assert_contains(&info, &["with TLS", "export-size: 31457280"], "nbdinfo over TLS");
    let mut data = vec![0u8; 4 << 20];
    rng("tls").fill_bytes(&mut data);
    let src = d.path().join("src");
    std::fs::write(&src, &data).unwrap();
    run_tool(Command::new("nbdcopy").arg(&src).arg(&tls_uri));
    let back = d.path().join("back");
    run_tool(Command::new("nbdcopy").arg(&tls_uri).arg(&back));
    assert!(first_difference(&std::fs::read(&back).unwrap()[..data.len()], &data).is_none(), "TLS round trip differs");
    // Clear text is refused (FORCEDTLS): nbdinfo without TLS fails.
    let st = Command::new("nbdinfo").arg(format!("nbd://localhost:{port}/sec")).stderr(Stdio::null()).stdout(Stdio::null()).status().unwrap();
    assert!(!st.success(), "a clear-text client must be refused");
}

/// A RAID 1 array `name` over two 64 MiB files with `data` random bytes
/// written from offset 0, and a third file added as a spare; returns the
/// files (members, then the spare), the capacity and the expected contents.
fn mirror_and_spare(dir: &Path, name: &str, data: usize) -> (Vec<PathBuf>, usize, Vec<u8>) {
    let m = sparse_files(dir, name, 3, 64 << 20);
    let (m0, m1, sp) = (s(&m[0]), s(&m[1]), s(&m[2]));
    uraid_ok(&["create", "--level", "1", "--chunk", "64K", "--name", name, "--bitmap-region", "1M", m0, m1]);
    let arr = uraid_core::control::array::assemble(&specs(&m[..2])).unwrap();
    let cap = arr.volume().capacity() as usize;
    let mut model = vec![0u8; cap];
    rng(name).fill_bytes(&mut model[..data]);
    arr.volume().write_at(0, &model[..data]).unwrap();
    arr.stop().unwrap();
    uraid_ok(&["add", "--spare", sp, m0, m1]);
    (m, cap, model)
}

/// A spare that took over a failed role is rebuilt in the background of
/// `uraid serve` while a client writes through the export; after the stop
/// the array is whole, the copies agree and every byte reads back.
#[test]
fn serve_rebuilds_in_the_background_while_clients_write() {
    let _g = shared();
    tools();
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let (m, cap, mut model) = mirror_and_spare(d.path(), "bg", 48 << 20);
    let (m0, m1, sp) = (s(&m[0]), s(&m[1]), s(&m[2]));
    let o = uraid_ok(&["fail", "--no-rebuild", "--member", "1", m0, m1, sp]);
    assert_contains(&o.stdout, &["a spare takes over role 1"], "fail with a spare");
    // 48 MiB to rebuild at 16 MB/s: about 3 s of rebuild under the client.
    let srv = Served::start(&[m[0].clone(), m[2].clone()], &d.path().join("s.sock"), &["--rebuild-rate", "16"]);
    run_tool(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x3c 2M 5M", "-c", "flush"]).arg(srv.uri()));
    model[2 << 20..7 << 20].fill(0x3c);
    let rebuilding = raw_superblock(&m[2]).slots[1].state;
    assert_eq!(rebuilding, 2, "the client's write ran while role 1 was still rebuilding (rate too high?)");
    let t0 = Instant::now();
    while raw_superblock(&m[0]).slots[1].state != 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the background rebuild did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve exit {st}: {err}");
    assert_contains(&err, &["RebuildStarted event", "Rebuild80 event", "RebuildFinished event on array", "role 1 rebuilt", "stopped cleanly"], "serve stderr");
    let chk = uraid_ok(&["check", "--json", m0, sp]);
    let v: serde_json::Value = serde_json::from_str(&chk.stdout).unwrap();
    assert_eq!(v[0]["report"]["mismatches"].as_u64(), Some(0), "copies differ after the background rebuild: {v}");
    // Every byte from the rebuilt member alone.
    uraid_ok(&["fail", "--member", "0", m0, sp]);
    let arr = uraid_core::control::array::assemble(&specs(&m[2..])).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "the rebuilt member's data differs");
    arr.release();
}

/// A member that fails while `uraid serve` runs is replaced by the spare at
/// once (mdadm's behaviour): the connections move to the new volume between
/// requests, the spare is rebuilt in the background, and the client's
/// writes before, during and after all land.
#[test]
fn a_spare_takes_over_a_role_that_fails_while_serving() {
    let _g = shared();
    tools();
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let (m, cap, mut model) = mirror_and_spare(d.path(), "hot", 32 << 20);
    let (m0, m1, sp) = (s(&m[0]), s(&m[1]), s(&m[2]));
    // Member 1 fails the first write that reaches its bytes 40..41 MiB of
    // the data area (RAID 1: logical 40 MiB).
    let at = uraid_core::control::superblock::DATA_OFFSET + (40 << 20);
    let fp = ("URAID_FAILPOINT_FAIL_WRITES", format!("{m1}@{at}-{}", at + (1 << 20)));
    let srv = Served::start_env(&m, &d.path().join("s.sock"), &["--rebuild-rate", "24"], &[fp]);
    let qio = |cmds: &[&str]| {
        let mut c = Command::new("qemu-io");
        c.args(["-f", "raw"]);
        for x in cmds {
            c.args(["-c", x]);
        }
        run_tool(c.arg(srv.uri()))
    };
    qio(&["write -P 0x11 40M 1M", "flush"]);
    model[40 << 20..41 << 20].fill(0x11);
    // More writes while the spare comes in and rebuilds.
    for (i, off) in [8usize, 20, 44, 2].into_iter().enumerate() {
        let p = 0x21 + i as u8;
        qio(&[&format!("write -P {p} {off}M 2M"), "flush", &format!("read -P {p} {off}M 2M")]);
        model[off << 20..(off + 2) << 20].fill(p);
        std::thread::sleep(Duration::from_millis(300));
    }
    let t0 = Instant::now();
    loop {
        let raw = raw_superblock(&m[0]);
        if raw.slots.len() == 2 && raw.slots[1].uuid == raw_superblock(&m[2]).member_uuid && raw.slots[1].state == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the spare did not take over and finish its rebuild: {:?}", raw.slots);
        std::thread::sleep(Duration::from_millis(100));
    }
    qio(&["read -P 0x11 40M 1M"]);
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve exit {st}: {err}");
    assert_contains(&err, &["member", "a spare takes over role(s) [1]", "role 1 rebuilt", "stopped cleanly"], "serve stderr");
    assert_stale(&uraid_ok(&["status", m0, m1, sp]), m1);
    let chk = uraid_ok(&["check", "--json", m0, sp]);
    let v: serde_json::Value = serde_json::from_str(&chk.stdout).unwrap();
    assert_eq!(v[0]["report"]["mismatches"].as_u64(), Some(0), "copies differ after the takeover: {v}");
    uraid_ok(&["fail", "--member", "0", m0, sp]);
    let arr = uraid_core::control::array::assemble(&specs(&m[2..])).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "the spare's data differs");
    arr.release();
}

/// `uraid ARGS...` with `URAID_RUN_DIR=run` (where `serve` publishes its
/// runtime state), to completion.
fn uraid_run_dir(run: &Path, args: &[&str]) -> Out {
    uraid_env(args, &[("URAID_RUN_DIR", run.as_os_str())])
}

/// While `uraid serve` runs, `uraid status` in another process shows the
/// live counters of the volume's write-back cache that `serve` publishes
/// in its runtime-state file (the members are locked by `serve`); a stale
/// file (its process gone) is not believed; a clean stop removes the file.
#[test]
fn status_shows_the_live_cache_counters_of_a_running_serve() {
    let _g = shared();
    tools();
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let run = d.path().join("run");
    let m = sparse_files(d.path(), "m", 3, 24 << 20);
    let ms: Vec<&str> = m.iter().map(|p| s(p)).collect();
    let mut create = vec!["create", "--level", "5", "--chunk", "64K", "--name", "live", "--cache", "writeback", "--cache-size", "16M", "--dirty-limit", "8M"];
    create.extend(&ms);
    uraid_ok(&create);
    let mut status_json = vec!["status", "--json"];
    status_json.extend(&ms);
    let mut status_text = vec!["status"];
    status_text.extend(&ms);
    let before: serde_json::Value = serde_json::from_str(&uraid_ok(&status_json).stdout).unwrap();
    let uuid = before["uuid"].as_str().expect("status --json names the array's uuid").to_string();
    assert!(before["served_by"].is_null(), "not served yet: {before}");
    let state = run.join(format!("{uuid}.json"));

    let srv = Served::start_env(&m, &d.path().join("s.sock"), &[], &[("URAID_RUN_DIR", s(&run).to_string())]);
    let pid = srv.child.as_ref().expect("running").0.id();
    // Three writes (one of 4 KiB into the line the second left dirty) and
    // a read of what the first left in the cache.
    run_tool(Command::new("qemu-io").args([
        "-f", "raw", "-c", "write -P 0x5a 0 1M", "-c", "write -P 0x33 4M 8k", "-c", "write -P 0x44 4M 4k", "-c", "read -P 0x5a 0 64k",
    ]).arg(srv.uri()));
    // From another process, polled: serve publishes about once a second.
    let t0 = Instant::now();
    let j = loop {
        let o = uraid_run_dir(&run, &status_json);
        assert!(o.status.success(), "`{}` failed while serve runs:\n{}", o.cmdline, o.stderr);
        let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("status --json: {e}:\n{}", o.stdout));
        if j["volumes"][0]["cache_stats"]["writes"].as_u64().unwrap_or(0) >= 3 {
            break j;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "status never showed the 3 writes through the export: {j}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let c = &j["volumes"][0]["cache_stats"];
    assert_eq!(c["mode"], "writeback", "{j}");
    assert_eq!(c["writes"].as_u64(), Some(3), "one per NBD write: {j}");
    assert!(c["read_hits"].as_u64().unwrap_or(0) >= 1 && c["hit_ratio"].as_f64().unwrap_or(0.0) > 0.0, "the read hit the cache: {j}");
    assert_eq!(j["volumes"][0]["cache"]["mode"], "writeback", "{j}");
    assert_eq!(j["served_by"]["pid"].as_u64(), Some(pid as u64), "{j}");
    let age = j["served_by"]["age_seconds"].as_f64().expect("age_seconds");
    assert!((0.0..5.0).contains(&age), "published {age} s ago: {j}");
    assert_eq!(j["members"].as_array().map(|a| a.len()), Some(3), "{j}");
    assert_eq!(j["volumes"][0]["state"], "clean", "{j}");
    let text = uraid_run_dir(&run, &status_text);
    assert!(text.status.success(), "{}: {}", text.cmdline, text.stderr);
    assert_contains(
        &text.stdout,
        &["served by uraid serve", "cache writeback 16M", "cache dirty", "hit ratio", "writes 3,", "merged", "written back", "whole stripes", &format!("served by uraid serve (pid {pid}), live from its control socket")],
        "status text while serving",
    );

    // Without a live publication the members held by serve stay refused:
    // no file in the run directory, or a stale one whose process is gone.
    let other = d.path().join("other");
    let o = uraid_run_dir(&other, &status_json);
    assert!(!o.status.success() && o.stderr.contains("in use by another uraid process"), "{}: {}", o.cmdline, o.stderr);
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let mut stale: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    stale["pid"] = dead_pid.into();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join(format!("{uuid}.json")), stale.to_string()).unwrap();
    let o = uraid_run_dir(&other, &status_json);
    assert!(!o.status.success() && o.stderr.contains("in use by another uraid process"), "a stale file was believed: {}: {}\n{}", o.cmdline, o.stderr, o.stdout);

    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve exit {st}: {err}");
    assert!(!state.exists(), "a clean stop leaves {}", state.display());
    let after: serde_json::Value = serde_json::from_str(&uraid_run_dir(&run, &status_json).stdout).unwrap();
    assert!(after["served_by"].is_null() && after["volumes"][0]["cache_stats"].is_null(), "after the stop: {after}");
}

/// `uraid` arguments: `head`, then the paths of `members`.
fn cmd(head: &[&str], members: &[PathBuf]) -> Vec<String> {
    head.iter().map(|h| h.to_string()).chain(members.iter().map(|p| s(p).to_string())).collect()
}

/// Four files of 100 MiB in `dir`: RAID 1 array `name` over the first
/// three in the journal cache mode, its 72 MiB journal on the third (role
/// 2); the fourth is free (a spare or a replacement).
fn raid1_with_member_journal(dir: &Path, name: &str) -> Vec<PathBuf> {
    let m = sparse_files(dir, "m", 4, 100 << 20);
    uraid_ok(&cmd(&["create", "--level", "1", "--name", name, "--cache", "journal", "--journal", s(&m[2]), "--journal-size", "72M"], &m[..3]));
    m
}

/// The byte offset `uraid status` gives for the journal on a member.
fn journal_start(members: &[&Path]) -> usize {
    let mut args = vec!["status"];
    args.extend(members.iter().map(|p| s(p)));
    let out = uraid_ok(&args);
    let line = out.stdout.lines().find(|l| l.contains("journal on role")).unwrap_or_else(|| panic!("no journal line: {}", out.stdout));
    line.split(" at byte ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// True when `data` lies in the first `below` bytes of one of `members`
/// (the volumes' area, before a journal region).
fn on_members(members: &[&Path], below: usize, data: &[u8]) -> bool {
    members.iter().any(|p| std::fs::read(p).unwrap()[..below].windows(data.len()).any(|w| w == data))
}

/// Serves `members`, writes `data` at `offset` and kills serve with
/// SIGKILL; true when the write was on no member then (it lived only in
/// the journal).
fn kill_with_a_write_in_the_journal(members: &[PathBuf], sock: &Path, name: &str, offset: u64, data: &[u8], below: usize) -> bool {
    let mut srv = Served::start(members, sock, &[]);
    let mut a = Raw::connect(&srv.socket, name);
    assert_eq!(a.write(1, offset, data), 0);
    srv.child.take().expect("running").kill_and_release(members);
    let _ = std::fs::remove_file(sock);
    let paths: Vec<&Path> = members.iter().map(|p| p.as_path()).collect();
    !on_members(&paths, below, data)
}

#[test]
fn a_journal_on_a_member_replays_after_a_kill_is_lost_with_the_member_and_moves_to_its_replacement() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = sparse_files(d.path(), "m", 5, 100 << 20);
    let mut args = vec!["create", "--level", "5", "--chunk", "64K", "--name", "jm", "--cache", "journal", "--journal", s(&m[3]), "--journal-size", "72M"];
    args.extend(m[..4].iter().map(|p| s(p)));
    let out = uraid_ok(&args);
    // The volume leaves room for the journal at the members' end.
    assert_contains(&out.stdout, &["RAID 5 over 4 members"], "create");
    let paths: Vec<&Path> = m[..4].iter().map(|p| p.as_path()).collect();
    let j = journal_start(&paths);
    assert!(j >= 20 << 20 && j + (72 << 20) <= 100 << 20, "journal region at byte {j}");
    let mut rng = rng("member journal");
    let mut data = vec![0u8; 4096];
    let sock = d.path().join("s.sock");

    // 1. An acknowledged write that lived only in the journal on member 3
    // when serve was killed is replayed at the next assemble.
    let mut replayed = false;
    for _ in 0..5 {
        rng.fill_bytes(&mut data);
        if kill_with_a_write_in_the_journal(&m[..4], &sock, "jm", 64 << 10, &data, j) {
            let out = uraid_ok(&cmd(&["assemble"], &m[..4]));
            assert_contains(&out.stderr, &["replayed 1 record", s(&m[3])], "assemble replays the member journal");
            assert!(on_members(&paths, j, &data), "the replayed write is not on the members");
            replayed = true;
            break;
        }
        uraid_ok(&cmd(&["assemble"], &m[..4]));
    }
    assert!(replayed, "serve wrote the write back before every SIGKILL: nothing was tested");

    // 2. The journal's member fails under serve (its journal writes fail):
    // writes go on, each acknowledged once on the members, and status says
    // the journal is lost.
    // The log fails, not the header: assemble's replay (which rewrites the
    // header) goes through, the first record written under serve fails.
    let fail = format!("{}@{}-{}", s(&m[3]), j + 4096, j + (72 << 20));
    let srv = Served::start_env(&m[..4], &sock, &[], &[("URAID_FAILPOINT_FAIL_WRITES", fail)]);
    let mut a = Raw::connect(&srv.socket, "jm");
    rng.fill_bytes(&mut data);
    assert_eq!(a.write(1, 128 << 10, &data), 0, "a write when the journal's member fails is acknowledged");
    assert!(on_members(&paths[..3], j, &data), "acknowledged without its journal, the write must be on the members");
    assert_eq!(a.read(2, 128 << 10, 4096).unwrap(), data);
    let mut more = vec![0u8; 256 << 10];
    rng.fill_bytes(&mut more);
    assert_eq!(a.write(3, 1 << 20, &more), 0);
    let st = uraid_ok(&cmd(&["status"], &m[..4]));
    assert_contains(&st.stdout, &["journal on role 3", "LOST", "write journal is lost", "role 3: ", "faulty"], "status while serving");
    drop(a);
    let (st, _, err) = srv.stop();
    assert!(st.success(), "{err}");
    assert_contains(&err, &["the journal is lost"], "serve says the journal is lost");
    let st = uraid_ok(&cmd(&["status"], &m[..4]));
    assert_contains(&st.stdout, &["LOST", "degraded"], "status after the stop");
    assert_contains(&st.stderr, &["its write journal on role 3 is lost"], "status warns");

    // 3. The replacement gets the journal (formatted in the same region)
    // and it is used again: a killed serve's write is replayed from it.
    let out = uraid_ok(&cmd(&["replace", "--old", "3", "--new", s(&m[4])], &m[..4]));
    assert_contains(&out.stderr, &["write journal on role 3 was formatted on", s(&m[4])], "replace");
    let now: Vec<PathBuf> = vec![m[0].clone(), m[1].clone(), m[2].clone(), m[4].clone()];
    let paths: Vec<&Path> = now.iter().map(|p| p.as_path()).collect();
    let st = uraid_ok(&cmd(&["status"], &now));
    assert_contains(&st.stdout, &["journal on role 3"], "status after replace");
    assert!(!st.stdout.contains("LOST"), "the journal is back: {}", st.stdout);
    let srv = Served::start(&now, &sock, &[]);
    let mut a = Raw::connect(&srv.socket, "jm");
    assert_eq!(a.read(2, 1 << 20, more.len() as u32).unwrap(), more, "written while the journal was lost");
    drop(a);
    let (st, _, err) = srv.stop();
    assert!(st.success(), "{err}");
    let mut replayed = false;
    for _ in 0..5 {
        rng.fill_bytes(&mut data);
        if kill_with_a_write_in_the_journal(&now, &sock, "jm", 64 << 10, &data, j) {
            let out = uraid_ok(&cmd(&["assemble"], &now));
            assert_contains(&out.stderr, &["replayed 1 record", s(&m[4])], "assemble replays the journal on the replacement");
            assert!(on_members(&paths, j, &data), "the replayed write is not on the members");
            replayed = true;
            break;
        }
        uraid_ok(&cmd(&["assemble"], &now));
    }
    assert!(replayed, "serve wrote the write back before every SIGKILL: nothing was tested");
    let c = uraid_ok(&cmd(&["check"], &now));
    assert_contains(&c.stdout, &["mismatches 0"], "check");
}

#[test]
fn an_unclean_array_without_its_journal_member_assembles_only_with_force() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = raid1_with_member_journal(d.path(), "jf");
    let sock = d.path().join("s.sock");
    let mut srv = Served::start(&m[..3], &sock, &[]);
    let mut a = Raw::connect(&srv.socket, "jf");
    assert_eq!(a.write(1, 0, &[0x3cu8; 4096]), 0);
    srv.child.take().expect("running").kill_and_release(&m[..3]);
    // Unclean, and the journal's member is not given: its records may hold
    // acknowledged writes.
    let snap = Snapshot::take(&m[..2]);
    let out = uraid_fails(
        &cmd(&["assemble"], &m[..2]),
        &["keeps its write journal on role 2", "not stopped cleanly", "acknowledged writes", "Nothing was written", "--force"],
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    snap.assert_unchanged("the refused assemble");
    let out = uraid_ok(&cmd(&["assemble", "--force"], &m[..2]));
    assert_contains(&out.stderr, &["its write journal on role 2 is lost", "accepted with --force"], "assemble --force");
    // A new member in the missing role gets the journal.
    let out = uraid_ok(&cmd(&["add", "--spare", s(&m[3])], &m[..2]));
    assert_contains(&out.stderr, &["write journal on role 2 was formatted on", s(&m[3])], "add");
    let now = [m[0].clone(), m[1].clone(), m[3].clone()];
    let st = uraid_ok(&cmd(&["status"], &now));
    assert_contains(&st.stdout, &["journal on role 2"], "status");
    assert!(!st.stdout.contains("LOST"), "{}", st.stdout);
}

#[test]
fn replacing_or_failing_the_journal_member_after_a_crash_keeps_the_journal_s_writes() {
    let _g = shared();
    tools();
    // After a kill, the journal's records hold acknowledged writes that are
    // on no member: replacing or failing the member that holds the journal
    // must put them on the members before the journal goes.
    let d = tmpdir();
    let m = raid1_with_member_journal(d.path(), "jr2");
    let paths: Vec<&Path> = m[..3].iter().map(|p| p.as_path()).collect();
    let j = journal_start(&paths);
    let sock = d.path().join("s.sock");
    let mut rng = rng("journal member after a crash");
    let mut data = vec![0u8; 4096];
    let mut crash = |members: &[PathBuf]| {
        for _ in 0..5 {
            rng.fill_bytes(&mut data);
            if kill_with_a_write_in_the_journal(members, &sock, "jr2", 64 << 10, &data, j) {
                return data.clone();
            }
            uraid_ok(&cmd(&["assemble"], members));
        }
        panic!("serve wrote the write back before every SIGKILL: nothing was tested");
    };
    let a = crash(&m[..3]);
    let out = uraid_ok(&cmd(&["replace", "--old", "2", "--new", s(&m[3])], &m[..3]));
    assert_contains(&out.stderr, &["replayed 1 record", "formatted on"], "replace");
    let now = [m[0].clone(), m[1].clone(), m[3].clone()];
    for p in &now {
        assert!(on_members(&[p.as_path()], j, &a), "{}: the journal's write is not there after the replace", p.display());
    }
    let b = crash(&now);
    let out = uraid_ok(&cmd(&["fail", "--member", "2"], &now));
    assert_contains(&out.stderr, &["replayed 1 record"], "fail");
    for p in &now[..2] {
        assert!(on_members(&[p.as_path()], j, &b), "{}: the journal's write is not there after the fail", p.display());
    }
}

/// A spare that takes over the role holding the journal while `uraid
/// serve` runs gets the journal formatted in the same region and in use
/// again at once: writes after the takeover live in the spare's journal
/// (a SIGKILL right after them finds them on no member) and the next
/// assemble replays them from there.
#[test]
fn a_spare_taking_over_the_journal_role_while_serving_carries_the_journal_on() {
    let _g = shared();
    tools();
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let m = raid1_with_member_journal(d.path(), "js");
    uraid_ok(&cmd(&["add", "--spare", s(&m[3])], &m[..3]));
    let paths: Vec<&Path> = m[..3].iter().map(|p| p.as_path()).collect();
    let j = journal_start(&paths);
    // Role 2 (the journal's member) fails the first write that reaches its
    // bytes 4..5 MiB of the data area (RAID 1: logical 4 MiB).
    let at = uraid_core::control::superblock::DATA_OFFSET + (4 << 20);
    let fp = ("URAID_FAILPOINT_FAIL_WRITES", format!("{}@{at}-{}", s(&m[2]), at + (1 << 20)));
    let sock = d.path().join("s.sock");
    let mut srv = Served::start_env(&m, &sock, &["--rebuild-rate", "200"], &[fp]);
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw", "-c", "write -P 0x11 4M 1M", "-c", "flush"]);
    run_tool(c.arg(srv.uri()));
    let spare = raw_superblock(&m[3]).member_uuid;
    let t0 = Instant::now();
    loop {
        let raw = raw_superblock(&m[0]);
        if raw.slots.len() == 3 && raw.slots[2].uuid == spare && raw.slots[2].state == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the spare did not take over role 2 and finish its rebuild: {:?}", raw.slots);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Writes after the takeover, then a kill before the flusher's write-back
    // (a line dirty in part waits for it): the journal holds them.
    let mut rng = rng("journal spare takeover");
    let mut a = Raw::connect(&srv.socket, "js");
    let mut blocks = Vec::new();
    for k in 0..4u64 {
        let mut data = vec![0u8; 4096];
        rng.fill_bytes(&mut data);
        assert_eq!(a.write(k + 1, (16 << 20) + k * (1 << 20), &data), 0);
        blocks.push(data);
    }
    let mut g = srv.child.take().expect("running");
    g.kill_and_release(&m);
    let mut err = String::new();
    std::io::Read::read_to_string(g.0.stderr.as_mut().unwrap(), &mut err).ok();
    assert_contains(&err, &["a spare takes over role(s) [2]", "write journal on role 2 was formatted on", s(&m[3]), "in use again"], "serve stderr");
    let now = [m[0].clone(), m[1].clone(), m[3].clone()];
    let now_paths: Vec<&Path> = now.iter().map(|p| p.as_path()).collect();
    let in_journal = blocks.iter().filter(|b| !on_members(&now_paths, j, b)).count();
    assert!(in_journal > 0, "serve wrote every write back before the SIGKILL: the spare's journal was not tested");
    let out = uraid_ok(&cmd(&["assemble"], &now));
    assert_contains(&out.stderr, &["replayed", s(&m[3])], "assemble after the kill");
    for b in &blocks {
        for p in &now_paths {
            assert!(on_members(&[p], j, b), "{}: a write acknowledged after the takeover is not there after the replay", p.display());
        }
    }
    let st = uraid_ok(&cmd(&["status"], &now));
    assert_contains(&st.stdout, &["journal on role 2"], "status");
    assert!(!st.stdout.contains("LOST"), "{}", st.stdout);
}

/// A journal device of its own that fails a write while serving is lost
/// for good: the volume entry records it at once, and the next assemble
/// after a SIGKILL does not replay its records, even given the device
/// again. They are stale: the writes after the loss went to the members
/// without it. Before this was recorded, replay laid a write recorded
/// before the loss over a newer, acknowledged and flushed one.
#[test]
fn a_journal_device_lost_while_serving_is_never_replayed() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = sparse_files(d.path(), "jl", 2, 64 << 20);
    let j = sparse_file(d.path(), "journal", 72 << 20);
    uraid_ok(&cmd(&["create", "--level", "1", "--name", "jl", "--cache", "journal", "--journal", s(&j)], &m));
    // The journal device fails every write past the first 256 KiB of its
    // log (its header, at byte 0, still takes them).
    let fp = ("URAID_FAILPOINT_FAIL_WRITES", format!("{}@{}-{}", s(&j), 4096 + (256 << 10), 72 << 20));
    let devs = [m[0].clone(), m[1].clone(), j.clone()];
    let sock = d.path().join("s.sock");
    let mut srv = Served::start_env(&devs, &sock, &[], &[fp]);
    let mut a = Raw::connect(&srv.socket, "jl");
    // `old` at X is recorded (its line stays dirty in part, so the flusher
    // leaves it for now); writes elsewhere then fill the log up to the
    // failing part: the journal is lost.
    let x = 8u64 << 20;
    let old = vec![0xB0u8; 4096];
    assert_eq!(a.write(1, x, &old), 0);
    let filler = vec![0x11u8; 64 << 10];
    for k in 0..8u64 {
        assert_eq!(a.write(2 + k, (16 << 20) + k * (128 << 10), &filler), 0);
    }
    // `new` at X after the loss, flushed.
    let new = vec![0xC0u8; 4096];
    assert_eq!(a.write(20, x, &new), 0);
    a.send(0, 3, 21, 0, 0, &[]);
    assert_eq!(a.reply(), (21, 0), "flush");
    let t0 = Instant::now();
    while raw_superblock(&m[0]).volumes[0].journal_flags & 1 == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the loss of the journal was not recorded in the superblock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut g = srv.child.take().expect("running");
    g.kill_and_release(&devs);
    // Given the lost journal again, assemble leaves its records alone.
    let out = uraid_ok(&cmd(&["assemble"], &devs));
    assert_contains(&out.stderr, &["was lost while running", "not replayed", "uraid config"], "assemble");
    assert!(!out.stderr.contains("replayed 1") && !out.stderr.contains("record(s)"), "{}", out.stderr);
    let at = (uraid_core::control::superblock::DATA_OFFSET + x) as usize;
    for p in &m {
        let img = std::fs::read(p).unwrap();
        assert!(img[at..at + 4096] == new[..], "{}: the write acknowledged and flushed after the loss was overwritten", p.display());
    }
    // Without the device too; and a journal set again clears the mark.
    uraid_ok(&cmd(&["assemble"], &m));
    let j2 = sparse_file(d.path(), "journal2", 72 << 20);
    uraid_ok(&cmd(&["config", "--cache", "journal", "--journal", s(&j2)], &m));
    assert_eq!(raw_superblock(&m[0]).volumes[0].journal_flags & 1, 0, "a new journal keeps the lost mark");
    let st = uraid_ok(&cmd(&["status"], &[m[0].clone(), m[1].clone(), j2.clone()]));
    assert!(!st.stdout.contains("LOST"), "{}", st.stdout);
}

/// A RAID 5 volume in the journal mode, killed (SIGKILL) in the middle of
/// its writes, assembles with a member missing without --force: its
/// journal's replay rewrites the stripes written at the crash whole, so
/// there is no write hole to accept (without a journal the same assemble
/// is refused: manage::degraded_unclean_parity_array_needs_force). Every
/// acknowledged write then reads back, degraded: those written back before
/// the kill and those only the journal held.
#[test]
fn a_journaled_raid5_killed_assembles_degraded_without_force() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = sparse_files(d.path(), "jd", 3, 64 << 20);
    let j = sparse_file(d.path(), "journal", 72 << 20);
    uraid_ok(&cmd(&["create", "--level", "5", "--chunk", "64K", "--name", "jd", "--cache", "journal", "--journal", s(&j)], &m));
    let devs = vec![m[0].clone(), m[1].clone(), m[2].clone(), j.clone()];
    let sock = d.path().join("s.sock");
    let mut srv = Served::start_env(&devs, &sock, &[], &[]);
    let mut a = Raw::connect(&srv.socket, "jd");
    let mut rng = rng("journaled raid5 degraded");
    let mut blocks: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut write = |a: &mut Raw, k: u64, blocks: &mut Vec<(u64, Vec<u8>)>| {
        let mut data = vec![0u8; 4096];
        rng.fill_bytes(&mut data);
        let at = rng.random_range(0..(32u64 << 20) / 4096) * 4096;
        assert_eq!(a.write(k, at, &data), 0);
        blocks.retain(|(o, _)| *o != at);
        blocks.push((at, data));
    };
    // Written back to the members (lines dirty in part go after 500 ms),
    // which leaves their bitmap regions dirty for a while...
    for k in 0..32 {
        write(&mut a, k + 1, &mut blocks);
    }
    std::thread::sleep(Duration::from_millis(1200));
    // ... and held by the journal only.
    for k in 32..64 {
        write(&mut a, k + 1, &mut blocks);
    }
    let mut g = srv.child.take().expect("running");
    g.kill_and_release(&devs);
    assert_eq!(raw_superblock(&m[0]).state, 1, "the array was left active");
    // Member 1 is gone.
    let now = vec![m[0].clone(), m[2].clone(), j.clone()];
    let out = uraid_ok(&cmd(&["assemble"], &now));
    assert_contains(&out.stderr, &["not stopped cleanly and is degraded", "journal is replayed first", "no write hole", "replayed"], "assemble");
    assert!(!out.stderr.contains("may be wrong"), "{}", out.stderr);
    let srv = Served::start_env(&now, &sock, &[], &[]);
    let mut a = Raw::connect(&srv.socket, "jd");
    for (k, (at, data)) in blocks.iter().enumerate() {
        assert!(a.read(1000 + k as u64, *at, 4096).unwrap() == *data, "the write at {at} does not read back after the degraded assemble");
    }
}

/// Members without discard (their discards and zeroings fail with
/// EOPNOTSUPP, as on a drive without deallocate or a file on a filesystem
/// without hole punching: the `URAID_FAILPOINT_NO_DISCARD` failpoint, since
/// every filesystem this kernel mounts punches holes), a file and a loop
/// device, beside a member that can discard. `fstrim` on ext4 over the
/// export fails no member (before: the first TRIM failed both members, and
/// the RAID 5 with them); each is named once in a warning; the data is
/// intact and `check` finds no mismatch.
#[test]
fn fstrim_on_members_without_discard_fails_no_member() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let files = sparse_files(d.path(), "m", 3, 96 << 20);
    let lo_member = LoopDev::attach_with(&files[1], &["--direct-io=on"]);
    let m = vec![files[0].clone(), lo_member.dev.clone(), files[2].clone()];
    let mut args = vec!["create", "--level", "5", "--chunk", "64K", "--name", "notrim"];
    args.extend(m.iter().map(|p| s(p)));
    uraid_ok(&args);
    let env = [("URAID_FAILPOINT_NO_DISCARD", format!("{},{}", s(&m[0]), s(&m[1])))];

    let sock = d.path().join("s.sock");
    let tree = d.path().join("tree");
    make_tree(&tree, &mut rng("notrim"));
    let srv = Served::start_env(&m, &sock, &[], &env);
    let mut fs = FsOnNbd::attach(&srv.uri(), d.path(), true);
    run_tool(Command::new("cp").arg("-a").arg(&tree).arg(fs.mnt.join("tree")));
    let mut big = vec![0u8; 24 << 20];
    rand::rng().fill_bytes(&mut big);
    std::fs::write(fs.mnt.join("big"), &big).unwrap();
    run_tool(&mut Command::new("sync"));
    std::fs::remove_file(fs.mnt.join("big")).unwrap();
    run_tool(&mut Command::new("sync"));
    run_tool(Command::new("fstrim").arg(&fs.mnt));
    run_tool(Command::new("fstrim").arg(&fs.mnt));
    let st = uraid_ok(&["status", s(&m[0]), s(&m[1]), s(&m[2])]);
    assert!(!st.stdout.contains("faulty") && st.stdout.contains("[UUU]"), "a member was failed by fstrim:\n{}", st.stdout);
    fs.detach();
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve: {err}");
    // One warning per member that refused: the file's discards and
    // zeroings, the block device's zeroing (its discards are real ones).
    assert_eq!(err.matches("does not support discard").count(), 1, "not one warning for the file member without discard: {err}");
    assert_eq!(err.matches("refused a zeroing").count(), 1, "not one warning for the block member without zeroing: {err}");

    let c = uraid_ok(&["check", s(&m[0]), s(&m[1]), s(&m[2])]);
    assert!(c.stdout.contains("mismatches 0"), "check after fstrim: {}", c.stdout);
    let srv = Served::start_env(&m, &sock, &[], &env);
    let mut fs = FsOnNbd::attach(&srv.uri(), d.path(), false);
    run_tool(Command::new("diff").arg("-r").arg(&tree).arg(fs.mnt.join("tree")));
    fs.detach();
    let (st, _, err) = srv.stop();
    assert!(st.success(), "serve: {err}");
    drop(lo_member);
}

/// `uraid bench` on an export, through uraid's own NBD client: the tests
/// run and count I/O; a filesystem put on the export with real tools
/// (mkfs.ext4 on a file, nbdcopy into the export) makes it refuse the
/// write tests, with the export left as it was; read tests still run.
#[test]
fn uraid_bench_measures_an_export_and_will_not_write_over_its_filesystem() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let m = array(d.path(), 2, 24 << 20, "benched");
    let srv = Served::start(&m, &d.path().join("s.sock"), &[]);
    let quick = ["bench", "--json", "--runs", "1", "--time", "0.2", "--warmup", "0", "--size", "8M"];
    let o = uraid_ok(&with(&quick, &["--profile", "RND4K-Q32T1,SEQ1M-Q8T1", &srv.uri()]));
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("bench --json");
    let target = j["target"].as_str().unwrap_or_default();
    assert!(target.starts_with("NBD export nbd+unix:///benched?socket="), "{j}");
    assert_eq!(j["capacity"].as_u64(), Some(2 * (23 << 20)), "{j}");
    let results = j["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "read and write of two profiles: {j}");
    for r in results {
        assert!(r["best"]["ios"].as_u64().unwrap_or(0) > 0, "a test did no I/O: {r}");
    }
    // A filesystem on the export.
    let img = sparse_file(d.path(), "fs.img", 8 << 20);
    mkfs_ext4(&img);
    run_tool(Command::new("nbdcopy").arg(&img).arg(srv.uri()));
    let before = d.path().join("before");
    run_tool(Command::new("nbdcopy").arg(srv.uri()).arg(&before));
    let o = uraid_fails(
        &with(&quick, &["--profile", "RND4K-Q1T1", &srv.uri()]),
        &["the export nbd+unix:///benched", "holds an ext2/ext3/ext4 filesystem", "Nothing was written", "--overwrite"],
    );
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    let after = d.path().join("after");
    run_tool(Command::new("nbdcopy").arg(srv.uri()).arg(&after));
    assert!(std::fs::read(&before).unwrap() == std::fs::read(&after).unwrap(), "the refused bench changed the export");
    uraid_ok(&with(&quick, &["--profile", "RND4K-Q1T1", "--read-only", &srv.uri()]));
    // Mistakes in the target are told as such.
    uraid_fails(&["bench", "nbd+unix:///nope?socket=/nonexistent.sock"], &["cannot connect", "is the server running"]);
    uraid_fails(&["bench", &srv.uri(), s(&img)], &["benchmarked alone"]);
    let wrong = srv.uri().replace("/benched?", "/other?");
    uraid_fails(&["bench", "--read-only", &wrong], &["no export named 'other'"]);
    let (st, _, _) = srv.stop();
    assert!(st.success());
}
