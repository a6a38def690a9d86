//! Declustered parity (issue 33): `uraid create --level draid5/draid6`
//! with `--data` and `--spares` on files, what examine and status show,
//! data written and read back across assembles, degraded reads with a
//! member failed, a rebuild onto a replacement member (then a second
//! failure still reads right), check, and the refusals (grow, `--data`
//! at another level, a shape that does not fit); the distributed spare
//! space: a failed member rebuilt into it (stopped and served), a second
//! failure after it, draid6 taking two in a row, the rebalance onto a
//! replacement, and kill -9 during the rebuild and the rebalance.

use serde_json::Value;
use rand::RngCore;

use crate::util::*;
use uraid_core::control::array;

const MIB: u64 = 1 << 20;

fn check_mismatches(files: &[&str]) -> u64 {
    check_report(files)["mismatches"].as_u64().unwrap_or_else(|| panic!("no mismatch count"))
}

/// `uraid check --json`'s report of the array over `files`.
fn check_report(files: &[&str]) -> Value {
    let o = uraid_ok(&with(&["check", "--json"], files));
    let j: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("check --json: {e}: {}", o.stdout));
    j[0]["report"].clone()
}

/// Checks a fully redundant array over `files`: no mismatch, and every
/// stripe compared (a role a distributed spare holds is read from its
/// spare chunks, not left out).
fn check_whole(files: &[&str]) {
    let r = check_report(files);
    assert_eq!((r["mismatches"].as_u64(), r["stripes_unchecked"].as_u64()), (Some(0), Some(0)), "check: {r}");
}


/// Assembles the array over `files`, writes random bytes (from `rng`)
/// over its whole volume and stops it: the model to read back.
fn filled_with_model(files: &[std::path::PathBuf], rng: &mut impl RngCore) -> Vec<u8> {
    let arr = array::assemble(&specs(files)).unwrap();
    let mut model = vec![0u8; arr.volume().capacity() as usize];
    rng.fill_bytes(&mut model);
    arr.volume().write_at(0, &model).unwrap();
    arr.stop().unwrap();
    model
}
#[test]
fn draid5_create_write_degraded_rebuild_and_second_failure() {
    let _g = shared();
    let mut rng = rng("draid5_create_write_degraded_rebuild_and_second_failure");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "d", 8, 16 * MIB);
    let f = strs(&files);
    let o = uraid_ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", "d5", "--bitmap-region", "1M"], &f));
    // 15 MiB of each member is 240 rows of one 4+1 group each (7 positions
    // less the spare hold one group of 5): 240 x 4 x 64 KiB.
    let cap = 240 * 4 * 64 * 1024u64;
    assert_contains(&o.stdout, &["draid5 (4d+1p, 1 distributed spare, layout 1) over 8 members", &format!("capacity {cap} bytes")], "create");
    let o = uraid_ok(&with(&["examine"], &f[..1]));
    assert_contains(&o.stdout, &["'d5' draid5 (4d+1p, 1 distributed spare, layout 1)"], "examine");
    let raw = std::fs::read(&files[0]).unwrap();
    assert_eq!(u32::from_le_bytes(raw[8..12].try_into().unwrap()), 4, "a declustered volume (3) with a live-data map (4) is written as version 4");
    assert_eq!(&raw[1536 + 120..1536 + 123], &[1, 4, 1], "layout version, D, S at bytes 120..123 of the entry");

    let arr = array::assemble(&specs(&files)).unwrap();
    assert_eq!(arr.volume().capacity(), cap);
    let mut model = vec![0u8; cap as usize];
    rng.fill_bytes(&mut model);
    // Whole groups, and pieces that read-modify-write.
    arr.volume().write_at(0, &model[..40 * MIB as usize]).unwrap();
    for at in [40 * MIB as usize + 4096, 50 * MIB as usize + 65536 * 3 + 512] {
        arr.volume().write_at(at as u64, &model[at..at + 200_704]).unwrap();
    }
    arr.volume().write_at(40 * MIB, &model[40 * MIB as usize..]).unwrap();
    arr.stop().unwrap();
    assert_eq!(check_mismatches(&f), 0, "parity agrees after the writes");

    let st: Value = serde_json::from_str(&uraid_ok(&with(&["status", "--json"], &f)).stdout).unwrap();
    assert_eq!(st["volumes"][0]["layout"], "draid5 4d+1p, 1 distributed spare, layout 1", "{st}");
    assert_eq!(st["volumes"][0]["level"], 105, "{st}");
    // Grow is refused, with the reason, and writes nothing.
    let more = sparse_file(dir.path(), "more", 16 * MIB);
    let snap = std::fs::read(&files[0]).unwrap()[..4096].to_vec();
    uraid_fails(&with(&["grow", "--add", s(&more)], &f), &["volume 'd5' is declustered (draid5)", "neither grows nor changes level", "Nothing was written"]);
    assert!(std::fs::read(&files[0]).unwrap()[..4096] == snap[..], "a refused grow wrote the superblock");

    // Assembled in another order, it reads back.
    let mut order = files.clone();
    order.reverse();
    let arr = array::assemble(&specs(&order)).unwrap();
    assert!(arr.volume().read_at(0, cap as usize).unwrap() == model, "data differs after assemble");
    arr.stop().unwrap();

    // Degraded: member 3 failed (its distributed spare taken, not
    // rebuilt yet); every byte is reconstructed from the others, and
    // writes go on.
    uraid_ok(&with(&["fail", "--no-rebuild", "--member", "3"], &f));
    let arr = array::assemble(&specs(&files)).unwrap();
    assert!(arr.volume().read_at(0, cap as usize).unwrap() == model, "degraded read differs");
    rng.fill_bytes(&mut model[MIB as usize..3 * MIB as usize]);
    arr.volume().write_at(MIB, &model[MIB as usize..3 * MIB as usize]).unwrap();
    assert!(arr.volume().read_at(0, cap as usize).unwrap() == model, "degraded read after a degraded write differs");
    arr.stop().unwrap();

    // A replacement member is rebuilt; the volume is redundant again.
    uraid_ok(&with(&["remove", "--member", "3"], &f));
    let new = sparse_file(dir.path(), "new", 16 * MIB);
    let mut rest: Vec<&str> = f.clone();
    rest.remove(3);
    let o = uraid_ok(&with(&["add", "--spare", s(&new)], &rest));
    assert_contains(&o.stdout, &["rebuilt role 3", "[8/8]"], "add");
    let mut all = f.clone();
    all[3] = s(&new);
    assert_eq!(check_mismatches(&all), 0, "the rebuilt member disagrees with parity");
    // A second failure (another member) still reads right.
    uraid_ok(&with(&["fail", "--member", "6"], &all));
    let arr = array::assemble(&specs(&all)).unwrap();
    assert!(arr.volume().read_at(0, cap as usize).unwrap() == model, "read after rebuild and a second failure differs");
    arr.release();

}

#[test]
fn draid6_defaults_two_failures_and_refused_shapes() {
    let _g = shared();
    let mut rng = rng("draid6_defaults_two_failures_and_refused_shapes");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "e", 7, 8 * MIB);
    let f = strs(&files);
    // The defaults over 7 members: 1 spare, 4 data chunks (4 + 2 fills the 6 other positions).
    let o = uraid_ok(&with(&["create", "--level", "draid2", "--chunk", "64K", "--name", "d6"], &f));
    assert_contains(&o.stdout, &["draid6 (4d+2p, 1 distributed spare, layout 1) over 7 members"], "create");
    let arr = array::assemble(&specs(&files)).unwrap();
    let cap = arr.volume().capacity() as usize;
    assert_eq!(cap as u64, 7 * MIB / (64 << 10) * 4 * (64 << 10));
    let mut model = vec![0u8; cap];
    rng.fill_bytes(&mut model);
    arr.volume().write_at(0, &model).unwrap();
    arr.stop().unwrap();
    uraid_ok(&with(&["fail", "--no-rebuild", "--member", "0"], &f));
    uraid_ok(&with(&["fail", "--no-rebuild", "--member", "5"], &f));
    let arr = array::assemble(&specs(&[f[1], f[2], f[3], f[4], f[6]])).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "draid6 with two members lost reads wrong");
    arr.release();

    let g = sparse_files(dir.path(), "g", 6, 8 * MIB);
    let g = strs(&g);
    uraid_fails(&with(&["create", "--level", "draid6", "--data", "4", "--spares", "1", "--name", "x"], &g), &["need at least 7 members, not 6", "fewer --data or --spares"]);
    uraid_fails(&with(&["create", "--level", "5", "--data", "4", "--name", "x"], &g), &["--data and --spares are for the declustered levels"]);
    // A level clap refuses (its usage error, exit status 2).
    let o = uraid(&with(&["create", "--level", "draid9", "--name", "x"], &g));
    assert_contains(&o.stderr, &["unknown RAID level 'draid9'", "draid5, draid6"], "draid9");
}

/// The volume's status entry and the distributed spares in use.
fn spare_status(files: &[&str]) -> Value {
    serde_json::from_str(&uraid_ok(&with(&["status", "--json"], files)).stdout).unwrap()
}

/// Issue 33: a failed member of a draid5 volume is rebuilt into the
/// distributed spare space by `uraid fail` itself, as a dedicated spare
/// takes a failed role (no replacement drive): the spare chunks hold its
/// role (status says which), parity agrees, the data reads back without
/// the failed device at all, writes land in the spare chunks, and a
/// second failure still reads right.
#[test]
fn draid5_rebuilds_into_distributed_spare_then_survives_a_second_failure() {
    let _g = shared();
    let mut rng = rng("draid5_rebuilds_into_distributed_spare_then_survives_a_second_failure");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "d", 8, 16 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", "ds", "--bitmap-region", "1M"], &f));
    let mut model = filled_with_model(&files, &mut rng);
    let cap = model.len();

    let o = uraid_ok(&with(&["fail", "--member", "3"], &f));
    assert_contains(&o.stdout, &["distributed spare space takes over role 3", "rebuilt role 3"], "fail rebuilds into the distributed spare");
    let st = spare_status(&f);
    assert_eq!(st["distributed_spares"], serde_json::json!([{"spare": 0, "role": 3, "recovery_offset": null}]), "{st}");
    assert_eq!(st["members"][3]["state"], "spared", "{st}");
    assert_eq!(st["volumes"][0]["state"], "clean", "the volume is redundant again: {st}");
    check_whole(&f); // parity agrees with the spare chunks, every stripe compared

    // The failed device holds nothing the volume needs: garbage on it and
    // left out, the data reads back from the spare chunks.
    let junk = vec![0xa5u8; 15 * MIB as usize];
    std::fs::write(&files[3], [&std::fs::read(&files[3]).unwrap()[..MIB as usize], &junk[..]].concat()).unwrap();
    let mut rest = f.clone();
    rest.remove(3);
    let arr = array::assemble(&specs(&rest)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read from the distributed spare differs");
    rng.fill_bytes(&mut model[MIB as usize..5 * MIB as usize + 4096]);
    arr.volume().write_at(MIB, &model[MIB as usize..5 * MIB as usize + 4096]).unwrap();
    for at in [7 * MIB as usize + 512, 9 * MIB as usize + 65536 * 5 - 4096] {
        rng.fill_bytes(&mut model[at..at + 12288]);
        arr.volume().write_at(at as u64, &model[at..at + 12288]).unwrap();
    }
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read after writes into the spare chunks differs");
    arr.stop().unwrap();
    check_whole(&rest); // parity agrees after writes into the spare chunks

    // A second failure: every group still has all but one chunk.
    uraid_ok(&with(&["fail", "--member", "6"], &rest));
    let arr = array::assemble(&specs(&rest)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read after a second failure differs");
    arr.release();
}

/// Issue 33: draid6 with two distributed spares takes two failures in a
/// row into them, each by `uraid rebuild`; the data reads back with both
/// failed devices gone.
#[test]
fn draid6_takes_two_failures_in_a_row_into_distributed_spares() {
    let _g = shared();
    let mut rng = rng("draid6_takes_two_failures_in_a_row_into_distributed_spares");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "e", 8, 12 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid6", "--data", "4", "--spares", "2", "--chunk", "64K", "--name", "d6s"], &f));
    let mut model = filled_with_model(&files, &mut rng);
    let cap = model.len();

    uraid_ok(&with(&["fail", "--no-rebuild", "--member", "0"], &f));
    assert_contains(&uraid_ok(&with(&["rebuild"], &f)).stdout, &["rebuilt role 0"], "first rebuild");
    assert_contains(&uraid_ok(&with(&["fail", "--member", "5"], &f)).stdout, &["rebuilt role 5"], "second rebuild, by fail");
    let st = spare_status(&f);
    assert_eq!(
        st["distributed_spares"],
        serde_json::json!([{"spare": 0, "role": 0, "recovery_offset": null}, {"spare": 1, "role": 5, "recovery_offset": null}]),
        "{st}"
    );
    let rest = [f[1], f[2], f[3], f[4], f[6], f[7]];
    let arr = array::assemble(&specs(&rest)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "draid6 with two roles in spares reads wrong");
    rng.fill_bytes(&mut model[..3 * MIB as usize]);
    arr.volume().write_at(0, &model[..3 * MIB as usize]).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "draid6 read after writes differs");
    arr.stop().unwrap();
    assert_eq!(check_mismatches(&rest), 0);
}

/// Issue 33: a replacement drive for a role a distributed spare holds
/// takes the role back (`uraid remove` of the old device, then `uraid
/// add`): the role is rebuilt onto it, the spare is free again (status
/// lists none), parity agrees, and the next failure goes into the spare
/// again.
#[test]
fn draid5_replacement_rebalances_and_frees_the_spare() {
    let _g = shared();
    let mut rng = rng("draid5_replacement_rebalances_and_frees_the_spare");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "r", 8, 12 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", "rb"], &f));
    let model = filled_with_model(&files, &mut rng);
    let cap = model.len();
    uraid_ok(&with(&["fail", "--member", "2"], &f));
    assert_eq!(spare_status(&f)["distributed_spares"][0]["role"], 2);

    uraid_ok(&with(&["remove", "--member", "2"], &f));
    let mut rest = f.clone();
    rest.remove(2);
    let new = sparse_file(dir.path(), "new", 12 * MIB);
    let o = uraid_ok(&with(&["add", "--spare", s(&new)], &rest));
    assert_contains(&o.stdout, &["rebuilt role 2"], "rebalance onto the replacement");
    let mut all = f.clone();
    all[2] = s(&new);
    let st = spare_status(&all);
    assert_eq!(st["distributed_spares"], serde_json::json!([]), "the spare is free again: {st}");
    assert_eq!(st["members"][2]["state"], "active", "{st}");
    assert_eq!(check_mismatches(&all), 0);
    let arr = array::assemble(&specs(&all)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read after the rebalance differs");
    arr.stop().unwrap();
    // The freed spare takes the next failure.
    uraid_ok(&with(&["fail", "--member", "5"], &all));
    assert_eq!(spare_status(&all)["distributed_spares"], serde_json::json!([{"spare": 0, "role": 5, "recovery_offset": null}]));
    assert_eq!(check_mismatches(&all), 0);
}

/// Runs `uraid ARGS` for `ms` milliseconds, then SIGKILLs it. Its
/// rebuilds checkpoint every MiB (so that a kill leaves progress behind
/// on members of a few MiB).
fn kill_after(args: &[&str], ms: u64) {
    use std::process::{Command, Stdio};
    let mut c = Command::new(URAID)
        .args(args)
        .env("URAID_FAILPOINT_CHECKPOINT_BYTES", "1048576")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("uraid");
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let _ = c.kill();
    let _ = c.wait();
}

/// Issue 33: kill -9 during the rebuild into the distributed spare and
/// during the rebalance onto a replacement; the next `uraid rebuild`
/// finishes each, and the data and parity are right. Killed mid-rebalance,
/// the spare still holds the role (the volume stays redundant: with
/// another member lost as well, the data still reads).
#[test]
fn kill_9_during_the_distributed_rebuild_and_the_rebalance_keeps_the_data() {
    let _g = shared();
    let mut rng = rng("kill_9_during_the_distributed_rebuild_and_the_rebalance_keeps_the_data");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "k", 8, 16 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", "kd"], &f));
    let model = filled_with_model(&files, &mut rng);
    let cap = model.len();
    // --no-rebuild: the distributed spare takes the role at once (as a
    // dedicated spare would), its rebuild waits.
    let o = uraid_ok(&with(&["fail", "--no-rebuild", "--member", "4"], &f));
    assert_contains(&o.stdout, &["distributed spare space takes over role 4", "need a rebuild"], "fail --no-rebuild");
    let st = spare_status(&f);
    assert_eq!(st["distributed_spares"], serde_json::json!([{"spare": 0, "role": 4, "recovery_offset": 0}]), "{st}");
    kill_after(&with(&["rebuild", "--rate", "3"], &f), 1500);
    let st = spare_status(&f);
    assert_eq!(st["members"][4]["state"], "spared", "killed mid-rebuild, the role stays in the spare: {st}");
    assert_contains(&uraid_ok(&with(&["rebuild"], &f)).stdout, &["rebuilt role 4"], "resumed rebuild");
    assert_eq!(check_mismatches(&f), 0, "after the killed distributed rebuild");
    let mut rest = f.clone();
    rest.remove(4);
    let arr = array::assemble(&specs(&rest)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "data after the killed distributed rebuild");
    arr.stop().unwrap();

    let new = sparse_file(dir.path(), "new", 16 * MIB);
    uraid_ok(&with(&["add", "--no-rebuild", "--spare", s(&new)], &rest));
    let mut all = f.clone();
    all[4] = s(&new);
    kill_after(&with(&["rebuild", "--rate", "3"], &all), 2500);
    let st = spare_status(&all);
    assert_eq!(st["members"][4]["state"], "rebuilding", "{st}");
    assert_eq!(st["distributed_spares"][0]["role"], 4, "killed mid-rebalance, the spare still holds the role: {st}");
    let to = st["distributed_spares"][0]["rebalanced_to"].as_u64().unwrap_or_else(|| panic!("no rebalance offset: {st}"));
    eprintln!("rebalance killed at member byte {to}");
    // Another member lost too (left out, nothing written): every byte
    // still reads, from the device below the checkpoint and the spare
    // chunks above it.
    let mut two_down: Vec<&str> = all.clone();
    two_down.remove(1);
    let arr = array::open(&specs(&two_down)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "data during the killed rebalance with another member lost");
    arr.release();
    assert_contains(&uraid_ok(&with(&["rebuild"], &all)).stdout, &["rebuilt role 4"], "resumed rebalance");
    let st = spare_status(&all);
    assert_eq!(st["distributed_spares"], serde_json::json!([]), "{st}");
    assert_eq!(check_mismatches(&all), 0, "after the killed rebalance");
    let arr = array::assemble(&specs(&all)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "data after the killed rebalance");
    arr.release();
}

/// Issue 33: a served draid5 array does it by itself: `uraid fail` of a
/// member through the control socket, and the service's maintenance puts
/// the role into the distributed spare and rebuilds it in the background;
/// through NBD the data reads back, and a live check finds no mismatch.
#[test]
fn a_served_draid5_rebuilds_a_failed_member_into_its_distributed_spare() {
    use std::ffi::OsStr;
    use uraid_core::{BlockDevice, BlockQueue};
    let _g = shared();
    let mut rng = rng("a_served_draid5_rebuilds_a_failed_member_into_its_distributed_spare");
    let d = tmpdir();
    let (run_dir, conf) = (d.path().join("run"), d.path().join("uraid.conf"));
    std::fs::create_dir_all(&run_dir).unwrap();
    let env: [(&str, &OsStr); 2] = [("URAID_RUN_DIR", run_dir.as_os_str()), ("URAID_CONFIG", conf.as_os_str())];
    let name = format!("sd{}", std::process::id());
    let files = sparse_files(d.path(), "m", 8, 16 * MIB);
    let f = strs(&files);
    let ok = |args: &[&str]| {
        let o = uraid_env(args, &env);
        assert!(o.status.success(), "{}: {}{}", o.cmdline, o.stdout, o.stderr);
        o.stdout
    };
    ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", &name], &f));
    let log = d.path().join("serve.log");
    let (_srv, port) = serve_logged(&with(&["serve", "--tcp", "127.0.0.1:0"], &f), &env, &log);
    let ctl = run_dir.join(format!("{name}.ctl"));
    let t0 = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&ctl).is_err() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "no control socket at {}", ctl.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let dev = uraid_nbd::client::NbdDevice::connect(&format!("nbd://127.0.0.1:{port}/{name}").parse().unwrap()).unwrap();
    let mut q = dev.open_queue(1).unwrap();
    let cap = dev.info().size as usize;
    let mut model = vec![0u8; cap];
    rng.fill_bytes(&mut model);
    for at in (0..cap).step_by(MIB as usize) {
        q.write_at(at as u64, &model[at..(at + MIB as usize).min(cap)]).unwrap();
    }
    dev.flush().unwrap();

    ok(&["fail", &name, "--member", "3"]);
    let t0 = std::time::Instant::now();
    loop {
        let st: Value = serde_json::from_str(&ok(&["status", "--json", &name])).unwrap();
        if st["distributed_spares"] == serde_json::json!([{"spare": 0, "role": 3, "recovery_offset": null}]) {
            assert_eq!((st["members"][3]["state"].as_str(), st["volumes"][0]["state"].as_str()), (Some("spared"), Some("clean")), "{st}");
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "the served rebuild into the spare did not end: {st}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for at in (0..cap).step_by(MIB as usize) {
        let back = q.read_at(at as u64, (cap - at).min(MIB as usize)).unwrap();
        assert!(back[..] == model[at..at + back.len()], "MiB at {at} reads back wrong through NBD");
    }
    rng.fill_bytes(&mut model[..2 * MIB as usize]);
    q.write_at(0, &model[..2 * MIB as usize]).unwrap();
    assert!(q.read_at(0, 2 * MIB as usize).unwrap()[..] == model[..2 * MIB as usize], "write into the spare chunks through NBD");
    let out = ok(&["check", "--json", &name]);
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r[0]["report"]["mismatches"].as_u64(), Some(0), "{out}");
    let e = std::fs::read_to_string(&log).unwrap_or_default();
    assert_contains(&e, &["distributed spare space takes over role(s) [3]"], "the service's log");
}

/// Issue 33: a second member failing during the rebalance onto a
/// replacement loses nothing. The rebalance copies the role from its
/// distributed spare and keeps the spare until it ends, so the volume is
/// redundant all along: killed mid-rebalance, `uraid fail` of another
/// member is accepted without --force, the data reads back and takes
/// writes (on both sides of the checkpoint), the resumed rebalance
/// reconstructs the rows whose spare chunk was on the failed member, and
/// the freed spare then takes the failed member.
#[test]
fn a_second_failure_during_the_rebalance_loses_nothing() {
    let _g = shared();
    let mut rng = rng("a_second_failure_during_the_rebalance_loses_nothing");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "b", 8, 16 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", "rb2"], &f));
    let mut model = filled_with_model(&files, &mut rng);
    let cap = model.len();
    uraid_ok(&with(&["fail", "--member", "2"], &f));
    uraid_ok(&with(&["remove", "--member", "2"], &f));
    let mut rest = f.clone();
    rest.remove(2);
    let new = sparse_file(dir.path(), "new", 16 * MIB);
    uraid_ok(&with(&["add", "--no-rebuild", "--spare", s(&new)], &rest));
    let mut all = f.clone();
    all[2] = s(&new);
    let st = spare_status(&all);
    assert_eq!(st["distributed_spares"], serde_json::json!([{"spare": 0, "role": 2, "recovery_offset": null, "rebalanced_to": 0}]), "{st}");
    let o = uraid_ok(&with(&["status"], &all));
    assert_contains(&o.stdout, &["role 2: ", "rebuilding (rebuilt up to byte 0, 0.0%, copied from distributed spare 0 which holds the rest)"], "status text");
    kill_after(&with(&["rebuild", "--rate", "3"], &all), 2500);
    let st = spare_status(&all);
    let to = st["distributed_spares"][0]["rebalanced_to"].as_u64().unwrap_or_else(|| panic!("no rebalance under way: {st}"));
    let span = 16 * MIB - MIB;
    assert!(to > MIB && to < 16 * MIB, "the kill did not land mid-rebalance (member byte {to} of {span}): {st}");

    let o = uraid_ok(&with(&["fail", "--no-rebuild", "--member", "6"], &all));
    assert_contains(&o.stdout, &["role 6 of array 'rb2' marked faulty"], "a second failure mid-rebalance");
    let arr = array::assemble(&specs(&all)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read with a second member failed mid-rebalance differs");
    for at in [0usize, cap / 2 + 4096, cap - 3 * MIB as usize] {
        rng.fill_bytes(&mut model[at..at + MIB as usize]);
        arr.volume().write_at(at as u64, &model[at..at + MIB as usize]).unwrap();
    }
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read after writes mid-rebalance differs");
    arr.stop().unwrap();

    assert_contains(&uraid_ok(&with(&["rebuild"], &all)).stdout, &["rebuilt role 2"], "the resumed rebalance");
    let st = spare_status(&all);
    assert_eq!((st["members"][2]["state"].as_str(), st["members"][6]["state"].as_str()), (Some("active"), Some("faulty")), "{st}");
    assert_eq!(st["distributed_spares"], serde_json::json!([]), "the spare is free again: {st}");
    let arr = array::assemble(&specs(&all)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read after the rebalance, member 6 failed, differs");
    arr.stop().unwrap();
    assert_contains(&uraid_ok(&with(&["rebuild"], &all)).stdout, &["rebuilt role 6"], "the freed spare takes member 6");
    assert_eq!(spare_status(&all)["distributed_spares"], serde_json::json!([{"spare": 0, "role": 6, "recovery_offset": null}]));
    assert_eq!(check_mismatches(&all), 0);
    let mut five = all.clone();
    five.remove(6);
    let arr = array::open(&specs(&five)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "read without member 6's device differs");
    arr.release();
}

/// Issue 33: draid6 with both distributed spares in use is doubly
/// redundant again. The second failed member held spare chunks of the
/// first role's rows (and the first one's device held the second spare's
/// chunks of some rows): the second rebuild puts those rows where the
/// other role now lives, so with two more members lost as well every
/// byte still reads, and parity agrees.
#[test]
fn draid6_with_both_spares_in_use_survives_two_more_failures() {
    let _g = shared();
    let mut rng = rng("draid6_with_both_spares_in_use_survives_two_more_failures");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "w", 8, 12 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid6", "--data", "4", "--spares", "2", "--chunk", "64K", "--name", "d6w"], &f));
    let model = filled_with_model(&files, &mut rng);
    let cap = model.len();
    assert_contains(&uraid_ok(&with(&["fail", "--member", "0"], &f)).stdout, &["rebuilt role 0"], "first failure");
    assert_contains(&uraid_ok(&with(&["fail", "--member", "5"], &f)).stdout, &["rebuilt role 5"], "second failure");
    let st = spare_status(&f);
    assert_eq!(st["volumes"][0]["state"], "clean", "{st}");
    assert_eq!(check_mismatches(&f), 0);
    let four = [f[3], f[4], f[6], f[7]];
    let arr = array::open(&specs(&four)).unwrap();
    let back = arr.volume().read_at(0, cap);
    arr.release();
    let back = back.unwrap_or_else(|e| panic!("draid6 with both spares in use and two more members lost: {e}"));
    assert!(first_difference(&back, &model).is_none(), "draid6 with both spares in use and two more members lost reads wrong at {:?}", first_difference(&back, &model));
}

/// Issue 33: kill -9 of a served draid5 array mid-rebalance while a
/// client rewrites the whole volume: no acknowledged write is lost. The
/// data path writes the role's rows below the rebalance's offset to the
/// new device only, so that offset is recorded before such a write can
/// land there (the next run would otherwise read those rows from the
/// spare chunks, which never got the writes).
#[test]
fn a_served_rebalance_killed_while_a_client_writes_keeps_every_write() {
    use uraid_core::{BlockDevice, BlockQueue};
    let _g = shared();
    let mut rng = rng("a_served_rebalance_killed_while_a_client_writes_keeps_every_write");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "v", 8, 16 * MIB);
    let f = strs(&files);
    let name = format!("rv{}", std::process::id());
    uraid_ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", &name], &f));
    let mut model = filled_with_model(&files, &mut rng);
    let cap = model.len();
    uraid_ok(&with(&["fail", "--member", "2"], &f));
    uraid_ok(&with(&["remove", "--member", "2"], &f));
    let mut rest = f.clone();
    rest.remove(2);
    let new = sparse_file(dir.path(), "new", 16 * MIB);
    uraid_ok(&with(&["add", "--no-rebuild", "--spare", s(&new)], &rest));
    let mut paths = files.clone();
    paths[2] = new.clone();
    let all = strs(&paths);

    let (mut srv, port) = serve_tcp(&paths, &["--rebuild-rate", "2"]);
    let dev = uraid_nbd::client::NbdDevice::connect(&format!("nbd://127.0.0.1:{port}/{name}").parse().unwrap()).unwrap();
    let mut q = dev.open_queue(1).unwrap();
    // The rebalance copies about 2 MB/s in the background: a few MiB in.
    std::thread::sleep(std::time::Duration::from_millis(3000));
    rng.fill_bytes(&mut model);
    for at in (0..cap).step_by(MIB as usize) {
        q.write_at(at as u64, &model[at..(at + MIB as usize).min(cap)]).unwrap();
    }
    dev.flush().unwrap();
    drop(q);
    drop(dev);
    srv.kill_and_release(&paths);
    let st = spare_status(&all);
    assert!(st["distributed_spares"][0]["rebalanced_to"].as_u64().is_some(), "killed before the rebalance ended: {st}");

    let arr = array::open(&specs(&paths)).unwrap();
    let back = arr.volume().read_at(0, cap).unwrap();
    arr.release();
    assert!(first_difference(&back, &model).is_none(), "after the kill, acknowledged writes read back wrong at {:?}", first_difference(&back, &model));
    assert_contains(&uraid_ok(&with(&["rebuild"], &all)).stdout, &["rebuilt role 2"], "the resumed rebalance");
    assert_eq!(check_mismatches(&all), 0);
    let arr = array::open(&specs(&paths)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "after the resumed rebalance");
    arr.release();
}

/// Issue 33 (a failure during rebuild): draid6's rebuild of a role into
/// its distributed spare is killed midway, a second member fails then,
/// and the next `uraid rebuild` finishes the first role and puts the
/// second into the other spare; every byte reads back with both failed
/// devices gone, and parity agrees.
#[test]
fn draid6_a_second_failure_during_the_distributed_rebuild_loses_nothing() {
    let _g = shared();
    let mut rng = rng("draid6_a_second_failure_during_the_distributed_rebuild_loses_nothing");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "q", 8, 16 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid6", "--data", "4", "--spares", "2", "--chunk", "64K", "--name", "d6f"], &f));
    let model = filled_with_model(&files, &mut rng);
    let cap = model.len();
    uraid_ok(&with(&["fail", "--no-rebuild", "--member", "2"], &f));
    kill_after(&with(&["rebuild", "--rate", "3"], &f), 1500);
    let st = spare_status(&f);
    let at = st["distributed_spares"][0]["recovery_offset"].as_u64().unwrap_or_else(|| panic!("the rebuild finished or never ran: {st}"));
    eprintln!("distributed rebuild of role 2 killed at member byte {at}");
    uraid_ok(&with(&["fail", "--no-rebuild", "--member", "6"], &f));
    let rest = [f[0], f[1], f[3], f[4], f[5], f[7]];
    let arr = array::open(&specs(&rest)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "data with role 2 half rebuilt and role 6 lost");
    arr.release();
    let o = uraid_ok(&with(&["rebuild"], &rest));
    assert_contains(&o.stdout, &["rebuilt role 2", "rebuilt role 6"], "the resumed rebuild and the second one");
    let st = spare_status(&rest);
    assert_eq!(
        st["distributed_spares"],
        serde_json::json!([{"spare": 0, "role": 2, "recovery_offset": null}, {"spare": 1, "role": 6, "recovery_offset": null}]),
        "{st}"
    );
    check_whole(&rest);
    let arr = array::assemble(&specs(&rest)).unwrap();
    assert!(arr.volume().read_at(0, cap).unwrap() == model, "data after both rebuilds");
    arr.release();
}
