//! Declustered parity (issue 33): `uraid create --level draid5/draid6`
//! with `--data` and `--spares` on files, what examine and status show,
//! data written and read back across assembles, degraded reads with a
//! member failed, a rebuild onto a replacement member (then a second
//! failure still reads right), check, and the refusals (grow, `--data`
//! at another level, a shape that does not fit).

use serde_json::Value;
use rand::RngCore;

use crate::util::*;
use uraid_core::control::array;

const MIB: u64 = 1 << 20;

fn check_mismatches(files: &[&str]) -> u64 {
    let o = uraid_ok(&with(&["check", "--json"], files));
    let j: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("check --json: {e}: {}", o.stdout));
    j[0]["report"]["mismatches"].as_u64().unwrap_or_else(|| panic!("no mismatch count: {j}"))
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
    assert_eq!(u32::from_le_bytes(raw[8..12].try_into().unwrap()), 3, "a declustered volume is written as version 3");
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

    // Degraded: member 3 failed; every byte is reconstructed from the others, and writes go on.
    uraid_ok(&with(&["fail", "--member", "3"], &f));
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
    uraid_ok(&with(&["fail", "--member", "0"], &f));
    uraid_ok(&with(&["fail", "--member", "5"], &f));
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
