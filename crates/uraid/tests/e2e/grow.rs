//! `uraid grow --add`: a RAID 5 array on file members grows onto a new
//! member; the data written through the export before reads back equal
//! through the export after (a real NBD client, nbdcopy), its parity
//! checks clean, the export is larger; `grow --size max` after the members
//! grew (a served array's --size is refused). Crash
//! tests: the grow process dies (the URAID_FAILPOINT_RESHAPE_CRASH
//! failpoint aborts it at a chosen stage of a chosen window, in the
//! critical section and past it; and SIGKILL at seeded random moments),
//! `uraid status` names the interrupted reshape, and the next `uraid
//! assemble` finishes it with every byte in place.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, RngCore};

use crate::util::*;

/// Serves `members` on a unix socket in `dir`, runs `f` with the export's
/// URI, then stops the server with SIGTERM (a clean stop).
fn with_export(dir: &Path, name: &str, members: &[PathBuf], f: impl FnOnce(&str)) {
    let (child, sock) = serve(dir, members, &[], None);
    f(&format!("nbd+unix:///{name}?socket={}", sock.display()));
    stop(child);
}

/// Starts `uraid serve` of `members` on a unix socket in `dir` (returned)
/// with the environment `env` and its stderr to the file `log` (or one
/// of its own in `dir`), and waits until it listens. A member still "in
/// use" by a process that just ended (its io_uring is torn down by the
/// kernel after the exit, seconds later on a loaded machine) is waited
/// for, up to 60 s, as after a crash.
fn serve(dir: &Path, members: &[PathBuf], env: &[(&str, &str)], log: Option<&Path>) -> (ChildGuard, PathBuf) {
    let sock = dir.join("grow.sock");
    let own = dir.join("serve.log");
    let log = log.unwrap_or(&own);
    let t0 = Instant::now();
    'start: loop {
        let _ = std::fs::remove_file(&sock);
        let mut child = ChildGuard(
            Command::new(URAID)
                .env("URAID_RUN_DIR", dir.join("run"))
                .envs(env.iter().copied())
                .arg("serve")
                .arg("--socket")
                .arg(&sock)
                .args(members)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap(),
        );
        while UnixStream::connect(&sock).is_err() {
            if let Some(st) = child.0.try_wait().unwrap() {
                std::mem::forget(child);
                let text = std::fs::read_to_string(log).unwrap_or_default();
                if text.contains(" in use ") && t0.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(200));
                    continue 'start;
                }
                panic!("uraid serve exited ({st}) before listening:\n{text}");
            }
            assert!(t0.elapsed() < Duration::from_secs(90), "uraid serve did not listen:\n{}", std::fs::read_to_string(log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(20));
        }
        return (child, sock);
    }
}

/// Stops a `uraid serve` with SIGTERM and checks it stopped cleanly.
fn stop(mut child: ChildGuard) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let st = child.0.wait().unwrap();
    std::mem::forget(child);
    assert!(st.success(), "uraid serve stopped with {st}");
}

fn export_size(uri: &str) -> u64 {
    run_tool(Command::new("nbdinfo").arg("--size").arg(uri)).trim().parse().unwrap()
}

/// A RAID `level` array over `n` files of 32 MiB in `dir`, its whole
/// volume written through the export with random bytes (returned).
fn filled(dir: &Path, name: &str, level: &str, n: usize, chunk: &str, seed: &str) -> (Vec<PathBuf>, Vec<u8>) {
    let m = sparse_files(dir, "m", n, 32 << 20);
    let data = filled_on(dir, name, level, &m, chunk, seed);
    (m, data)
}

/// As [`filled`], over the devices `m` (files or loop devices).
fn filled_on(dir: &Path, name: &str, level: &str, m: &[PathBuf], chunk: &str, seed: &str) -> Vec<u8> {
    uraid_ok(&with(&["create", "--level", level, "--chunk", chunk, "--name", name], &strs(m)));
    let mut data = Vec::new();
    with_export(dir, name, m, |uri| {
        data = vec![0u8; export_size(uri) as usize];
        rng(seed).fill_bytes(&mut data);
        let src = dir.join("before");
        std::fs::write(&src, &data).unwrap();
        run_tool(Command::new("nbdcopy").arg(&src).arg(uri));
    });
    data
}

/// Serves `members`, reads the whole export back and compares it with
/// `data` (the new space past it reads as zeros); returns the export's size.
fn verify(dir: &Path, name: &str, members: &[PathBuf], data: &[u8], what: &str) -> u64 {
    verify_from(dir, name, members, data, 0, what)
}

/// As [`verify`], for the bytes of `data` from `skip` on (a writer wrote
/// those before).
fn verify_from(dir: &Path, name: &str, members: &[PathBuf], data: &[u8], skip: usize, what: &str) -> u64 {
    let mut size = 0;
    with_export(dir, name, members, |uri| {
        size = export_size(uri);
        let back = dir.join("after");
        let _ = std::fs::remove_file(&back);
        run_tool(Command::new("nbdcopy").arg(uri).arg(&back));
        let got = std::fs::read(&back).unwrap();
        let diff = first_difference(&got[skip..data.len()], &data[skip..]).map(|(at, len)| (at + skip, len));
        assert!(diff.is_none(), "{what}: the data moved: first difference at {diff:?}");
        assert!(got[data.len()..].iter().all(|&b| b == 0), "{what}: the new space does not read as zeros");
    });
    let o = after_a_crash(&with(&["check", "--json"], &strs(members)));
    if !o.status.success() && o.stderr.contains("RAID 0 keeps no copies or parity") {
        return size;
    }
    assert!(o.status.success(), "{what}: check: {}", o.stderr);
    let r: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(r[0]["report"]["mismatches"].as_u64(), Some(0), "{what}: check after the grow: {r}");
    size
}

#[test]
fn grow_adds_a_member_to_raid5_and_the_data_stays() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    let d = tmpdir();
    let (mut m, data) = filled(d.path(), "g5", "5", 3, "64K", "grow5");
    let new = sparse_file(d.path(), "new", 32 << 20);
    // A served array's volume cannot grow where its members have no room
    // (a served array grows by --add in
    // service::a_served_array_grows_while_its_filesystem_is_in_use).
    let served = |args: &[&str]| Command::new(URAID).env("URAID_RUN_DIR", d.path().join("run")).args(with(args, &strs(&m))).output().unwrap();
    with_export(d.path(), "g5", &m, |_| {
        let o = served(&["grow", "--size", "max"]);
        assert!(!o.status.success());
        assert_contains(&String::from_utf8_lossy(&o.stderr), &["no more room", "nothing was written"], "grow --size of a served array");
    });
    // A configuration that lists the members: grow says to add the new one.
    let conf = d.path().join("uraid.conf");
    let st: serde_json::Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &strs(&m))).stdout).unwrap();
    let uuid = st["uuid"].as_str().unwrap().to_string();
    let listed: Vec<String> = m.iter().map(|p| format!("{:?}", s(p))).collect();
    std::fs::write(&conf, format!("[[array]]\nname = \"g5\"\nuuid = \"{uuid}\"\nmembers = [{}]\n", listed.join(", "))).unwrap();
    let o = uraid_env(&with(&["grow", "--quiet", "--add", s(&new)], &strs(&m)), &[("URAID_CONFIG", conf.as_os_str())]);
    assert!(o.status.success(), "grow: {}{}", o.stdout, o.stderr);
    assert_contains(&o.stdout, &["grew from 3 to 4 members", "through the backup area", "resize2fs"], "grow");
    assert_contains(&o.stderr, &["lists the members of array 'g5' without", s(&new), "members = [...]"], "grow with a config");
    m.push(new);
    let st: serde_json::Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &strs(&m))).stdout).unwrap();
    assert_eq!(st["members"].as_array().map(|a| a.len()), Some(4), "{st}");
    let size = verify(d.path(), "g5", &m, &data, "grow 3 -> 4");
    assert_eq!(size, data.len() as u64 / 2 * 3, "RAID 5 over 4 holds 3 chunks a row where 3 held 2");
    // Every member replaced by a larger one (the files grow): --size max,
    // served (the export moves to the larger volume) and then stopped.
    let enlarge = |len: u64| {
        for f in &m {
            std::fs::OpenOptions::new().write(true).open(f).unwrap().set_len(len).unwrap();
        }
    };
    enlarge(48 << 20);
    with_export(d.path(), "g5", &m, |uri| {
        let o = Command::new(URAID).env("URAID_RUN_DIR", d.path().join("run")).args(with(&["grow", "--size", "max"], &strs(&m))).output().unwrap();
        assert!(o.status.success(), "served grow --size max: {}", String::from_utf8_lossy(&o.stderr));
        assert_contains(&String::from_utf8_lossy(&o.stdout), &["volume 'g5' of array 'g5' grew from", "new connections see the new size"], "served grow --size");
        assert!(export_size(uri) > size + (40 << 20), "a new connection sees the old size");
    });
    let grown = verify(d.path(), "g5", &m, &data, "served grow --size max");
    assert!(grown > size + (40 << 20), "grow --size max: {size} -> {grown} bytes");
    enlarge(56 << 20);
    let o = uraid_ok(&with(&["grow", "--quiet", "--size", "max"], &strs(&m)));
    assert_contains(&o.stdout, &["volume 'g5' of array 'g5' (RAID 5) grew from", "of zeros written"], "grow --size max");
    let grown2 = verify(d.path(), "g5", &m, &data, "grow --size max");
    assert!(grown2 > grown + (20 << 20), "grow --size max: {grown} -> {grown2} bytes");
    let o = uraid(&with(&["grow", "--size", "max"], &strs(&m)));
    assert!(!o.status.success());
    assert_contains(&o.stderr, &["no more room", "nothing was written"], "grow --size max again");
}

/// `uraid ARGS` right after a process holding the members died: the
/// kernel ends its io_uring (and its hold on the members' locks) a moment
/// later, more so on a loaded machine (once more than 10 s, with the other
/// end-to-end tests running beside it); "in use" is tried again for up to
/// 60 s, as a user is told to.
fn after_a_crash(args: &[&str]) -> Out {
    let t0 = Instant::now();
    loop {
        let o = uraid(args);
        if o.status.success() || !o.stderr.contains(" in use ") || t0.elapsed() > Duration::from_secs(60) {
            return o;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One interrupted grow: `env` makes it die, then status names the
/// reshape and assemble finishes it.
fn interrupted(seed: u64, level: &str, crash: Option<&str>, kill_after: Option<Duration>) {
    interrupted_with(seed, level, crash, kill_after, false)
}

/// [`interrupted`]; with `power_cut`, the members have volatile caches
/// (the URAID_FAILPOINT_VOLATILE failpoint) and the crash failpoint cuts
/// the power first: each member loses a random subset of its writes not
/// yet flushed.
fn interrupted_with(seed: u64, level: &str, crash: Option<&str>, kill_after: Option<Duration>, power_cut: bool) {
    let d = tmpdir();
    let what = format!("RAID {level}, crash {crash:?}, kill after {kill_after:?} (seed {seed})");
    // "1>5": RAID 1 over 2 members restriped as RAID 5 over 4; "5@64K":
    // RAID 5 restriped with 64K chunks (from 16K); "5@64K=": over the
    // same members.
    let (level, same) = level.strip_suffix('=').map_or((level, false), |l| (l, true));
    let (level, chunk) = level.split_once('@').map_or((level, None), |(a, b)| (a, Some(b)));
    let (level, to) = level.split_once('>').map_or((level, None), |(a, b)| (a, Some(b)));
    let (n, k) = match (level, to) {
        ("6", _) => (4, 1),
        (_, Some(_)) => (2, 2),
        _ => (3, 2),
    };
    let k = if same { 0 } else { k };
    let (mut m, data) = filled(d.path(), "gc", level, n, "16K", &format!("grow-crash-{seed}"));
    let new: Vec<PathBuf> = (0..k).map(|i| sparse_file(d.path(), &format!("new{i}"), 32 << 20)).collect();
    let mut args = vec!["grow", "--quiet"];
    if let Some(to) = to {
        args.extend(["--level", to]);
    }
    if let Some(c) = chunk {
        args.extend(["--chunk", c]);
    }
    for p in &new {
        args.extend(["--add", s(p)]);
    }
    let mut cmd = Command::new(URAID);
    cmd.args(with(&args, &strs(&m))).stdout(Stdio::null()).stderr(Stdio::piped());
    if let Some(c) = crash {
        cmd.env("URAID_FAILPOINT_RESHAPE_CRASH", c);
    }
    if power_cut {
        cmd.env("URAID_FAILPOINT_VOLATILE", seed.to_string());
    }
    let mut child = cmd.spawn().unwrap();
    if let Some(t) = kill_after {
        std::thread::sleep(t);
        let _ = child.kill();
    }
    let st = child.wait().unwrap();
    m.extend(new);
    if st.success() {
        // The kill came after the end: nothing to resume.
        assert!(kill_after.is_some(), "{what}: the failpoint did not stop the grow");
    } else {
        let o = after_a_crash(&with(&["status"], &strs(&m)));
        let all = format!("{}{}", o.stdout, o.stderr);
        // Killed before the reshape was recorded, the new devices hold no
        // superblock yet (they are written first), and status says so.
        assert!(o.status.success() || all.contains("is not a uraid member"), "{what}: status: {all}");
        if !all.contains("in the middle of a reshape") {
            assert!(kill_after.is_some(), "{what}: status does not name the reshape: {all}");
            // Killed after the reshape finished but before the process
            // exited: the array is the new one, every member in it.
            let done = o.status.success()
                && after_a_crash(&with(&["status", "--json"], &strs(&m))).stdout.parse::<serde_json::Value>().is_ok_and(|st| st["member_count"].as_u64() == Some(m.len() as u64) && st["state"] != "reshaping");
            if done && k > 0 {
                verify(d.path(), "gc", &m, &data, &what);
                return;
            }
            // Killed before the reshape was recorded: the array is as it was.
            let before: Vec<PathBuf> = m[..n].to_vec();
            verify(d.path(), "gc", &before, &data, &what);
            return;
        }
        // scan, as at boot, says so too (not "active").
        let o = after_a_crash(&["scan", s(d.path())]);
        let line = o.stdout.lines().find(|l| l.starts_with("ARRAY name=gc ")).unwrap_or_else(|| panic!("{what}: scan lists no gc: {}", o.stdout));
        assert!(line.contains(" state=reshaping "), "{what}: {line}");
    }
    let o = after_a_crash(&with(&["assemble"], &strs(&m)));
    assert!(o.status.success(), "{what}: assemble: {}{}", o.stdout, o.stderr);
    if !st.success() {
        assert_contains(&format!("{}{}", o.stdout, o.stderr), &["went on from there and finished"], &what);
    }
    verify(d.path(), "gc", &m, &data, &what);
}

#[test]
fn an_interrupted_grow_is_finished_by_the_next_assemble() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    // RAID 5, 3 -> 5 members (2 chunks a row -> 4): row 0 is the critical
    // section (through the backup), rows 1 on are written in place, in
    // windows of 1, 2, 4, ... rows.
    for (i, c) in ["0:backed-up", "0:half", "0:written", "1:half", "2:half", "3:written", "6:half"].iter().enumerate() {
        interrupted(i as u64, "5", Some(c), None);
    }
    // RAID 6, 4 -> 5 (2 chunks a row -> 3): rows 0 and 1 are critical.
    // New row 1 puts chunk 4 where old row 1 keeps chunk 3, which row 1
    // itself needs: without the backup, a crash in or after its write
    // loses chunk 3.
    for (i, c) in ["0:half", "1:backed-up", "1:half", "1:written", "4:half"].iter().enumerate() {
        interrupted(10 + i as u64, "6", Some(c), None);
    }
    // RAID 1 over 2 restriped as RAID 5 over 4 (a level change): new row
    // 0 (3 chunks) overwrites old row 0 and is the critical section.
    for (i, c) in ["0:backed-up", "0:half", "1:half", "3:written"].iter().enumerate() {
        interrupted(20 + i as u64, "1>5", Some(c), None);
    }
    // A chunk change: a larger chunk (one critical window of a new row),
    // and a smaller one (a critical window spans the new rows that
    // overwrite a whole old row).
    for (i, (l, c)) in [("5@64K", "0:backed-up"), ("5@64K", "0:half"), ("5@64K", "2:half"), ("5@4K", "0:half"), ("5@4K", "3:half")].iter().enumerate() {
        interrupted(40 + i as u64, l, Some(c), None);
    }
    // A chunk change over the same members: every window goes through the
    // backup spread over the members (past their bitmaps).
    for (i, (l, c)) in [("5@64K=", "0:backed-up"), ("5@64K=", "0:half"), ("5@64K=", "0:written"), ("6@4K=", "3:half"), ("10@64K=", "2:backed-up")].iter().enumerate() {
        interrupted(50 + i as u64, l, Some(c), None);
    }
}

/// The power-cut model: members with volatile caches, the power cut in
/// the middle of a window (its member writes not flushed yet, each lost or
/// not), in the critical section and past it, for RAID 5, 6, 10 and RAID
/// 1 restriped as RAID 5: nothing the reshape recorded depends on a write
/// it had not flushed, and the next assemble finishes it with every byte
/// in place.
#[test]
fn a_grow_cut_by_a_power_loss_is_finished_by_the_next_assemble() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    for (i, (level, c)) in [("5", "0:half"), ("5", "2:half"), ("6", "1:half"), ("6", "4:half"), ("10", "0:half"), ("10", "3:half"), ("1>5", "0:half"), ("1>5", "2:half"), ("5@64K", "0:half"), ("10@4K", "2:half"), ("5@64K=", "1:half"), ("6@4K=", "2:half")]
        .iter()
        .enumerate()
    {
        interrupted_with(30 + i as u64, level, Some(c), None, true);
    }
}

#[test]
fn a_grow_killed_at_random_moments_is_finished_by_the_next_assemble() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    let seed: u64 = std::env::var("URAID_E2E_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::rng().random());
    println!("grow kill test: seed {seed} (set URAID_E2E_SEED to replay)");
    let mut r = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
    for i in 0..10 {
        // Half the kills early (the critical section is the first rows).
        let ms = if i % 2 == 0 { r.random_range(0..60) } else { r.random_range(0..600) };
        interrupted(seed.wrapping_add(i), ["5", "10", "6", "1>5", "5@64K="][i as usize % 5], None, Some(Duration::from_millis(ms)));
    }
}

/// A member that fails during a reshape: the reshape goes on degraded (RAID
/// 5 survives one member), records the member as faulty, and the data
/// reads back (reconstructed) and checks clean. And an interrupted reshape
/// whose member is not given goes on degraded at the next assemble; one
/// missing past what the layouts survive is refused, writing nothing.
#[test]
fn a_reshape_goes_on_degraded_when_a_member_fails() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    // A member's writes fail from the middle of its area on.
    let d = tmpdir();
    let (mut m, data) = filled(d.path(), "gd", "5", 3, "16K", "grow-degraded");
    let new: Vec<PathBuf> = (0..2).map(|i| sparse_file(d.path(), &format!("new{i}"), 32 << 20)).collect();
    let fail = format!("{}@{}-{}", s(&m[1]), 16 << 20, 32 << 20);
    let mut args = vec!["grow", "--quiet"];
    for p in &new {
        args.extend(["--add", s(p)]);
    }
    let o = uraid_env(&with(&args, &strs(&m)), &[("URAID_FAILPOINT_FAIL_WRITES", std::ffi::OsStr::new(&fail))]);
    assert!(o.status.success(), "the grow with a failing member: {}{}", o.stdout, o.stderr);
    m.extend(new);
    let st: serde_json::Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &strs(&m))).stdout).unwrap();
    assert_eq!(st["members"][1]["state"].as_str(), Some("faulty"), "{st}");
    assert_eq!(st["volumes"][0]["state"].as_str(), Some("degraded"), "{st}");
    let size = verify(d.path(), "gd", &m, &data, "grow with a member failing");
    assert_eq!(size, data.len() as u64 * 2, "RAID 5 over 5 holds 4 chunks a row where 3 held 2");

    // Interrupted, then assembled without one member: it goes on degraded.
    let d = tmpdir();
    let (mut m, data) = filled(d.path(), "gm", "6", 4, "16K", "grow-missing");
    let new = sparse_file(d.path(), "new0", 32 << 20);
    let mut cmd = Command::new(URAID);
    cmd.args(with(&["grow", "--quiet", "--add", s(&new)], &strs(&m))).env("URAID_FAILPOINT_RESHAPE_CRASH", "6:written").stderr(Stdio::null());
    assert!(!cmd.status().unwrap().success(), "the failpoint did not stop the grow");
    m.push(new);
    // RAID 6 goes on without two members, not three.
    let three: Vec<PathBuf> = m.iter().enumerate().filter(|(i, _)| ![0, 2, 3].contains(i)).map(|(_, p)| p.clone()).collect();
    let o = after_a_crash(&with(&["assemble"], &strs(&three)));
    assert!(!o.status.success());
    assert_contains(&o.stderr, &["in the middle of a reshape", "are missing or failed", "nothing was written"], "assemble without three");
    let without: Vec<PathBuf> = m.iter().enumerate().filter(|(i, _)| ![0, 3].contains(i)).map(|(_, p)| p.clone()).collect();
    let o = after_a_crash(&with(&["assemble"], &strs(&without)));
    assert!(o.status.success(), "assemble without two members: {}{}", o.stdout, o.stderr);
    assert_contains(&format!("{}{}", o.stdout, o.stderr), &["went on from there and finished"], "assemble");
    verify(d.path(), "gm", &without, &data, "a reshape finished without two members");
}

/// Level changes of a served array while fio writes and verifies through
/// its export, one fio run after the other until the change (and the
/// rebuild of its new members) has ended: RAID 1 over 2 restriped as RAID
/// 5 over 3 (at a low rate, so that the writer runs through it), then RAID
/// 5 -> 6 with a new member (a takeover: the export pauses, the array is
/// swapped, the new member is rebuilt while the writer goes on); RAID 0 ->
/// 10 and RAID 0 -> 5 (then restriped onto one more member, into the
/// rotating layout); RAID 1 -> 10 -> 1 over 2 and a RAID 1's new copy.
/// The bytes written before the writer's area read back equal, fio's
/// verify covers the bytes written during, check finds 0 mismatches, and
/// status (members given in another order) shows the new level and
/// layout. The first case runs on loop devices, the others on files.
#[test]
fn a_served_array_changes_level_while_a_client_writes() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    require_tool("fio", "fio");
    type Step = (&'static [&'static str], usize);
    type Want = (u64, usize, &'static str);
    let cases: [(&str, usize, &[Step], Want); 5] = [
        ("1", 2, &[(&["--level", "5", "--rate", "8M"], 1), (&["--level", "6"], 1)], (6, 4, "parity-last")),
        ("0", 2, &[(&["--level", "10"], 2)], (10, 4, "")),
        ("0", 2, &[(&["--level", "5"], 1)], (5, 3, "parity-last")),
        // A parity-last RAID 5 restriped onto one more member: rotating.
        ("0", 2, &[(&["--level", "5"], 1), (&["--rate", "20M"], 1)], (5, 4, "left-symmetric")),
        ("1", 2, &[(&["--level", "10"], 0), (&["--level", "1"], 0), (&[], 1)], (1, 3, "")),
    ];
    const AREA: usize = 12 << 20;
    for (i, (level, n, steps, want)) in cases.into_iter().enumerate() {
        let d = tmpdir();
        let name = format!("lv{i}");
        // The first case on loop devices (members and new ones), the
        // others on files.
        let on_loops = i == 0;
        let mut loops: Vec<LoopDev> = Vec::new();
        let (mut m, data) = if on_loops {
            loops = sparse_files(d.path(), "m", n, 32 << 20).iter().map(|f| LoopDev::attach(f)).collect();
            let m: Vec<PathBuf> = loops.iter().map(|l| l.dev.clone()).collect();
            let data = filled_on(d.path(), &name, level, &m, "64K", &name);
            (m, data)
        } else {
            filled(d.path(), &name, level, n, "64K", &name)
        };
        let what = format!("RAID {level} over {n}{}, {steps:?}", if on_loops { " loop devices" } else { "" });
        let mut added = 0;
        with_export(d.path(), &name, &m.clone(), |uri| {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (uri2, stop2) = (uri.to_string(), stop.clone());
            let writer = std::thread::spawn(move || {
                let mut runs = 0;
                loop {
                    let o = Command::new("fio")
                        .args(["--name=w", "--ioengine=nbd", "--rw=randwrite", "--bs=4k,64k", "--iodepth=16", "--size=12M"])
                        .args(["--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0", "--do_verify=1"])
                        .arg(format!("--uri={uri2}"))
                        .output()
                        .unwrap();
                    assert!(o.status.success(), "fio run {runs}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                    runs += 1;
                    // At least two runs however fast the grow was (the
                    // first is in flight when it starts; a grow shorter
                    // than one run left one run under a loaded machine).
                    if stop2.load(std::sync::atomic::Ordering::Relaxed) && runs >= 2 {
                        return runs;
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(300));
            for (args, k) in steps.iter() {
                let mut new: Vec<PathBuf> = (0..*k).map(|j| sparse_file(d.path(), &format!("n{}", added + j), 32 << 20)).collect();
                if on_loops {
                    let attached: Vec<LoopDev> = new.iter().map(|f| LoopDev::attach(f)).collect();
                    new = attached.iter().map(|l| l.dev.clone()).collect();
                    loops.extend(attached);
                }
                added += k;
                let mut a: Vec<&str> = vec!["grow", "--wait"];
                a.extend(args.iter());
                for p in &new {
                    a.extend(["--add", s(p)]);
                }
                let o = Command::new(URAID).env("URAID_RUN_DIR", d.path().join("run")).args(with(&a, &strs(&m))).output().unwrap();
                let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                assert!(o.status.success(), "{what}: served grow {a:?}: {out}{err}");
                m.extend(new);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let runs = writer.join().unwrap();
            assert!(runs >= 2, "{what}: the writer ran {runs} time(s)");
        });
        verify_from(d.path(), &name, &m, &data, AREA, &what);
        let mut shuffled = m.clone();
        shuffled.reverse();
        let st: serde_json::Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &strs(&shuffled))).stdout).unwrap();
        let v = &st["volumes"][0];
        assert_eq!((v["level"].as_u64(), st["members"].as_array().map(|a| a.len()), v["layout"].as_str()), (Some(want.0), Some(want.1), Some(want.2)), "{what}: {st}");
        assert_eq!(v["state"].as_str(), Some("clean"), "{what}: {st}");
        drop(loops);
    }
}

/// SIGKILL at seeded random moments of the takeovers of a stopped array
/// (RAID 0 -> 5, RAID 5 -> 6, RAID 0 -> 10, a RAID 1's new copy): the
/// superblocks change first (the new members' first), then the new members
/// are rebuilt with checkpoints. After the kill the array assembles over
/// every device (a member whose superblock write the kill cut is one event
/// behind: taken as the others say), or, killed before the new members
/// were written, over the old ones as it was; `uraid rebuild` finishes
/// the new members; the data reads back and checks clean.
#[test]
fn a_takeover_killed_at_random_moments_keeps_its_data() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    let seed: u64 = std::env::var("URAID_E2E_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::rng().random());
    println!("takeover kill test: seed {seed} (set URAID_E2E_SEED to replay)");
    let mut r = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
    let cases: [(&str, usize, Option<&str>, usize); 4] = [("0", 2, Some("5"), 1), ("5", 3, Some("6"), 1), ("0", 2, Some("10"), 2), ("1", 2, None, 1)];
    for (i, (level, n, to, k)) in cases.into_iter().enumerate() {
        let d = tmpdir();
        let ms = r.random_range(0..250);
        let what = format!("RAID {level} over {n} -> {to:?} with {k} new, killed after {ms} ms (seed {seed})");
        let (m, data) = filled(d.path(), "tk", level, n, "16K", &format!("takeover-{seed}-{i}"));
        let new: Vec<PathBuf> = (0..k).map(|j| sparse_file(d.path(), &format!("new{j}"), 32 << 20)).collect();
        let mut args = vec!["grow", "--quiet", "--rate", "60M"];
        if let Some(to) = to {
            args.extend(["--level", to]);
        }
        for p in &new {
            args.extend(["--add", s(p)]);
        }
        let mut child = Command::new(URAID).args(with(&args, &strs(&m))).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        let _ = child.kill();
        let _ = child.wait();
        let all: Vec<PathBuf> = m.iter().chain(&new).cloned().collect();
        let o = after_a_crash(&with(&["status"], &strs(&all)));
        if !o.status.success() {
            assert_contains(&o.stderr, &["is not a uraid member"], &what);
            verify(d.path(), "tk", &m, &data, &what);
            continue;
        }
        let o = after_a_crash(&with(&["rebuild"], &strs(&all)));
        assert!(o.status.success(), "{what}: rebuild: {}{}", o.stdout, o.stderr);
        verify(d.path(), "tk", &all, &data, &what);
        let st: serde_json::Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &strs(&all))).stdout).unwrap();
        assert_eq!(st["volumes"][0]["state"].as_str(), Some("clean"), "{what}: {st}");
        assert_eq!(st["volumes"][0]["level"].as_u64(), Some(to.unwrap_or(level).parse().unwrap()), "{what}: {st}");
    }
}

/// A new member whose writes fail during a served reshape: the reshape
/// goes on degraded (RAID 5 over 4 survives one member), the service
/// announces the failure (a Fail event naming the device), status shows
/// the member faulty and the volume degraded, and the data reads back.
#[test]
fn a_new_member_failing_during_a_served_reshape_is_announced() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    let d = tmpdir();
    let (mut m, data) = filled(d.path(), "gf", "5", 3, "16K", "grow-served-fail");
    let new = sparse_file(d.path(), "new0", 32 << 20);
    let log = d.path().join("serve.log");
    // Past the superblock, below the backup area at the end.
    let fail = format!("{}@{}-{}", s(&new), 8 << 20, 24 << 20);
    let (child, _) = serve(d.path(), &m, &[("URAID_FAILPOINT_FAIL_WRITES", &fail)], Some(&log));
    let o = Command::new(URAID)
        .env("URAID_RUN_DIR", d.path().join("run"))
        .args(with(&["grow", "--wait", "--add", s(&new)], &strs(&m)))
        .output()
        .unwrap();
    assert!(o.status.success(), "served grow: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    stop(child);
    let events = std::fs::read_to_string(&log).unwrap();
    assert_contains(&events, &["Fail event", s(&new), "ReshapeFinished"], "the service's events");
    m.push(new);
    let st: serde_json::Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &strs(&m))).stdout).unwrap();
    assert_eq!(st["members"][3]["state"].as_str(), Some("faulty"), "{st}");
    assert_eq!(st["volumes"][0]["state"].as_str(), Some("degraded"), "{st}");
    verify(d.path(), "gf", &m, &data, "a served reshape with a new member failing");
}
