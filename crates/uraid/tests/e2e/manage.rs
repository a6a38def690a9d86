//! The control path of redundant arrays through the real `uraid` binary
//! (and the library where a test needs the data path): create at every
//! level, member count and chunk size; refusals that write nothing; Matrix
//! volumes that stay apart; assemble in any order, with spares and with a
//! stale member; fail, remove, add, replace and spares, each persisted in
//! the superblocks (decoded here from the raw bytes by the documented
//! format) and seen again after the next assemble.
//!
//! `add_rebuilds_and_check_finds_nothing` runs `maint::rebuild` and
//! `maint::check`; every other test here needs no data path beyond RAID 0.

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::RngCore;
use serde_json::Value;
use uraid_core::control::array::{self, CreateOptions};
use uraid_core::ErrorKind;

use crate::util::*;

const MIB: u64 = 1 << 20;
/// Raw slot states (superblock.rs): active, faulty, rebuilding, spare, missing.
const ACTIVE: u8 = 0;
const FAULTY: u8 = 1;
const REBUILDING: u8 = 2;
const MISSING: u8 = 4;



fn status_json(files: &[&str]) -> Value {
    let o = uraid_ok(&with(&["status", "--json"], files));
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("status --json printed no JSON ({e}):\n{}", o.stdout))
}

/// Usable bytes of `level` over `n` members of `ms` data bytes each, by
/// md's rules, computed here without the library.
fn expected_capacity(level: u32, n: u64, chunk: u64, ms: u64) -> u64 {
    match level {
        0 => n * ms,
        1 => ms,
        10 => ms / chunk * n / 2 * chunk,
        5 => (n - 1) * ms,
        6 => (n - 2) * ms,
        _ => unreachable!(),
    }
}

/// Runs `uraid check --json` on `files` and returns the mismatch count of
/// the first (redundant) volume.
fn check_mismatches(files: &[&str]) -> u64 {
    let o = uraid_ok(&with(&["check", "--json"], files));
    let j: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("check --json: {e}: {}", o.stdout));
    j[0]["report"]["mismatches"].as_u64().unwrap_or_else(|| panic!("no mismatch count: {j}"))
}

/// The states of every slot of the raw superblock on `f`.
fn raw_states(f: &Path) -> Vec<u8> {
    raw_superblock(f).slots.iter().map(|s| s.state).collect()
}

#[test]
fn create_every_level_member_count_and_chunk() {
    let _g = shared();
    let dir = tmpdir();
    for (level, min) in [(0u32, 1usize), (1, 2), (10, 2), (5, 3), (6, 4)] {
        for n in min..=6 {
            for (cs, chunk) in [("4K", 4096u64), ("64K", 64 << 10), ("1M", MIB)] {
                let what = format!("RAID {level} x{n} chunk {cs}");
                let files = sparse_files(dir.path(), &format!("l{level}n{n}c{cs}-"), n, 6 * MIB);
                let f = strs(&files);
                let l = level.to_string();
                let o = uraid_ok(&with(&["create", "--level", &l, "--chunk", cs, "--name", "lvl"], &f));
                let cap = expected_capacity(level, n as u64, chunk, 5 * MIB);
                assert_contains(
                    &o.stdout,
                    &[&format!("RAID {level} over {n} members"), &format!("chunk {cs}"), &format!("capacity {cap} bytes")],
                    &what,
                );
                let st = status_json(&f);
                let v = &st["volumes"][0];
                assert_eq!((v["level"].as_u64(), v["chunk"].as_u64(), v["capacity"].as_u64()), (Some(level as u64), Some(chunk), Some(cap)), "{what}: {st}");
                assert_eq!(v["state"], "clean", "{what}: {st}");
                assert_eq!(v["tolerance"].as_u64(), Some(match level { 0 => 0, 1 => n as u64 - 1, 6 => 2, _ => 1 }), "{what}");
                assert_eq!(st["state"], "clean", "{what}");
                let members = st["members"].as_array().unwrap();
                assert_eq!(members.len(), n, "{what}: {st}");
                for (i, m) in members.iter().enumerate() {
                    assert_eq!((m["role"].as_u64(), m["device"].as_str(), m["state"].as_str()), (Some(i as u64), Some(f[i]), Some("active")), "{what}");
                }
                let raw = raw_superblock(&files[n - 1]);
                assert_eq!((raw.version, raw.slot, raw.member_count, raw.state), (if level == 0 { 2 } else { 4 }, n as u32 - 1, n as u32, 0), "{what}");
                assert_eq!((raw.volumes[0].level, raw.volumes[0].chunk as u64, raw.volumes[0].member_start), (level, chunk, MIB), "{what}");
                assert_eq!(raw.bitmap_region, if level == 0 { 0 } else { 64 * MIB }, "{what}: bitmap region");
                let o = uraid_ok(&["examine", f[0]]);
                assert_contains(&o.stdout, &[&format!("'lvl' raid{level}, chunk {cs}"), &format!("capacity {cap} bytes")], &what);
            }
        }
    }
    // On emulated drives (they live as long as the command).
    let o = uraid_ok(&["create", "--level", "6", "--chunk", "64K", "--name", "m6", "mem:8M", "mem:8M", "mem:8M", "mem:8M"]);
    assert_contains(&o.stdout, &["RAID 6 over 4 members", &format!("capacity {} bytes", 2 * 7 * MIB)], "mem: RAID 6");
    let o = uraid_ok(&["create", "--level", "10", "--chunk", "4K", "--name", "m10", "mem:8M", "mem:8M", "mem:8M"]);
    assert_contains(&o.stdout, &["RAID 10 over 3 members", &format!("capacity {} bytes", 7 * MIB * 3 / 2)], "mem: RAID 10");
}

/// RAID 0 volumes are zeroed at create; redundant ones are not (no initial
/// sync: every region starts not live in the live-data map) and still read
/// as zeros, with nothing for `check` to find.
#[test]
fn create_leaves_volumes_that_read_as_zeros() {
    let _g = shared();
    let dir = tmpdir();
    for (level, n) in [(0u32, 2usize), (1, 2), (10, 3), (5, 3), (6, 4)] {
        let files = sparse_files(dir.path(), &format!("z{level}-"), n, 6 * MIB);
        // Old contents everywhere but the first 64 KiB (no signature there).
        for f in &files {
            let mut b = vec![0x5au8; 6 * MIB as usize];
            b[..64 << 10].fill(0);
            std::fs::write(f, &b).unwrap();
        }
        let l = level.to_string();
        uraid_ok(&with(&["create", "--level", &l, "--chunk", "64K", "--name", "z"], &strs(&files)));
        let zeroed = std::fs::read(&files[0]).unwrap()[MIB as usize..].iter().all(|&x| x == 0);
        assert_eq!(zeroed, level == 0, "RAID {level}: the data area zeroed at create");
        let arr = array::assemble(&specs(&files)).unwrap();
        let vol = arr.volume().clone();
        let got = vol.read_at(0, vol.capacity() as usize).unwrap();
        if let Some(i) = got.iter().position(|&x| x != 0) {
            panic!("RAID {level}: logical byte {i} reads old data after create");
        }
        if level > 0 {
            let c = arr.check(0, false, &mut |_, _| {}).unwrap();
            assert_eq!((c.mismatches, c.bytes_checked), (0, 0), "RAID {level}: {c:?}");
        }
        drop(vol);
        arr.stop().unwrap();
    }
}

#[test]
fn too_few_members_and_bad_volumes_are_refused_writing_nothing() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "m", 3, 6 * MIB);
    let snap = Snapshot::take(&files);
    for (level, min) in [(1u32, 2usize), (10, 2), (5, 3), (6, 4)] {
        let given = &files[..min - 1];
        let needle = format!("RAID {level} needs at least {min} members, {} given", min - 1);
        let l = level.to_string();
        uraid_fails(&with(&["create", "--level", &l, "--chunk", "64K", "--name", "few"], &strs(given)), &[&needle]);
        uraid_fails(&with(&["create", "--level", &l, "--chunk", "64K", "--name", "few", "--force"], &strs(given)), &[&needle]);
        let o = CreateOptions { level, chunk: 64 << 10, name: "few".into(), ..Default::default() };
        assert_error(array::create(&specs(given), &o), ErrorKind::InvalidInput, &[&needle], &needle);
        snap.assert_unchanged(&format!("create RAID {level} with {} members", min - 1));
    }
    let f = strs(&files[..2]);
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--volume", "a,level=0,size=1M", "--volume", "b,level=5"], vec!["RAID 5 (volume 'b') needs at least 3 members, 2 given"]),
        (vec!["--volume", "a,size=1M"], vec!["--volume 'a,size=1M' has no level"]),
        (vec!["--volume", "level=1"], vec!["must start with the volume's name"]),
        (vec!["--volume", "a,level=1,speed=9"], vec!["unknown key 'speed'"]),
        (vec!["--volume", "a,level=1", "--volume", "b,level=0"], vec!["volume 'a' has no size", "only the last volume"]),
        (vec!["--volume", "a,level=1,size=1M", "--volume", "a,level=0"], vec!["two volumes are named 'a'"]),
        (vec!["--volume", "a,level=1,size=1M", "--volume", "d,level=draid5"], vec!["volume 'd' is declustered", "its array's only volume"]),
        (vec!["--volume", "a b,level=1"], vec!["volume name 'a b' is not valid"]),
        (vec!["--volume", "a,level=1,size=100M"], vec!["too small", "the volumes asked for ('a')"]),
        (vec!["--volume", "a,level=1,size=1M,chunk=3K"], vec!["chunk size 3072 bytes is not valid"]),
        (vec!["--volume", "a,level=3"], vec!["unknown RAID level 3"]),
        (vec!["--level", "1", "--bitmap-region", "5000"], vec!["bitmap region size 5000 bytes is not valid"]),
        (vec!["--level", "0", "--bitmap-region", "4M"], vec!["only serves redundant volumes"]),
        (vec!["--level", "1", "--bitmap-region", "4M", "--no-bitmap"], vec!["cannot be used with"]),
    ];
    for (extra, needles) in cases {
        let mut a = vec!["create", "--chunk", "64K", "--name", "bad"];
        a.extend_from_slice(&extra);
        a.extend_from_slice(&f);
        let o = crate::util::uraid(&a);
        assert!(!o.status.success(), "`{}` should fail", o.cmdline);
        assert_contains(&o.stderr, &needles, &o.cmdline);
        snap.assert_unchanged(&o.cmdline);
    }
}

#[test]
fn matrix_volumes_stay_apart() {
    let _g = shared();
    let mut rng = rng("matrix_volumes_stay_apart");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "mx", 2, 24 * MIB);
    let f = strs(&files);
    let o = uraid_ok(&with(&["create", "--chunk", "64K", "--name", "mx", "--volume", "fast,level=0,size=8M", "--volume", "safe,level=1"], &f));
    assert_contains(&o.stdout, &["2 volumes", "volume 'fast': RAID 0", "volume 'safe': RAID 1", &format!("capacity {} bytes", 19 * MIB)], "create matrix");
    let st = status_json(&f);
    let v = st["volumes"].as_array().unwrap();
    assert_eq!(v.len(), 2, "{st}");
    let got: Vec<(String, u64, u64, u64, u64, String)> = v
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().into(),
                v["level"].as_u64().unwrap(),
                v["capacity"].as_u64().unwrap(),
                v["member_start"].as_u64().unwrap(),
                v["member_size"].as_u64().unwrap(),
                v["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![("fast".into(), 0, 8 * MIB, MIB, 4 * MIB, "clean".into()), ("safe".into(), 1, 19 * MIB, 5 * MIB, 19 * MIB, "clean".into())]
    );
    assert_eq!(st["bitmap_region"].as_u64(), Some(64 * MIB), "a redundant volume brings the bitmap");
    let text = uraid_ok(&["status", f[1], f[0]]).stdout;
    assert_contains(&text, &["volume 'fast': raid0 8M", "volume 'safe': raid1 19M", "[2/2] [UU]"], "status text");
    let raw = raw_superblock(&files[1]);
    assert_eq!(raw.volumes.iter().map(|v| (v.name.as_str(), v.level, v.member_start, v.member_size)).collect::<Vec<_>>(), vec![("fast", 0, MIB, 4 * MIB), ("safe", 1, 5 * MIB, 19 * MIB)]);

    // Fill 'fast' through the engine: the bytes land in [1M, 5M) of the
    // members by RAID 0's layout, and 'safe''s area stays zero.
    let mut fast_data = vec![0u8; 8 * MIB as usize];
    rng.fill_bytes(&mut fast_data);
    let arr = array::assemble(&specs(&files)).unwrap();
    assert_eq!(arr.volumes().len(), 2);
    let fast = arr.volume_named("fast").expect("volume 'fast'").clone();
    assert!(arr.volume_named("nope").is_none());
    assert!(std::sync::Arc::ptr_eq(&fast, arr.volume()), "volume() is the first volume");
    for (i, piece) in fast_data.chunks(MIB as usize).enumerate() {
        fast.write_at(i as u64 * MIB, piece).unwrap();
    }
    drop(fast);
    arr.stop().unwrap();
    let images: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    for (m, img) in images.iter().enumerate() {
        for c in 0..(4 * MIB / (64 << 10)) {
            let logical = ((c * 2 + m as u64) * (64 << 10)) as usize;
            let at = (MIB + c * (64 << 10)) as usize;
            assert!(img[at..at + (64 << 10)] == fast_data[logical..logical + (64 << 10)], "member {m} chunk {c} of 'fast' is not where RAID 0 puts it");
        }
        assert!(img[5 * MIB as usize..].iter().all(|&x| x == 0), "writing 'fast' touched 'safe''s area on member {m}");
    }

    // Fill 'safe': it reads back, and 'fast' (and its bytes on the members) did not change.
    let mut safe_data = vec![0u8; 19 * MIB as usize];
    rng.fill_bytes(&mut safe_data);
    let arr = array::assemble(&specs(&[&files[1], &files[0]])).unwrap();
    let safe = arr.volume_named("safe").unwrap().clone();
    assert_eq!(safe.capacity(), 19 * MIB);
    for (i, piece) in safe_data.chunks(MIB as usize).enumerate() {
        safe.write_at(i as u64 * MIB, piece).unwrap();
    }
    assert!(safe.read_at(0, safe_data.len()).unwrap() == safe_data, "'safe' does not read back");
    let fast = arr.volume_named("fast").unwrap().clone();
    assert!(fast.read_at(0, fast_data.len()).unwrap() == fast_data, "writing 'safe' changed 'fast'");
    drop((safe, fast));
    arr.stop().unwrap();
    for (m, p) in files.iter().enumerate() {
        let img = std::fs::read(p).unwrap();
        assert!(img[MIB as usize..5 * MIB as usize] == images[m][MIB as usize..5 * MIB as usize], "writing 'safe' touched 'fast''s area on member {m}");
    }

    // Each volume can be benchmarked on its own.
    let bench = ["bench", "--read-only", "--json", "--profile", "RND4K-Q1T1", "--runs", "1", "--time", "0.1", "--warmup", "0", "--size", "1M"];
    for (name, level, cap) in [("fast", 0, 8 * MIB), ("safe", 1, 19 * MIB)] {
        let mut args = bench.to_vec();
        args.extend_from_slice(&["--volume", name, f[0], f[1]]);
        let o = uraid_ok(&args);
        let j: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("bench --json: {e}: {}", o.stdout));
        assert_eq!(j["capacity"].as_u64(), Some(cap), "bench --volume {name}: {j}");
        assert_contains(j["target"].as_str().unwrap(), &[&format!("RAID {level} over 2 members")], name);
    }
    let mut args = bench.to_vec();
    args.extend_from_slice(&["--volume", "nope", f[0], f[1]]);
    uraid_fails(&args, &["has no volume 'nope'", "'fast', 'safe'"]);
}

#[test]
fn assemble_in_any_order_with_a_spare() {
    let _g = shared();
    let mut rng = rng("assemble_in_any_order_with_a_spare");
    let dir = tmpdir();
    let mut files = sparse_files(dir.path(), "r6-", 5, 8 * MIB);
    uraid_ok(&with(&["create", "--level", "6", "--chunk", "64K", "--name", "six"], &strs(&files)));
    let spare = sparse_file(dir.path(), "spare", 10 * MIB);
    let o = uraid_ok(&with(&["add", "--spare", s(&spare)], &strs(&files)));
    assert_contains(&o.stdout, &["added to array 'six' as a spare (slot 5)"], "add spare");
    files.push(spare);
    let o = uraid_ok(&["examine", s(&files[5])]);
    assert_contains(&o.stdout, &["this member : spare, slot 5", "spare 5 : spare", "role 4 : active"], "examine a spare");
    uraid_fails(&with(&["fail", "--member", "5"], &strs(&files)), &["slot 5", "is a spare", "uraid remove"]);
    let mut events = raw_superblock(&files[0]).events;
    for _ in 0..4 {
        let mut order: Vec<usize> = (0..6).collect();
        order.shuffle(&mut rng);
        let given: Vec<&str> = order.iter().map(|&i| s(&files[i])).collect();
        let o = uraid_ok(&with(&["assemble", "--json"], &given));
        let a: Value = serde_json::from_str(&o.stdout).unwrap();
        let got: Vec<(Option<u64>, u64, String, String)> = a["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_u64(), m["slot"].as_u64().unwrap(), m["member"].as_str().unwrap().into(), m["state"].as_str().unwrap().into()))
            .collect();
        let want: Vec<(Option<u64>, u64, String, String)> = (0..6)
            .map(|i| ((i < 5).then_some(i as u64), i as u64, s(&files[i]).to_string(), if i < 5 { "active" } else { "spare" }.to_string()))
            .collect();
        assert_eq!(got, want, "order {order:?}");
        let now = raw_superblock(&files[5]).events;
        assert!(now > events, "order {order:?}: events did not move ({events} -> {now})");
        assert_eq!(raw_superblock(&files[5]).slot, 5, "the spare keeps its slot");
        events = now;
    }
}

#[test]
fn stale_member_is_refused_and_taken_back_with_force() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "st", 3, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "mirror"], &f));
    let backup = std::fs::read(&files[0]).unwrap();
    let before = raw_superblock(&files[0]).events;
    uraid_ok(&with(&["assemble"], &f));
    let after = raw_superblock(&files[1]).events;
    assert!(after > before);
    std::fs::write(&files[0], &backup).unwrap();
    let snap = Snapshot::take(&files);
    let needles = ["stale", &format!("event counter is {before}"), &format!("others are at {after}"), f[0], "Nothing was written", "--force"];
    uraid_fails(&["assemble", f[1], f[0], f[2]], &needles);
    uraid_fails(&["status", f[2], f[1], f[0]], &needles);
    uraid_fails(&["fail", "--member", "1", f[2], f[1], f[0]], &needles);
    assert_error(array::assemble(&specs(&files)), ErrorKind::Superblock, &needles, "stale");
    snap.assert_unchanged("assemble with a stale member");
    // Without the stale member the mirror runs on the other two.
    let st = status_json(&[f[1], f[2]]);
    assert_eq!((st["volumes"][0]["state"].as_str(), st["members"][0]["state"].as_str()), (Some("degraded"), Some("missing")), "{st}");
    snap.assert_unchanged("status without the stale member");

    let o = uraid_ok(&["assemble", "--force", f[1], f[0], f[2]]);
    assert_contains(&o.stderr, &["was stale", "rebuilt in full"], "assemble --force");
    assert_contains(&o.stdout, &[&format!("role 0: {} rebuilding", f[0]), "need a rebuild"], "assemble --force");
    for p in &files {
        let raw = raw_superblock(p);
        assert_eq!(raw_states(p), vec![REBUILDING, ACTIVE, ACTIVE], "{}", p.display());
        assert_eq!(raw.slots[0].recovery, 0, "{}: a forced stale member is rebuilt from the start", p.display());
    }
    assert_eq!(raw_superblock(&files[0]).events, raw_superblock(&files[2]).events, "the taken-back member is up to date");
    let st = status_json(&f);
    assert_eq!(st["volumes"][0]["state"], "rebuilding", "{st}");
    assert_eq!(st["volumes"][0]["rebuild_percent"].as_f64(), Some(0.0), "{st}");

    // RAID 0: --force takes a stale member back as it is.
    let r0 = sparse_files(dir.path(), "z", 2, 8 * MIB);
    let z = strs(&r0);
    uraid_ok(&with(&["create", "--level", "0", "--chunk", "64K", "--name", "stripe"], &z));
    let backup = std::fs::read(&r0[1]).unwrap();
    uraid_ok(&with(&["assemble"], &z));
    std::fs::write(&r0[1], &backup).unwrap();
    uraid_fails(&with(&["assemble"], &z), &["stale", "RAID 0 cannot repair it"]);
    let o = uraid_ok(&with(&["assemble", "--force"], &z));
    assert_contains(&o.stderr, &["takes it back as it is"], "RAID 0 --force");
    assert_eq!(raw_states(&r0[1]), vec![ACTIVE, ACTIVE]);
}

#[test]
fn fail_is_recorded_on_the_others_and_past_tolerance_needs_force() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "f", 3, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "r5"], &f));
    let e0 = raw_superblock(&files[0]).events;
    let o = uraid_ok(&with(&["fail", "--member", f[1]], &[f[2], f[0], f[1]]));
    assert_contains(&o.stdout, &["role 1 of array 'r5' marked faulty", "degraded [3/2] [U_U]"], "fail");
    for i in [0, 2] {
        let raw = raw_superblock(&files[i]);
        assert_eq!(raw_states(&files[i]), vec![ACTIVE, FAULTY, ACTIVE], "member {i}");
        assert_eq!(raw.events, e0 + 1, "member {i}: one event for the failure");
        assert_eq!(raw.state, 0, "fail keeps a clean array clean");
    }
    let raw1 = raw_superblock(&files[1]);
    assert_eq!((raw1.events, raw_states(&files[1])), (e0, vec![ACTIVE; 3]), "the failed member is not written");
    let st = status_json(&f);
    assert_eq!(st["volumes"][0]["state"], "degraded", "{st}");
    assert_eq!(st["members"][1]["state"], "faulty", "{st}");
    assert_eq!(st["members"][1]["device"], f[1], "the faulty device is still held: {st}");
    // Assemble runs degraded, with or without the faulty member.
    uraid_ok(&with(&["assemble"], &f));
    let o = uraid_ok(&["assemble", f[0], f[2]]);
    assert_contains(&o.stdout, &["role 1: - faulty"], "assemble without the faulty member");

    let snap = Snapshot::take(&files);
    let needles = ["failing role 0", "would leave 2 of 3 members", "lose the data", "RAID 5", "tolerates 1", "--force"];
    uraid_fails(&with(&["fail", "--member", "0"], &f), &needles);
    uraid_fails(&with(&["fail", "--member", "1"], &f), &["role 1", "already faulty"]);
    uraid_fails(&with(&["fail", "--member", "7"], &f), &["no role 7", "roles are 0 to 2"]);
    let other = sparse_file(dir.path(), "other", 8 * MIB);
    uraid_fails(&with(&["fail", "--member", s(&other)], &f), &["not a member of array 'r5'"]);
    snap.assert_unchanged("refused fail");

    let o = uraid_ok(&with(&["fail", "--member", "0", "--force"], &f));
    assert_contains(&o.stdout, &["failed"], "fail --force");
    assert_eq!(raw_states(&files[2]), vec![FAULTY, FAULTY, ACTIVE]);
    let st = status_json(&[f[2]]);
    assert_eq!(st["volumes"][0]["state"], "failed");
    // Now past its tolerance, the array cannot be assembled for writing.
    uraid_fails(&with(&["assemble"], &f), &["volume 'r5' (RAID 5) tolerates 1", "cannot run"]);
}

#[test]
fn a_member_the_data_path_fails_is_recorded_faulty() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "d", 3, 8 * MIB);
    let o = CreateOptions { level: 1, chunk: 64 << 10, name: "dp".into(), ..Default::default() };
    array::create(&specs(&files), &o).unwrap().stop().unwrap();
    let arr = array::assemble(&specs(&files)).unwrap();
    let before = raw_superblock(&files[0]).events;
    // What the engine does when an I/O on member 2 fails.
    assert!(arr.health().fail(2).unwrap(), "the first failure changes the state");
    assert!(!arr.health().fail(2).unwrap(), "the second does not");
    for i in [0, 1] {
        assert_eq!(raw_states(&files[i]), vec![ACTIVE, ACTIVE, FAULTY], "member {i}");
        assert_eq!(raw_superblock(&files[i]).events, before + 1, "member {i}");
    }
    assert_eq!(raw_superblock(&files[2]).events, before, "the failed member is not written");
    arr.stop().unwrap();
    assert_eq!(raw_states(&files[2]), vec![ACTIVE; 3], "stop does not write the failed member either");
    let st = status_json(&strs(&files));
    assert_eq!((st["volumes"][0]["state"].as_str(), st["members"][2]["state"].as_str()), (Some("degraded"), Some("faulty")), "{st}");
}

#[test]
fn remove_add_replace_are_persisted() {
    let _g = shared();
    let dir = tmpdir();
    let a = sparse_files(dir.path(), "a", 2, 8 * MIB);
    let n = sparse_files(dir.path(), "n", 3, 8 * MIB);
    let small = sparse_file(dir.path(), "small", 4 * MIB);
    let ext4 = sparse_file(dir.path(), "ext4", 16 * MIB);
    mkfs_ext4(&ext4);
    let (a0, a1) = (s(&a[0]), s(&a[1]));
    let (n0, n1, n2) = (s(&n[0]), s(&n[1]), s(&n[2]));
    uraid_ok(&["create", "--level", "1", "--chunk", "64K", "--name", "pair", a0, a1]);
    let uuid1 = raw_superblock(&a[1]).member_uuid;

    let snap = Snapshot::take(&a);
    uraid_fails(&["remove", "--member", "0", a0, a1], &["role 0", "is active", "only faulty members and spares can be removed", "uraid fail"]);
    uraid_fails(&["remove", "--member", "2", a0, a1], &["no slot 2"]);
    snap.assert_unchanged("refused remove");

    uraid_ok(&["fail", "--member", "1", a0, a1]);
    let o = uraid_ok(&["remove", "--member", a1, a0, a1]);
    assert_contains(&o.stdout, &["slot 1 removed from array 'pair'", "role 1: - missing"], "remove");
    let raw = raw_superblock(&a[0]);
    assert_eq!((raw.slots[1].uuid, raw.slots[1].state), (uuid1, MISSING), "the removed role is missing and remembers its device (for a re-add)");
    assert_eq!(raw_superblock(&a[1]).member_uuid, uuid1, "the removed member is not written");
    assert_stale(&uraid_ok(&["status", a0, a1]), a1);
    let st = status_json(&[a0]);
    assert_eq!((st["volumes"][0]["state"].as_str(), st["members"][1]["state"].as_str()), (Some("degraded"), Some("missing")), "{st}");
    assert!(st["members"][1]["device"].is_null());

    // New drives that must be refused, writing nothing.
    let snap = Snapshot::take(&[&a[0], &small, &ext4]);
    uraid_fails(&["add", "--spare", s(&small), a0], &["too small", s(&small), "Nothing was written"]);
    uraid_fails(&["add", "--spare", s(&ext4), a0], &["holds an ext2/ext3/ext4 filesystem", "Nothing was written", "--force"]);
    uraid_fails(&["add", "--spare", a0, a0], &["already slot 0"]);
    snap.assert_unchanged("refused add");

    let o = uraid_ok(&["add", "--no-rebuild", "--spare", n0, a0]);
    assert_contains(&o.stdout, &["added to array 'pair' in role 1, to be rebuilt", "need a rebuild"], "add into the missing role");
    assert_eq!(raw_states(&a[0]), vec![ACTIVE, REBUILDING]);
    assert_eq!(raw_superblock(&n[0]).slot, 1);
    let st = status_json(&[n0, a0]);
    assert_eq!((st["volumes"][0]["state"].as_str(), st["members"][1]["device"].as_str()), (Some("rebuilding"), Some(n0)), "{st}");

    let o = uraid_ok(&["add", "--spare", n1, a0, n0, "--no-rebuild"]);
    assert_contains(&o.stdout, &["as a spare (slot 2)"], "add a spare");
    let st = status_json(&[n1, n0, a0]);
    assert_eq!((st["members"][2]["role"].is_null(), st["members"][2]["state"].as_str(), st["members"][2]["device"].as_str()), (true, Some("spare"), Some(n1)), "{st}");

    // Replacing the only in-sync member would lose the mirror.
    let snap = Snapshot::take(&[&a[0], &n[0], &n[1], &n[2]]);
    uraid_fails(&["replace", "--old", "0", "--new", n2, "--no-rebuild", a0, n0, n1], &["replacing role 0", "lose the data", "--force"]);
    snap.assert_unchanged("refused replace");

    let o = uraid_ok(&["remove", "--member", n1, a0, n0, n1]);
    assert_contains(&o.stdout, &["slot 2 removed"], "remove the spare");
    assert_eq!(raw_superblock(&a[0]).slots.len(), 2, "the spare's slot is gone");
    assert_stale(&uraid_ok(&["status", a0, n0, n1]), n1);

    let o = uraid_ok(&["replace", "--old", n0, "--new", n2, "--no-rebuild", n0, a0]);
    assert_contains(&o.stdout, &[&format!("{n2} replaces role 1")], "replace");
    assert_stale(&uraid_ok(&["status", a0, n0]), n0);
    let o = uraid_ok(&["assemble", n2, a0]);
    assert_contains(&o.stdout, &[&format!("role 0: {a0} active"), &format!("role 1: {n2} rebuilding")], "assemble after replace");
    let o = uraid_ok(&["add", "--force", "--no-rebuild", "--spare", s(&ext4), a0, n2]);
    assert_contains(&o.stdout, &["as a spare (slot 2)"], "add --force over ext4");
    assert_eq!(raw_superblock(&ext4).slot, 2);
}

#[test]
fn a_spare_takes_over_a_failed_role() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "p", 4, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "hot"], &f[..3]));
    uraid_ok(&with(&["add", "--spare", f[3]], &f[..3]));
    let o = uraid_ok(&with(&["fail", "--no-rebuild", "--member", "1"], &f));
    assert_contains(&o.stdout, &["role 1 of array 'hot' marked faulty", "a spare takes over role 1", "need a rebuild"], "fail with a spare");
    let raw = raw_superblock(&files[0]);
    assert_eq!((raw.slots.len(), raw.slots[1].uuid), (3, raw_superblock(&files[3]).member_uuid), "the spare holds role 1 now");
    assert_eq!(raw_states(&files[0]), vec![ACTIVE, REBUILDING, ACTIVE]);
    assert_eq!(raw_superblock(&files[3]).slot, 1);
    assert_stale(&uraid_ok(&with(&["status"], &f)), f[1]);
    let st = status_json(&[f[3], f[0], f[2]]);
    assert_eq!((st["members"][1]["device"].as_str(), st["volumes"][0]["state"].as_str()), (Some(f[3]), Some("rebuilding")), "{st}");
}

/// Assembles the array on `files`, marks `[at, at + len)` (absolute member
/// bytes) in the write-intent bitmap as the engine does before a write,
/// writes `per_member[i]` there on member `i` directly, and then either
/// ends the write and stops cleanly (`clean`) or lets go without either,
/// as a crash would (superblocks active, the region dirty).
fn write_behind_bitmap(files: &[PathBuf], at: u64, per_member: &[&[u8]], clean: bool) {
    let arr = array::assemble(&specs(files)).unwrap();
    let len = per_member[0].len() as u64;
    let bitmap = arr.bitmap().expect("a redundant array has a bitmap").clone();
    bitmap.start_write(at, len).unwrap();
    for (m, data) in arr.volume().raid().members().iter().zip(per_member) {
        let mut buf = uraid_core::IoBuf::new(data.len());
        buf.copy_from_slice(data);
        m.write_all_at(&buf, at).unwrap();
    }
    if clean {
        bitmap.end_write(at, len);
        drop(bitmap);
        arr.stop().unwrap();
    } else {
        drop(bitmap);
        arr.release();
    }
}

#[test]
fn unclean_stop_is_resynced_at_assemble() {
    let _g = shared();
    let mut rng = rng("unclean_stop_is_resynced_at_assemble");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "u", 2, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "crash", "--bitmap-region", "1M"], &f));
    assert_eq!(raw_superblock(&files[0]).bitmap_region, MIB);
    // A write that reached member 0 but not member 1 when the "crash" came.
    let mut data = vec![0u8; 256 << 10];
    rng.fill_bytes(&mut data);
    let old = vec![0u8; data.len()];
    let at = 3 * MIB + (64 << 10);
    write_behind_bitmap(&files, at, &[&data, &old], false);
    assert_eq!(raw_superblock(&files[0]).state, 1, "the array was left active");
    let st = status_json(&f);
    assert_eq!((st["state"].as_str(), st["volumes"][0]["state"].as_str()), (Some("active"), Some("resyncing")), "{st}");
    assert_eq!(st["bitmap_dirty_bytes"].as_u64(), Some(MIB), "one 1 MiB region is dirty: {st}");
    // Assemble resyncs the dirty region only: member 1 gets member 0's copy.
    uraid_ok(&with(&["assemble"], &[f[1], f[0]]));
    let img1 = std::fs::read(&files[1]).unwrap();
    assert!(img1[at as usize..at as usize + data.len()] == data[..], "the dirty region was not resynced");
    let st = status_json(&f);
    assert_eq!((st["state"].as_str(), st["volumes"][0]["state"].as_str(), st["bitmap_dirty_bytes"].as_u64()), (Some("clean"), Some("clean"), Some(0)), "{st}");
    assert_eq!(check_mismatches(&f), 0);
}

#[test]
fn degraded_unclean_parity_array_needs_force() {
    let _g = shared();
    let mut rng = rng("degraded_unclean_parity_array_needs_force");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "h", 3, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "hole"], &f));
    let mut data = vec![0u8; 64 << 10];
    rng.fill_bytes(&mut data);
    let zero = vec![0u8; data.len()];
    // Data reached member 0, parity (member 2 holds P of row 0) did not.
    write_behind_bitmap(&files, MIB, &[&data, &zero, &zero], false);
    let snap = Snapshot::take(&files[..2]);
    let needles = ["not stopped cleanly and is degraded", "volume 'hole' (RAID 5)", "write hole", "Nothing was written", "--force"];
    uraid_fails(&["assemble", f[0], f[1]], &needles);
    uraid_fails(&["fail", "--member", "0", f[0], f[1]], &needles);
    snap.assert_unchanged("assemble of a degraded unclean RAID 5");
    // status looks without refusing.
    let o = uraid_ok(&["status", f[1], f[0]]);
    assert_contains(&o.stderr, &["write hole"], "status warns");
    let o = uraid_ok(&["assemble", "--force", f[0], f[1]]);
    assert_contains(&o.stderr, &["accepted with --force", "could not be resynced"], "assemble --force");
    // With every member there, the same crash is simply resynced.
    let files = sparse_files(dir.path(), "k", 3, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "hole2"], &f));
    write_behind_bitmap(&files, MIB, &[&data, &zero, &zero], false);
    uraid_ok(&with(&["assemble"], &f));
    assert_eq!(check_mismatches(&f), 0, "parity was not recomputed at assemble");
}

/// A parity-last RAID 5 (what a RAID 0 -> 5 takeover makes) left
/// unclean with only its parity member gone has no write hole: no chunk
/// is reconstructed from parity, the parity is recomputed from the data
/// (md's `dirty_parity_disks`). So assemble goes on without --force, the
/// data reads back, and once the parity member is back and rebuilt,
/// check finds nothing. (Before, this was refused, and a grow killed
/// while it rebuilt the new parity member needed --force.)
#[test]
fn unclean_parity_last_raid5_without_its_parity_member_needs_no_force() {
    let _g = shared();
    let mut rng = rng("unclean_parity_last_raid5_without_its_parity_member_needs_no_force");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "p", 3, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "0", "--chunk", "64K", "--name", "plast"], &f[..2]));
    uraid_ok(&with(&["grow", "--level", "5", "--add", f[2]], &f[..2]));
    assert_contains(&uraid_ok(&with(&["status"], &f)).stdout, &["raid5", "parity-last", "[3/3] [UUU]"], "after the takeover");
    // A write of the users that reached the data members but not the
    // parity member when the "crash" came; the array is left active.
    let arr = array::assemble(&specs(&files)).unwrap();
    let cap = arr.volume().capacity() as usize;
    let model = arr.volume().read_at(0, cap).unwrap();
    let mut data = vec![0u8; 128 << 10];
    rng.fill_bytes(&mut data);
    for (i, m) in arr.volume().raid().members().iter().take(2).enumerate() {
        let mut buf = uraid_core::IoBuf::new(64 << 10);
        buf.copy_from_slice(&data[i * (64 << 10)..(i + 1) * (64 << 10)]);
        m.write_all_at(&buf, MIB).unwrap();
    }
    arr.release();
    assert_eq!(raw_superblock(&files[0]).state, 1, "the array was left active");
    let o = uraid_ok(&with(&["assemble"], &f[..2]));
    assert!(!o.stderr.contains("--force"), "assemble asked for --force: {}", o.stderr);
    let arr = array::assemble(&specs(&files[..2])).unwrap();
    let back = arr.volume().read_at(0, cap).unwrap();
    let changed = back.iter().zip(&model).filter(|(a, b)| a != b).count();
    assert!(changed > 0 && changed <= data.len(), "{changed} bytes changed: only the write's may have");
    let found = back.chunks(64 << 10).filter(|c| *c == &data[..64 << 10] || *c == &data[64 << 10..]).count();
    assert_eq!(found, 2, "the write on the data members reads back as written");
    arr.stop().unwrap();
    uraid_ok(&with(&["add", "--spare", f[2]], &f[..2]));
    uraid_ok(&with(&["rebuild"], &f));
    assert_eq!(check_mismatches(&f), 0, "the parity member was rebuilt from the data");
}

/// Activating an array for a rebuild alone (`uraid rebuild`, a grow's
/// new members) writes the superblocks once, clean: there is no moment
/// at which a kill leaves a degraded parity array marked active, which
/// the next assemble would refuse as a write hole no user opened. (It
/// wrote them active, then clean: a kill between the two did that, seen
/// as a CI failure of `grow::a_takeover_killed_at_random_moments_keeps_its_data`.)
#[test]
fn activate_for_rebuild_writes_the_superblocks_once_and_clean() {
    let _g = shared();
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "r", 4, 8 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "ar"], &f[..3]));
    uraid_ok(&with(&["fail", "--member", "1"], &f[..3]));
    uraid_ok(&with(&["add", "--spare", f[3]], &[f[0], f[2]]));
    let mut arr = array::assemble(&specs(&[files[0].clone(), files[2].clone(), files[3].clone()])).unwrap();
    let before = raw_superblock(&files[0]).events;
    arr.activate_for_rebuild().unwrap();
    let sb = raw_superblock(&files[0]);
    assert_eq!((sb.state, sb.events), (0, before + 1), "one superblock write, clean");
    arr.release();
}

/// Needs the rebuild and scrub of `uraid_core::control::maint`.
#[test]
fn add_rebuilds_and_check_finds_nothing() {
    let _g = shared();
    let mut rng = rng("add_rebuilds_and_check_finds_nothing");
    let dir = tmpdir();
    let a = sparse_files(dir.path(), "a", 2, 8 * MIB);
    let new = sparse_file(dir.path(), "new", 8 * MIB);
    let (a0, a1, nw) = (s(&a[0]), s(&a[1]), s(&new));
    uraid_ok(&["create", "--level", "1", "--chunk", "64K", "--name", "re", a0, a1]);
    // Consistent mirror contents, written as the engine's RAID 1 path does:
    // bitmap first, then both members.
    let mut data = vec![0u8; 7 * MIB as usize];
    rng.fill_bytes(&mut data);
    write_behind_bitmap(&a, MIB, &[&data, &data], true);
    uraid_ok(&["fail", "--member", "1", a0, a1]);
    uraid_ok(&["remove", "--member", "1", a0, a1]);
    let o = uraid_ok(&["add", "--spare", nw, "--rate", "1000", a0]);
    assert_contains(&o.stdout, &["rebuilt role 1", "[2/2] [UU]"], "add rebuilds");
    assert_eq!(raw_states(&a[0]), vec![ACTIVE, ACTIVE]);
    assert_eq!(raw_superblock(&new).slots[1].recovery, u64::MAX, "in sync");
    let img = std::fs::read(&new).unwrap();
    assert!(img[MIB as usize..8 * MIB as usize] == data[..], "the rebuilt member does not hold the mirror's data");
    assert_eq!(check_mismatches(&[a0, nw]), 0);
    let o = uraid_ok(&["repair", a0, nw]);
    assert_contains(&o.stdout, &["volume 're' (raid1)", "mismatches 0"], "repair");
    uraid_fails(&["check", "--volume", "nope", a0, nw], &["has no volume 'nope'"]);
    let r0 = sparse_files(dir.path(), "z", 2, 8 * MIB);
    uraid_ok(&with(&["create", "--level", "0", "--chunk", "64K", "--name", "plain"], &strs(&r0)));
    let snap = Snapshot::take(&r0);
    uraid_fails(&with(&["check"], &strs(&r0)), &["no redundant volume to check"]);
    snap.assert_unchanged("check of a RAID 0 array");
}

/// mdadm's "fail, remove, re-add with a bitmap" scenario: the member that
/// comes back is resynced in the regions written while it was away (the
/// bitmap keeps them dirty while the array is degraded), nothing else.
#[test]
fn re_add_resyncs_only_what_changed() {
    let _g = shared();
    let mut rng = rng("re_add_resyncs_only_what_changed");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "r", 3, 16 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "back", "--bitmap-region", "1M"], &f));
    let arr = array::assemble(&specs(&files)).unwrap();
    let cap = arr.volume().capacity() as usize;
    let mut model = vec![0u8; cap];
    rng.fill_bytes(&mut model[..8 * MIB as usize]);
    arr.volume().write_at(0, &model[..8 * MIB as usize]).unwrap();
    arr.stop().unwrap();
    uraid_ok(&with(&["fail", "--member", "1"], &f));
    uraid_ok(&with(&["remove", "--member", "1"], &f));
    let away = [f[0], f[2]];
    // Written while role 1 is away: two 64 KiB writes whose stripes lie in
    // member regions 0 and 10 (1 MiB each).
    let arr = array::assemble(&specs(&[&files[0], &files[2]])).unwrap();
    for at in [MIB as usize, 20 * MIB as usize] {
        rng.fill_bytes(&mut model[at..at + (64 << 10)]);
        arr.volume().write_at(at as u64, &model[at..at + (64 << 10)]).unwrap();
    }
    arr.stop().unwrap();
    let st = status_json(&away);
    assert_eq!(
        (st["state"].as_str(), st["volumes"][0]["state"].as_str(), st["bitmap_dirty_bytes"].as_u64()),
        (Some("clean"), Some("degraded"), Some(2 * MIB)),
        "a degraded array keeps the bits of what it wrote: {st}"
    );
    let o = uraid_ok(&["add", "--spare", f[1], f[0], f[2]]);
    assert_contains(&o.stdout, &["re-added to array 'back' in role 1", "only the regions written since it left", "rebuilt role 1", "bytes_written 2097152", "[3/3] [UUU]"], "re-add");
    let st = status_json(&f);
    assert_eq!((st["volumes"][0]["state"].as_str(), st["bitmap_dirty_bytes"].as_u64()), (Some("clean"), Some(0)), "{st}");
    assert_eq!(raw_states(&files[0]), vec![ACTIVE, ACTIVE, ACTIVE]);
    assert_eq!(check_mismatches(&f), 0, "the re-added member missed a write");
    // Every byte reads back, also with another member gone (so role 1's
    // chunks are read or used for reconstruction).
    uraid_ok(&with(&["fail", "--member", "0"], &f));
    let arr = array::assemble(&specs(&[&files[1], &files[2]])).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "data differs after the re-add");
    arr.release();
}

#[test]
fn a_lost_journal_device_of_its_own_is_left_behind_only_when_asked() {
    let _g = shared();
    let d = tmpdir();
    let m = sparse_files(d.path(), "m", 2, 16 << 20);
    let j = sparse_file(d.path(), "journal", 72 << 20);
    let ms: Vec<&str> = m.iter().map(|p| s(p)).collect();
    uraid_ok(&with(&["create", "--level", "1", "--name", "gone", "--cache", "journal", "--journal", s(&j)], &ms));
    std::fs::remove_file(&j).unwrap();
    let snap = Snapshot::take(&m);
    uraid_fails(&with(&["assemble"], &ms), &["keeps a write journal", "it was not given", "Nothing was written", "--without-journal"]);
    uraid_fails(&with(&["assemble", "--force"], &ms), &["keeps a write journal", "--without-journal"]);
    uraid_fails(&with(&["config", "--cache", "writeback"], &ms), &["keeps a write journal", "--without-journal"]);
    snap.assert_unchanged("the refused assemble and config");
    let out = uraid_ok(&with(&["assemble", "--without-journal"], &ms));
    assert_contains(&out.stderr, &["was not given and the volume runs without it"], "assemble --without-journal");
    let out = uraid_ok(&with(&["config", "--without-journal", "--cache", "writeback"], &ms));
    assert_contains(&out.stdout, &["cache writeback"], "config --without-journal leaves the journal mode");
    // The journal is no longer wanted.
    uraid_ok(&with(&["assemble"], &ms));
}
