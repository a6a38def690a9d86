//! Helpers shared by the end-to-end tests: temporary members, byte
//! snapshots, the `uraid` binary, external tools and loop devices.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// The `uraid` binary built for these tests.
pub const URAID: &str = env!("CARGO_BIN_EXE_uraid");

/// 1 MiB: where the data area starts on every member.
pub const DATA_OFFSET: u64 = 1 << 20;
/// Bytes of the superblock at offset 0 of every member.
pub const SB_SIZE: usize = 4096;
/// The superblock magic (superblock.rs, offset 0).
pub const MAGIC: &[u8; 8] = b"URAIDSB\x01";

static LOAD: RwLock<()> = RwLock::new(());

/// Taken (shared) by every test; the timing test takes it exclusively so that
/// no other test of this binary competes with it for the CPUs.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    LOAD.read().unwrap_or_else(|e| e.into_inner())
}

/// Exclusive use of the machine among the tests of this binary.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    LOAD.write().unwrap_or_else(|e| e.into_inner())
}

/// A random generator whose seed is printed (and can be forced with
/// `URAID_E2E_SEED`) so that a failing workload can be replayed.
pub fn rng(test: &str) -> SmallRng {
    let seed = match std::env::var("URAID_E2E_SEED") {
        Ok(s) => s.parse().expect("URAID_E2E_SEED must be an integer"),
        Err(_) => rand::random::<u64>(),
    };
    eprintln!("{test}: seed {seed} (URAID_E2E_SEED={seed} replays it)");
    SmallRng::seed_from_u64(seed)
}

/// A temporary directory on the root filesystem (/tmp, ext4 here: real
/// O_DIRECT).
pub fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("uraid-e2e-").tempdir().expect("cannot make a temporary directory")
}

/// A temporary directory in RAM (/dev/shm), for large files.
pub fn shm_tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("uraid-e2e-").tempdir_in("/dev/shm").expect("cannot make a directory in /dev/shm")
}

/// Creates a sparse file of `size` bytes (all zero).
pub fn sparse_file(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    let f = File::create(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    f.set_len(size).unwrap_or_else(|e| panic!("cannot size {}: {e}", p.display()));
    p
}

/// `n` sparse files `m0`, `m1`, ... of `size` bytes.
pub fn sparse_files(dir: &Path, prefix: &str, n: usize, size: u64) -> Vec<PathBuf> {
    (0..n).map(|i| sparse_file(dir, &format!("{prefix}{i}"), size)).collect()
}

/// Path as &str (the tests only make UTF-8 paths).
/// The paths as strings.
pub fn strs(paths: &[PathBuf]) -> Vec<&str> {
    paths.iter().map(|p| s(p)).collect()
}

/// `head` followed by `tail`: a command's arguments, then members.
pub fn with<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    [head, tail].concat()
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Member specs from paths.
pub fn specs<P: AsRef<Path>>(paths: &[P]) -> Vec<uraid_core::MemberSpec> {
    paths.iter().map(|p| uraid_core::MemberSpec::Path(p.as_ref().to_path_buf())).collect()
}

/// Index of the first byte where `a` and `b` differ (or the shorter length),
/// and how many bytes differ.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<(usize, usize)> {
    if a == b {
        return None;
    }
    let first = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let count = a.iter().zip(b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
    Some((first, count))
}

/// The full contents of some files, to prove later that nothing was written.
pub struct Snapshot {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl Snapshot {
    /// Reads every byte of every file now.
    pub fn take<P: AsRef<Path>>(paths: &[P]) -> Snapshot {
        Snapshot {
            files: paths
                .iter()
                .map(|p| {
                    let p = p.as_ref().to_path_buf();
                    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
                    (p, b)
                })
                .collect(),
        }
    }

    /// Panics, naming the file and the first changed byte, when any file
    /// differs from the snapshot in length or content.
    pub fn assert_unchanged(&self, after: &str) {
        for (p, before) in &self.files {
            let now = std::fs::read(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            if let Some((first, count)) = first_difference(before, &now) {
                panic!(
                    "after {after}: {} changed although nothing may be written: {count} byte(s) differ, the first \
                     at offset {first} (length {} -> {})",
                    p.display(),
                    before.len(),
                    now.len()
                );
            }
        }
    }

    /// The bytes of file `i` as snapshotted.
    pub fn bytes(&self, i: usize) -> &[u8] {
        &self.files[i].1
    }
}

/// What a run of the `uraid` binary produced.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub cmdline: String,
}

/// Runs `uraid ARGS...` to completion.
pub fn uraid<S: AsRef<OsStr>>(args: &[S]) -> Out {
    uraid_env(args, &[])
}

/// Runs `uraid ARGS...` to completion with the environment variables `env`
/// added.
pub fn uraid_env<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &OsStr)]) -> Out {
    let vars: String = env.iter().map(|(k, v)| format!("{k}={} ", v.to_string_lossy())).collect();
    let cmdline = format!(
        "{vars}uraid {}",
        args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    );
    let o = Command::new(URAID)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {URAID}: {e}"));
    Out {
        status: o.status,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        cmdline,
    }
}

/// Runs `uraid ARGS...` and panics unless it succeeds.
pub fn uraid_ok<S: AsRef<OsStr>>(args: &[S]) -> Out {
    let o = uraid(args);
    assert!(
        o.status.success(),
        "`{}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.cmdline,
        o.status,
        o.stdout,
        o.stderr
    );
    o
}

/// Runs `uraid ARGS...`, expects exit status 1 and an error on stderr that
/// contains every one of `needles` (case-insensitive).
pub fn uraid_fails<S: AsRef<OsStr>>(args: &[S], needles: &[&str]) -> Out {
    let o = uraid(args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "`{}` should fail with exit status 1 but ended with {}:\nstdout:\n{}\nstderr:\n{}",
        o.cmdline,
        o.status,
        o.stdout,
        o.stderr
    );
    assert!(o.stderr.contains("uraid: error:"), "`{}`: no error line on stderr: {}", o.cmdline, o.stderr);
    assert_contains(&o.stderr, needles, &o.cmdline);
    o
}

/// Panics unless `text` contains every needle (case-insensitive).
/// Checks that `uraid status` shows the array and names `dev` as stale
/// (removed or replaced: no longer a member) instead of refusing.
pub fn assert_stale(o: &Out, dev: &str) {
    assert_contains(&o.stdout, &[&format!("stale: {dev}"), "no longer a member"], &o.cmdline);
    assert_contains(&o.stderr, &[&format!("{dev} is stale")], &o.cmdline);
}

pub fn assert_contains(text: &str, needles: &[&str], what: &str) {
    let lower = text.to_lowercase();
    for n in needles {
        assert!(lower.contains(&n.to_lowercase()), "{what}: expected the message to mention {n:?}, got:\n{text}");
    }
}

/// Checks a library error: its kind and its message.
pub fn assert_error<T: std::fmt::Debug>(
    r: uraid_core::Result<T>,
    kind: uraid_core::ErrorKind,
    needles: &[&str],
    what: &str,
) -> uraid_core::Error {
    let e = match r {
        Ok(v) => panic!("{what}: should fail with {kind:?} but succeeded: {v:?}"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), kind, "{what}: wrong error kind for: {e}");
    assert_contains(&e.to_string(), needles, what);
    e
}

/// Panics with a clear message when an external tool is missing.
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .any(|d| d.join(tool).is_file());
    assert!(
        found,
        "this test needs `{tool}`, which is not installed: install the Debian package {package} \
         (apt-get install {package}); the test is not skipped on purpose"
    );
}

/// Runs an external command and panics with its output unless it succeeds.
pub fn run_tool(cmd: &mut Command) -> String {
    let o = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A self-signed certificate for localhost and 127.0.0.1 (RSA 2048, one
/// day), made by openssl in `dir`: (certificate, key) PEM files.
pub fn self_signed_cert(dir: &Path) -> (PathBuf, PathBuf) {
    require_tool("openssl", "openssl");
    let (cert, key) = (dir.join("server-cert.pem"), dir.join("server-key.pem"));
    run_tool(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    (cert, key)
}

/// Puts a real ext4 filesystem on `path` (a file) with mkfs.ext4.
pub fn mkfs_ext4(path: &Path) {
    require_tool("mkfs.ext4", "e2fsprogs");
    run_tool(Command::new("mkfs.ext4").args(["-F", "-q"]).arg(path));
}

static LOOP_SETUP: Mutex<()> = Mutex::new(());

/// A loop device over a file, detached when dropped (also when the test
/// panics). Drop every array on it before the guard.
pub struct LoopDev {
    pub dev: PathBuf,
    pub backing: PathBuf,
}

impl LoopDev {
    /// `losetup -f --show FILE`.
    pub fn attach(backing: &Path) -> LoopDev {
        Self::attach_with(backing, &[])
    }

    /// `losetup -f --show ARGS FILE` (e.g. `--sector-size 4096`).
    pub fn attach_with(backing: &Path, args: &[&str]) -> LoopDev {
        require_tool("losetup", "mount (util-linux)");
        let _g = LOOP_SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let out = run_tool(Command::new("losetup").args(["-f", "--show"]).args(args).arg(backing));
        let dev = out.trim();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {out:?}");
        let dev = PathBuf::from(dev);
        LoopDev { dev, backing: backing.to_path_buf() }
    }
}

impl LoopDev {
    /// True while the device is still bound to a backing file.
    fn attached(&self) -> bool {
        let name = self.dev.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        Path::new(&format!("/sys/block/{name}/loop/backing_file")).exists()
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _g = LOOP_SETUP.lock().unwrap_or_else(|e| e.into_inner());
        // The device can be busy for a moment after its last user closed it
        // (udev probing it, a ring being torn down): retry for up to 5 s,
        // and wait until the kernel has really let go of the backing file.
        let mut last = None;
        for _ in 0..100 {
            if !self.attached() {
                return;
            }
            let st = Command::new("losetup").arg("-d").arg(&self.dev).stdin(Stdio::null()).stderr(Stdio::piped()).output();
            if !matches!(&st, Ok(o) if o.status.success()) {
                last = Some(st);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        eprintln!("warning: could not detach {} (losetup -d: {last:?}); detach it by hand", self.dev.display());
    }
}

/// A child process killed (and reaped) when dropped.
pub struct ChildGuard(pub std::process::Child);

impl ChildGuard {
    /// SIGKILL, then waits until the process is gone and its locks on
    /// `members` are free: the kernel tears a killed process's io_uring
    /// down after it is reaped, and keeps the member files (and their
    /// `flock`) open until then (measured: 40 to 60 ms here), so a command
    /// run at once waits for the lock (uraid waits up to 2 s).
    pub fn kill_and_release<P: AsRef<Path>>(&mut self, members: &[P]) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
        let t0 = std::time::Instant::now();
        for p in members {
            let f = std::fs::File::open(p.as_ref()).unwrap();
            loop {
                // SAFETY: flock on a descriptor open for this call; the lock
                // goes when `f` is dropped.
                if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                    break;
                }
                assert!(t0.elapsed().as_secs() < 30, "{}: still locked 30 s after the kill", p.as_ref().display());
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78), bit by bit: an
/// independent check of the superblock checksum.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

/// One slot-table entry of a raw superblock (format version 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSlot {
    pub uuid: [u8; 16],
    /// 0 active, 1 faulty, 2 rebuilding, 3 spare, 4 missing.
    pub state: u8,
    /// Absolute member byte offset rebuilt so far; u64::MAX when in sync.
    pub recovery: u64,
}

/// One volume-table entry of a raw superblock (format version 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawVolume {
    pub name: String,
    pub uuid: [u8; 16],
    pub level: u32,
    pub chunk: u32,
    pub member_start: u64,
    pub member_size: u64,
    pub cache_mode: u8,
    /// Byte 73: bit 0, a journal device of its own lost while running.
    pub journal_flags: u8,
}

/// The superblock fields as the on-disk format table in superblock.rs
/// documents them (version 2), decoded here independently of the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSuperblock {
    pub version: u32,
    pub sb_size: u32,
    pub array_uuid: [u8; 16],
    pub member_uuid: [u8; 16],
    pub name: String,
    pub member_count: u32,
    /// This member's slot: its role, or a spare slot at or above member_count.
    pub slot: u32,
    pub events: u64,
    /// 0 clean, 1 active.
    pub state: u32,
    pub bitmap_region: u64,
    /// Roles, then spares.
    pub slots: Vec<RawSlot>,
    pub volumes: Vec<RawVolume>,
}

fn name_from(raw: &[u8]) -> String {
    let end = raw.iter().position(|&c| c == 0).unwrap_or(32);
    String::from_utf8(raw[..end].to_vec()).unwrap()
}

/// Decodes the first 4 KiB of a member file by the documented layout and
/// checks the magic and the CRC-32C.
pub fn raw_superblock(path: &Path) -> RawSuperblock {
    use std::io::Read;
    let mut b = vec![0u8; SB_SIZE];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .unwrap_or_else(|e| panic!("cannot read the superblock of {}: {e}", path.display()));
    assert_eq!(&b[0..8], MAGIC, "{}: no uraid magic at offset 0", path.display());
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    assert_eq!(u32_at(4092), crc32c(&b[..4092]), "{}: superblock CRC-32C does not match", path.display());
    let slot_count = u32_at(84) as usize;
    let volume_count = u32_at(92) as usize;
    assert!(slot_count <= 40 && volume_count <= 8, "{}: {slot_count} slots, {volume_count} volumes", path.display());
    RawSuperblock {
        version: u32_at(8),
        sb_size: u32_at(12),
        array_uuid: b[16..32].try_into().unwrap(),
        member_uuid: b[32..48].try_into().unwrap(),
        name: name_from(&b[48..80]),
        member_count: u32_at(80),
        slot: u32_at(88),
        events: u64_at(112),
        state: u32_at(120),
        bitmap_region: u64_at(128),
        slots: (0..slot_count)
            .map(|i| {
                let o = 256 + 32 * i;
                RawSlot { uuid: b[o..o + 16].try_into().unwrap(), state: b[o + 16], recovery: u64_at(o + 24) }
            })
            .collect(),
        volumes: (0..volume_count)
            .map(|i| {
                let o = 1536 + 128 * i;
                RawVolume {
                    name: name_from(&b[o..o + 32]),
                    uuid: b[o + 32..o + 48].try_into().unwrap(),
                    level: u32_at(o + 48),
                    chunk: u32_at(o + 52),
                    member_start: u64_at(o + 56),
                    member_size: u64_at(o + 64),
                    cache_mode: b[o + 72],
                    journal_flags: b[o + 73],
                }
            })
            .collect(),
    }
}

/// An engine request (the one place that spells out `Request`'s fields).
pub fn request(op: uraid_core::Op, offset: u64, len: usize, buf: Option<uraid_core::IoBuf>, tag: u64) -> uraid_core::Request {
    uraid_core::Request { op, offset, len, buf, tag, fua: false }
}

/// Runs one range request (`op` over `len` bytes at `offset`) on `vol`.
pub fn range_op(vol: &std::sync::Arc<uraid_core::Volume>, op: uraid_core::Op, offset: u64, len: usize) {
    use uraid_core::BlockQueue;
    let mut q = vol.queue(4).expect("queue");
    q.push(request(op, offset, len, None, 7)).map_err(|r| r.error).expect("push");
    let mut out = Vec::new();
    while out.is_empty() {
        q.wait(1, &mut out);
    }
    out[0].result.as_ref().unwrap_or_else(|e| panic!("{op:?} of {len} bytes at {offset} failed: {e}"));
}

/// A file of `size` bytes written in full with random data (no holes).
pub fn written_file(dir: &Path, name: &str, size: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&p).unwrap());
    let mut rng = rng("suite target fill");
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..size >> 20 {
        rng.fill_bytes(&mut block);
        std::io::Write::write_all(&mut f, &block).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();
    p
}

/// Per-device ceilings of the fio comparison's drive.
pub const FIO_BW: u64 = 400_000_000;
pub const FIO_IOPS: u64 = 10_000;

/// A raw file on a drive with a ceiling, as the project's testbed makes
/// them: ext4 on a loop device over a file in RAM, throttled by the
/// kernel's blkio controller for the processes started with [`Self::cmd`].
/// On a bare file in RAM both tools are CPU-bound and measure the noise of
/// a shared 2-core machine; against a ceiling they measure the load.
pub struct ThrottledFile {
    /// The raw file (on ext4 on the throttled loop device).
    pub file: std::path::PathBuf,
    mnt: std::path::PathBuf,
    cgroup: std::path::PathBuf,
    _lo: LoopDev,
    _dir: tempfile::TempDir,
}

impl ThrottledFile {
    /// A file of `size` bytes (written with random data) on a fresh drive.
    pub fn new(size: u64) -> ThrottledFile {
        require_tool("mount", "mount");
        let dir = shm_tmpdir();
        // Room for ext4's journal and metadata beside the file.
        let img = sparse_file(dir.path(), "drive.img", size + size / 8 + (64 << 20));
        mkfs_ext4(&img);
        let lo = LoopDev::attach(&img);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        run_tool(Command::new("mount").args(["-o", "noatime"]).arg(&lo.dev).arg(&mnt));
        let cgroup = std::path::PathBuf::from(format!("/sys/fs/cgroup/blkio/uraid-e2e-suite-{}", std::process::id()));
        let t = ThrottledFile { file: mnt.join("raw.img"), mnt, cgroup, _lo: lo, _dir: dir };
        written_file(&t.mnt, "raw.img", size);
        std::fs::create_dir_all(&t.cgroup).unwrap_or_else(|e| panic!("this test needs the cgroup v1 blkio controller: {e}"));
        let name = t._lo.dev.file_name().unwrap().to_str().unwrap().to_string();
        let mm = std::fs::read_to_string(format!("/sys/block/{name}/dev")).unwrap();
        for (f, v) in [("read_bps_device", FIO_BW), ("write_bps_device", FIO_BW), ("read_iops_device", FIO_IOPS), ("write_iops_device", FIO_IOPS)] {
            std::fs::write(t.cgroup.join(format!("blkio.throttle.{f}")), format!("{} {v}", mm.trim())).unwrap();
        }
        t
    }

    /// `prog args...` started inside the throttled cgroup.
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg("echo $$ > \"$0\"/cgroup.procs && exec \"$@\"").arg(&self.cgroup).arg(prog);
        c
    }
}

impl Drop for ThrottledFile {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        for _ in 0..50 {
            if std::fs::remove_dir(&self.cgroup).is_ok() || !self.cgroup.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Starts `uraid serve --tcp 127.0.0.1:0` with `extra`; returns the child
/// and the port it printed.
pub fn serve_tcp(members: &[PathBuf], extra: &[&str]) -> (ChildGuard, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut args: Vec<&OsStr> = vec!["serve".as_ref(), "--tcp".as_ref(), "127.0.0.1:0".as_ref()];
    args.extend(extra.iter().map(OsStr::new));
    args.extend(members.iter().map(|m| m.as_os_str()));
    serve_logged(&args, &[], log.path())
}

/// Starts `uraid ARGS...` (a `serve` on TCP) with the environment `env`
/// added and its stderr in the file `log`; returns the child and the port
/// of the URI it printed first.
pub fn serve_logged<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &OsStr)], log: &Path) -> (ChildGuard, String) {
    use std::io::BufRead;
    // The `uraid create` just before may hold a member for a moment after
    // it exits (the kernel drops its io_uring's files later); under a
    // loaded run that can outlast serve's own 2 s wait: start it again.
    let mut tries = 0;
    let (child, first) = loop {
        let err = std::fs::File::create(log).unwrap();
        let mut child = ChildGuard(
            std::process::Command::new(URAID)
                .args(args)
                .envs(env.iter().copied())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(err)
                .spawn()
                .unwrap(),
        );
        let mut first = String::new();
        std::io::BufReader::new(child.0.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
        if !first.trim().is_empty() {
            break (child, first);
        }
        let _ = child.0.wait();
        let e = std::fs::read_to_string(log).unwrap_or_default();
        tries += 1;
        assert!(tries < 20 && e.contains(" in use "), "uraid serve printed no URI: {e}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    let uri = first.split_whitespace().last().expect("serve prints its URI").to_string();
    assert!(uri.starts_with("nbd://") || uri.starts_with("nbds://"), "URI {uri}");
    let authority = uri.split("://").nth(1).and_then(|r| r.split('/').next()).expect("HOST:PORT");
    let port = authority.rsplit(':').next().expect("a port").to_string();
    (child, port)
}

pub fn mounted(mnt: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines().any(|l| l.split(' ').nth(1) == mnt.to_str())
}

/// nbdfuse + a loop device + a mount point, torn down in reverse on drop.
pub struct FsOnNbd {
    fuse: Option<ChildGuard>,
    fuse_dir: PathBuf,
    loopdev: Option<LoopDev>,
    pub mnt: PathBuf,
}

impl FsOnNbd {
    pub fn attach(uri: &str, dir: &Path, mkfs: bool) -> FsOnNbd {
        require_tool("nbdfuse", "libnbd-bin");
        let fuse_dir = dir.join("fuse");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&fuse_dir).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let child = Command::new("nbdfuse").arg(&fuse_dir).arg(uri).stdin(Stdio::null()).spawn().expect("nbdfuse");
        let mut me = FsOnNbd { fuse: Some(ChildGuard(child)), fuse_dir: fuse_dir.clone(), loopdev: None, mnt };
        let t0 = Instant::now();
        while !fuse_dir.join("nbd").exists() {
            assert!(t0.elapsed() < Duration::from_secs(20), "nbdfuse did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let lo = LoopDev::attach(&fuse_dir.join("nbd"));
        if mkfs {
            require_tool("mkfs.ext4", "e2fsprogs");
            run_tool(Command::new("mkfs.ext4").args(["-F", "-q", "-E", "nodiscard"]).arg(&lo.dev));
        }
        run_tool(Command::new("mount").arg(&lo.dev).arg(&me.mnt));
        me.loopdev = Some(lo);
        me
    }

    /// The loop device over the export (what is mounted).
    pub fn loop_device(&self) -> &Path {
        &self.loopdev.as_ref().expect("attached").dev
    }

    pub fn detach(&mut self) {
        if mounted(&self.mnt) {
            run_tool(Command::new("umount").arg(&self.mnt));
        }
        self.loopdev.take();
        if self.fuse.is_some() {
            let _ = Command::new("fusermount3").arg("-u").arg(&self.fuse_dir).status();
            let _ = Command::new("umount").arg(&self.fuse_dir).stderr(Stdio::null()).status();
            self.fuse.take();
        }
    }
}

impl Drop for FsOnNbd {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        self.loopdev.take();
        let _ = Command::new("umount").arg("-l").arg(&self.fuse_dir).stderr(Stdio::null()).status();
        self.fuse.take();
    }
}
