//! Every error a user can cause with create and assemble: the message says
//! what is wrong, the CLI exits with status 1, and not one byte of any
//! member changes (full contents compared before and after).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use uraid_core::control::array::{self, CreateOptions};
use uraid_core::ErrorKind;

use crate::util::*;

const MIB: u64 = 1 << 20;

fn opts(chunk: u64, name: &str, force: bool) -> CreateOptions {
    CreateOptions { level: 0, chunk, name: name.into(), force, ..Default::default() }
}

/// Creates a stopped array over `n` new 8 MiB files `prefix0..`.
fn make_array(dir: &Path, prefix: &str, n: usize, name: &str) -> Vec<PathBuf> {
    let files = sparse_files(dir, prefix, n, 8 * MIB);
    let arr = array::create(&specs(&files), &opts(64 << 10, name, false)).unwrap_or_else(|e| panic!("create {name}: {e}"));
    arr.stop().unwrap();
    files
}

fn create_args<'a>(chunk: &'a str, name: &'a str, files: &'a [&'a str]) -> Vec<&'a str> {
    let mut a = vec!["create", "--level", "0", "--chunk", chunk, "--name", name];
    a.extend_from_slice(files);
    a
}


#[test]
fn create_rejects_bad_chunk_level_name_and_members() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "m", 2, 8 * MIB);
    let f = strs(&files);
    let snap = Snapshot::take(&files);
    for (chunk, bytes) in [("3K", 3072u64), ("2K", 2048), ("2M", 2 << 20), ("96K", 96 << 10), ("0", 0)] {
        let needles = ["chunk size", &bytes.to_string(), "power of two from 4K to 1M"];
        assert_error(array::create(&specs(&files), &opts(bytes, "x", false)), ErrorKind::InvalidInput, &needles, chunk);
        uraid_fails(&create_args(chunk, "x", &f), &needles);
        // --force changes nothing about it.
        let mut a = create_args(chunk, "x", &f);
        a.push("--force");
        uraid_fails(&a, &needles);
        snap.assert_unchanged(&format!("create --chunk {chunk}"));
    }
    uraid_fails(&create_args("12Q", "x", &f), &["chunk size '12Q'", "unknown unit"]);
    // Levels that need more members than the two given, and a level that
    // does not exist (RAID 1 and 10 take two: see manage.rs).
    for (level, needle) in [(5u32, "RAID 5 needs at least 3 members, 2 given"), (6, "RAID 6 needs at least 4 members, 2 given"), (7, "unknown RAID level 7")] {
        let o = CreateOptions { level, chunk: 64 << 10, name: "x".into(), force: false, ..Default::default() };
        assert_error(array::create(&specs(&files), &o), ErrorKind::InvalidInput, &[needle], &format!("level {level}"));
        let l = level.to_string();
        let mut a = vec!["create", "--level", &l, "--chunk", "64K", "--name", "x"];
        a.extend_from_slice(&f);
        uraid_fails(&a, &[needle]);
    }
    let long = "n".repeat(33);
    for name in ["two words", "", long.as_str(), "slash/no"] {
        assert_error(array::create(&specs(&files), &opts(65536, name, false)), ErrorKind::InvalidInput, &["array name", "not valid"], name);
        uraid_fails(&create_args("64K", name, &f), &["not valid"]);
    }
    // A member that does not exist, and one that is a directory.
    let missing = dir.path().join("nope");
    let mut a = create_args("64K", "x", &f);
    a.push(s(&missing));
    uraid_fails(&a, &["cannot open member", "nope", "No such file"]);
    let mut a = create_args("64K", "x", &f[..1]);
    a.push(s(dir.path()));
    uraid_fails(&a, &["neither a regular file nor a block device"]);
    snap.assert_unchanged("create with bad arguments");
}

#[test]
fn create_rejects_too_small_member() {
    let _g = shared();
    let dir = tmpdir();
    let big = sparse_file(dir.path(), "big", 8 * MIB);
    let tiny = sparse_file(dir.path(), "tiny", MIB);
    let snap = Snapshot::take(&[&big, &tiny]);
    let e = assert_error(
        array::create(&specs(&[&big, &tiny]), &opts(64 << 10, "small", false)),
        ErrorKind::TooSmall,
        &["too small", s(&tiny)],
        "1 MiB member",
    );
    assert!(!e.to_string().contains(s(&big)), "the error blames the wrong member: {e}");
    uraid_fails(&create_args("64K", "small", &[s(&big), s(&tiny)]), &["too small", s(&tiny)]);
    uraid_fails(&["create", "--name", "small", "--force", s(&tiny)], &["too small", s(&tiny)]);
    snap.assert_unchanged("create with a 1 MiB member");

    // The boundary: 1 MiB plus one chunk is enough, one sector less is not.
    let chunk = 64 << 10;
    let short = sparse_file(dir.path(), "short", MIB + chunk - 512);
    let exact = sparse_file(dir.path(), "exact", MIB + chunk);
    let snap = Snapshot::take(&[&big, &short]);
    assert_error(array::create(&specs(&[&big, &short]), &opts(chunk, "edge", false)), ErrorKind::TooSmall, &["too small"], "one sector short");
    snap.assert_unchanged("create with a member one sector short");
    let arr = array::create(&specs(&[&big, &exact]), &opts(chunk, "edge", false)).expect("1 MiB + one chunk is enough");
    assert_eq!(arr.volume().capacity(), 2 * chunk);
    arr.stop().unwrap();
}

#[test]
fn create_and_assemble_reject_duplicate_members() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "m", 2, 8 * MIB);
    let sym = dir.path().join("sym-to-m0");
    std::os::unix::fs::symlink(&files[0], &sym).unwrap();
    let hard = dir.path().join("hard-to-m1");
    std::fs::hard_link(&files[1], &hard).unwrap();
    let (m0, m1) = (s(&files[0]), s(&files[1]));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![m0, m1, m0], m0),
        (vec![m0, m1, s(&sym)], s(&sym)),
        (vec![s(&hard), m0, m1], m1),
    ];
    let snap = Snapshot::take(&files);
    for (list, second) in &cases {
        let what = format!("create {list:?}");
        assert_error(array::create(&specs(list), &opts(64 << 10, "dup", true)), ErrorKind::InvalidInput, &["given twice", second], &what);
        uraid_fails(&create_args("64K", "dup", list), &["given twice", second]);
        let mut forced = create_args("64K", "dup", list);
        forced.push("--force");
        uraid_fails(&forced, &["given twice"]);
        snap.assert_unchanged(&what);
    }

    // The same on assemble, with a real array on the files.
    let arr = array::create(&specs(&files), &opts(64 << 10, "dup", false)).unwrap();
    arr.stop().unwrap();
    let snap = Snapshot::take(&files);
    for (list, second) in &cases {
        let what = format!("assemble {list:?}");
        assert_error(array::assemble(&specs(list)), ErrorKind::InvalidInput, &["given twice", second], &what);
        let mut a = vec!["assemble"];
        a.extend_from_slice(list);
        uraid_fails(&a, &["given twice", second]);
        snap.assert_unchanged(&what);
    }
    // The check cannot pass vacuously: the array itself assembles.
    array::assemble(&specs(&files)).expect("the array assembles").stop().unwrap();
}

#[test]
fn assemble_rejects_member_of_another_array() {
    let _g = shared();
    let dir = tmpdir();
    let a = make_array(dir.path(), "a", 2, "alpha");
    let b = make_array(dir.path(), "b", 2, "beta");
    let all: Vec<&PathBuf> = a.iter().chain(&b).collect();
    let snap = Snapshot::take(&all);
    for list in [vec![&a[0], &b[1]], vec![&a[0], &a[1], &b[0]], vec![&b[0], &a[1]]] {
        let paths: Vec<&str> = list.iter().map(|p| s(p)).collect();
        let what = format!("assemble {paths:?}");
        let needles = ["belongs to array", "alpha", "beta", "give the members of one array"];
        assert_error(array::assemble(&specs(&list)), ErrorKind::Superblock, &needles, &what);
        let mut args = vec!["assemble"];
        args.extend_from_slice(&paths);
        uraid_fails(&args, &needles);
        snap.assert_unchanged(&what);
    }
    array::assemble(&specs(&b)).expect("beta alone assembles").stop().unwrap();
}

#[test]
fn assemble_rejects_missing_member() {
    let _g = shared();
    let dir = tmpdir();
    let m = make_array(dir.path(), "m", 3, "trio");
    let snap = Snapshot::take(&m);
    for (list, missing) in [(vec![&m[0], &m[2]], vec!["role 1"]), (vec![&m[1]], vec!["role 0", "role 2"]), (vec![&m[2], &m[0]], vec!["role 1"])] {
        let paths: Vec<&str> = list.iter().map(|p| s(p)).collect();
        let what = format!("assemble {paths:?}");
        let mut needles = vec!["'trio' has 3 members", "missing"];
        needles.extend(missing);
        assert_error(array::assemble(&specs(&list)), ErrorKind::Membership, &needles, &what);
        let mut args = vec!["assemble"];
        args.extend_from_slice(&paths);
        uraid_fails(&args, &needles);
        snap.assert_unchanged(&what);
    }
}

#[test]
fn assemble_rejects_non_member_copy_stale_and_truncated() {
    let _g = shared();
    let dir = tmpdir();
    let m = make_array(dir.path(), "m", 2, "pair");
    let (m0, m1) = (s(&m[0]), s(&m[1]));

    // A file that never was a member.
    let empty = sparse_file(dir.path(), "empty", 8 * MIB);
    let snap = Snapshot::take(&[&m[0], &m[1], &empty]);
    let needles = ["not a uraid member", "no superblock", s(&empty)];
    assert_error(array::assemble(&specs(&[&m[0], &m[1], &empty])), ErrorKind::Superblock, &needles, "non-member");
    uraid_fails(&["assemble", m0, m1, s(&empty)], &needles);
    snap.assert_unchanged("assemble with a non-member");

    // A byte-for-byte copy of a member: two claims on one role.
    let copy = dir.path().join("copy-of-m0");
    std::fs::copy(&m[0], &copy).unwrap();
    let snap = Snapshot::take(&[&m[0], &m[1], &copy]);
    let needles = ["both claim role 0", "pair", s(&copy)];
    assert_error(array::assemble(&specs(&[&m[0], &m[1], &copy])), ErrorKind::Membership, &needles, "copy");
    uraid_fails(&["assemble", m0, m1, s(&copy)], &needles);
    snap.assert_unchanged("assemble with a copy of a member");

    // A stale member: an old image of m0 put back after the array moved on.
    let backup = std::fs::read(&m[0]).unwrap();
    let before = raw_superblock(&m[0]).events;
    array::assemble(&specs(&m)).unwrap().stop().unwrap();
    let after = raw_superblock(&m[1]).events;
    assert!(after > before, "events did not move on assemble ({before} -> {after})");
    std::fs::write(&m[0], &backup).unwrap();
    let snap = Snapshot::take(&m);
    let needles = ["stale", &format!("event counter is {before}"), &format!("others are at {after}"), m0];
    assert_error(array::assemble(&specs(&m)), ErrorKind::Superblock, &needles, "stale");
    uraid_fails(&["assemble", m1, m0], &needles);
    snap.assert_unchanged("assemble with a stale member");

    // A truncated member (fresh array, m1 cut by one chunk).
    let t = make_array(dir.path(), "t", 2, "cut");
    let len = std::fs::metadata(&t[1]).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&t[1]).unwrap().set_len(len - (64 << 10)).unwrap();
    let snap = Snapshot::take(&t);
    let needles = ["truncated", s(&t[1])];
    assert_error(array::assemble(&specs(&t)), ErrorKind::TooSmall, &needles, "truncated");
    uraid_fails(&["assemble", s(&t[0]), s(&t[1])], &needles);
    snap.assert_unchanged("assemble with a truncated member");
}

#[test]
fn corrupted_superblock_is_refused_and_reported() {
    let _g = shared();
    let dir = tmpdir();
    let m = make_array(dir.path(), "m", 3, "crc");
    let victim = &m[1];
    let good = std::fs::read(victim).unwrap();
    // Array UUID, name, chunk, events, reserved bytes, the role table, the CRC itself.
    for pos in [20usize, 50, 85, 130, 300, 530, 2000, 4093] {
        let mut bad = good.clone();
        bad[pos] ^= 0x04;
        std::fs::write(victim, &bad).unwrap();
        let snap = Snapshot::take(&m);
        let what = format!("byte {pos} of {} flipped", victim.display());
        let needles = ["damaged superblock", "checksum mismatch", s(victim)];
        assert_error(array::assemble(&specs(&m)), ErrorKind::Superblock, &needles, &what);
        uraid_fails(&["assemble", s(&m[2]), s(&m[1]), s(&m[0])], &needles);
        let o = uraid_fails(&["examine", s(&m[0]), s(victim), s(&m[2])], &["1 member(s) have a damaged superblock"]);
        assert_contains(&o.stdout, &[&format!("{}: damaged uraid superblock", victim.display()), "checksum mismatch"], &what);
        let o = uraid_fails(&["examine", "--json", s(&m[0]), s(victim), s(&m[2])], &["damaged superblock"]);
        let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{what}: examine --json: {e}: {}", o.stdout));
        assert_eq!(j[1]["member"], s(victim));
        let err = j[1]["error"].as_str().unwrap_or_else(|| panic!("{what}: no error for the damaged member: {j}"));
        assert_contains(err, &["checksum mismatch"], &what);
        assert_eq!(j[0]["superblock"]["slot"], 0, "{what}: {j}");
        assert_eq!(j[2]["superblock"]["slot"], 2, "{what}: {j}");
        snap.assert_unchanged(&what);
    }
    // A damaged magic is no superblock at all.
    let mut bad = good.clone();
    bad[3] ^= 0x01;
    std::fs::write(victim, &bad).unwrap();
    assert_error(array::assemble(&specs(&m)), ErrorKind::Superblock, &["not a uraid member"], "magic flipped");
    // Put the good block back: the array assembles (so the checks above
    // failed because of the damage, not for another reason).
    std::fs::write(victim, &good).unwrap();
    array::assemble(&specs(&m)).expect("the repaired array assembles").stop().unwrap();
}

/// Waits until a child `uraid bench` has assembled its target (it prints
/// `target:` on stderr then) and returns the guard that kills it.
fn spawn_holder(args: &[&str]) -> ChildGuard {
    let mut child = Command::new(URAID)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start uraid bench");
    let stderr = child.stderr.take().unwrap();
    let guard = ChildGuard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.starts_with("target:") {
                let _ = tx.send(Ok(seen.clone()));
            }
        }
        let _ = tx.send(Err(seen));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(_)) => guard,
        Ok(Err(out)) => panic!("uraid {args:?} ended before holding its target:\n{out}"),
        Err(_) => panic!("uraid {args:?} did not report its target within 30 s"),
    }
}

#[test]
fn in_use_by_another_uraid_process() {
    let _g = shared();
    let dir = tmpdir();
    let m = make_array(dir.path(), "m", 2, "busy");
    let f = strs(&m);
    let in_use = ["in use", "stop that process first"];

    // This process holds the array; other uraid processes are refused.
    {
        let held = array::assemble(&specs(&m)).unwrap();
        let snap = Snapshot::take(&m);
        uraid_fails(&["assemble", f[1], f[0]], &in_use);
        uraid_fails(&create_args("64K", "other", &f), &in_use);
        let mut forced = create_args("64K", "other", &f);
        forced.push("--force");
        uraid_fails(&forced, &in_use);
        uraid_fails(&["bench", "--raw", "--read-only", "--runs", "1", "--time", "0.1", "--warmup", "0", "--size", "1M", f[0]], &in_use);
        // A second open in this very process is refused too.
        assert_error(array::assemble(&specs(&m)), ErrorKind::Busy, &["in use"], "second assemble");
        assert_error(array::create(&specs(&m), &opts(65536, "other", true)), ErrorKind::Busy, &["in use"], "create --force");
        snap.assert_unchanged("uraid commands on an array held by another process");
        held.stop().unwrap();
    }

    // A child `uraid bench` holds the array; this process is refused.
    {
        let holder = spawn_holder(&[
            "bench", "--read-only", "--profile", "RND4K-Q1T1", "--runs", "1", "--time", "120", "--warmup", "0", "--size", "4M",
            f[0], f[1],
        ]);
        let snap = Snapshot::take(&m);
        assert_error(array::assemble(&specs(&m)), ErrorKind::Busy, &["in use by another uraid process", f[0]], "assemble while bench runs");
        assert_error(array::create(&specs(&m), &opts(65536, "other", true)), ErrorKind::Busy, &["in use"], "create while bench runs");
        uraid_fails(&["assemble", f[0], f[1]], &in_use);
        snap.assert_unchanged("assemble while `uraid bench` holds the array");
        drop(holder);
    }
    // Once the holder is gone the array assembles again. The kernel drops
    // the lock when the dead process's io_uring is torn down, which it
    // does after the process is reaped (asynchronously, in a worker, once
    // the ring's I/O in flight has ended): allow it a moment. Usually
    // 40-60 ms; over 5 s was seen with both cores busy with other tests.
    let t0 = std::time::Instant::now();
    let arr = loop {
        match array::assemble(&specs(&m)) {
            Err(e) if e.kind() == ErrorKind::Busy && t0.elapsed() < Duration::from_secs(30) => std::thread::sleep(Duration::from_millis(20)),
            r => break r.expect("free again"),
        }
    };
    arr.stop().unwrap();
}

#[test]
fn in_use_loop_device() {
    let _g = shared();
    let dir = tmpdir();
    let file = sparse_file(dir.path(), "disk.img", 8 * MIB);
    let lo = LoopDev::attach(&file);
    let dev = s(&lo.dev).to_string();
    {
        let held = array::create(&specs(&[&lo.dev]), &opts(64 << 10, "loopy", false)).unwrap();
        held.volume().flush().unwrap();
        let snap = Snapshot::take(&[&file]);
        uraid_fails(&["assemble", &dev], &["in use"]);
        uraid_fails(&["create", "--force", "--name", "x", &dev], &["in use"]);
        snap.assert_unchanged("assemble of a loop device held by another process");
        held.stop().unwrap();
    }
    uraid_ok(&["assemble", &dev]);
    drop(lo);
}

#[test]
fn create_refuses_uraid_member_without_force() {
    let _g = shared();
    let dir = tmpdir();
    let m = make_array(dir.path(), "m", 2, "first");
    let fresh = sparse_file(dir.path(), "fresh", 8 * MIB);
    let old_uuid = raw_superblock(&m[0]).array_uuid;
    let snap = Snapshot::take(&[&m[0], &m[1], &fresh]);
    for list in [vec![&m[0], &m[1]], vec![&fresh, &m[1]]] {
        let paths: Vec<&str> = list.iter().map(|p| s(p)).collect();
        let what = format!("create over {paths:?}");
        let blamed = if list[0] == &fresh { s(&m[1]) } else { s(&m[0]) };
        let needles = ["holds a uraid superblock", "Nothing was written", "--force", blamed];
        assert_error(array::create(&specs(&list), &opts(65536, "second", false)), ErrorKind::WouldDestroy, &needles, &what);
        uraid_fails(&create_args("64K", "second", &paths), &needles);
        snap.assert_unchanged(&what);
    }
    let pair = [s(&fresh), s(&m[1])];
    let mut forced = create_args("128K", "second", &pair);
    forced.push("--force");
    let o = uraid_ok(&forced);
    assert_contains(&o.stdout, &["created array 'second'"], "create --force");
    let sb = raw_superblock(&m[1]);
    assert_ne!(sb.array_uuid, old_uuid, "--force did not make a new array");
    assert_eq!((sb.name.as_str(), sb.volumes[0].chunk, sb.slot), ("second", 128 << 10, 1));
    assert_eq!(raw_superblock(&fresh).array_uuid, sb.array_uuid);
}

#[test]
fn create_refuses_filesystem_without_force() {
    let _g = shared();
    let dir = tmpdir();
    let ext4 = sparse_file(dir.path(), "ext4.img", 16 * MIB);
    mkfs_ext4(&ext4);
    let other = sparse_file(dir.path(), "other", 16 * MIB);
    let snap = Snapshot::take(&[&ext4, &other]);
    assert_eq!(&snap.bytes(0)[1080..1082], &[0x53, 0xEF], "mkfs.ext4 wrote no ext4 magic");
    let needles = ["holds an ext2/ext3/ext4 filesystem", "Nothing was written", "--force", s(&ext4)];
    for list in [vec![&other, &ext4], vec![&ext4]] {
        let paths: Vec<&str> = list.iter().map(|p| s(p)).collect();
        assert_error(array::create(&specs(&list), &opts(65536, "fs", false)), ErrorKind::WouldDestroy, &needles, "create over ext4");
        uraid_fails(&create_args("64K", "fs", &paths), &needles);
        snap.assert_unchanged(&format!("create over ext4 {paths:?}"));
    }
    let o = uraid_ok(&["examine", "--json", s(&ext4)]);
    assert!(o.stdout.contains("ext2/ext3/ext4"), "examine does not name the filesystem: {}", o.stdout);
    let o = uraid_ok(&["create", "--level", "0", "--chunk", "64K", "--name", "fs", "--force", s(&other), s(&ext4)]);
    assert_contains(&o.stdout, &["created array 'fs'", "over 2 members"], "create --force over ext4");
    let sb = raw_superblock(&ext4);
    assert_eq!((sb.name.as_str(), sb.slot, sb.member_count), ("fs", 1, 2));
    let j: serde_json::Value = serde_json::from_str(&uraid_ok(&["examine", "--json", s(&ext4)]).stdout).unwrap();
    assert_eq!(j[0]["superblock"]["name"], "fs");
    uraid_ok(&["assemble", s(&ext4), s(&other)]);
}

/// Issue 14: a journal record whose header has a valid CRC but a length of
/// 0xFFFFFFFFFFFFFE00 made `uraid assemble` crash with SIGSEGV (the length
/// check wrapped, then the buffer size did). Now the record is not valid
/// (it does not fit the log): the log ends there and assemble goes on.
#[test]
fn a_crafted_journal_record_length_never_crashes_assemble() {
    let _g = shared();
    let d = tmpdir();
    let m = sparse_files(d.path(), "cj", 2, 64 << 20);
    let j = sparse_file(d.path(), "journal", 72 << 20);
    uraid_ok(&["create", "--level", "1", "--name", "cj", "--cache", "journal", "--journal", s(&j), s(&m[0]), s(&m[1])]);
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(&j).unwrap();
    let mut h = vec![0u8; 4096];
    std::io::Read::read_exact(&mut f, &mut h).unwrap();
    let le = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap());
    let (log_size, tail, tail_seq, nonce) = (le(64), le(72), le(80), le(88));
    let mut r = vec![0u8; 512];
    r[..8].copy_from_slice(b"URAIDJR\x01");
    r[8..16].copy_from_slice(&tail_seq.to_le_bytes());
    r[16..24].copy_from_slice(&tail.to_le_bytes());
    r[24..28].copy_from_slice(&1u32.to_le_bytes()); // a data record
    r[40..48].copy_from_slice(&0xFFFF_FFFF_FFFF_FE00u64.to_le_bytes());
    r[56..64].copy_from_slice(&nonce.to_le_bytes());
    let crc = crc32c(&r[..508]);
    r[508..512].copy_from_slice(&crc.to_le_bytes());
    std::os::unix::fs::FileExt::write_all_at(&f, &r, 4096 + tail % log_size).unwrap();
    f.sync_all().unwrap();
    let o = uraid(&["assemble", s(&m[0]), s(&m[1]), s(&j)]);
    assert!(o.status.code().is_some(), "uraid assemble died of a signal ({:?}): {}", o.status, o.stderr);
    assert!(o.status.success(), "uraid assemble failed: {}", o.stderr);
}
