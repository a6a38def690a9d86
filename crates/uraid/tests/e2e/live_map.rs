//! The live-data map (issue 33 item 3): a RAID 5 volume written a
//! quarter full rebuilds about a quarter of a member onto a spare, reads
//! of regions never written are zeros even where the members hold
//! garbage, `check` finds nothing to mismatch there, a region discarded
//! whole is skipped by the next rebuild (on draid5 too, whose rows hold
//! several groups: live bytes go down), and SIGKILL at random moments
//! during writes loses no acknowledged write (the map is never clear where
//! data was acknowledged).

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use uraid_core::control::array::{self, Array, CreateOptions};
use uraid_core::{MemberSpec, Op, Volume};

use crate::util::*;

const MIB: u64 = 1 << 20;
/// Bitmap region (member bytes): a RAID 5 volume over 4 members holds
/// three of them per logical region.
const REGION: u64 = MIB;

/// Reads the whole volume and compares it with `model`.
fn assert_reads(vol: &Arc<Volume>, model: &[u8], what: &str) {
    for (i, want) in model.chunks(4 * MIB as usize).enumerate() {
        let at = i as u64 * 4 * MIB;
        let got = vol.read_at(at, want.len()).unwrap();
        if let Some((off, n)) = first_difference(&got, want) {
            panic!("{what}: {n} bytes differ from the model at logical byte {}", at + off as u64);
        }
    }
}

/// Fails role `role`, lets the spare take it over after filling the
/// spare's data area with garbage (what a rebuild that writes nothing
/// there leaves), rebuilds; the rebuild's report.
fn fail_and_rebuild(arr: &mut Array, role: u32, spare: &std::path::Path) -> uraid_core::control::maint::RebuildReport {
    arr.fail(role, false).unwrap();
    let junk = vec![0xA5u8; MIB as usize];
    let len = std::fs::metadata(spare).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(spare).unwrap();
    for at in (2 * MIB..len).step_by(MIB as usize) {
        f.write_all_at(&junk, at).unwrap();
    }
    drop(f);
    arr.add(&MemberSpec::Path(spare.to_path_buf()), true).unwrap();
    let mut reports = arr.rebuild(None, &mut |_, _, _| {}).unwrap();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

#[test]
fn a_quarter_written_raid5_rebuilds_a_quarter_and_reads_zeros_elsewhere() {
    let _g = shared();
    let mut rng = rng("a_quarter_written_raid5_rebuilds_a_quarter_and_reads_zeros_elsewhere");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "m", 4, 34 * MIB);
    let spares = sparse_files(dir.path(), "s", 2, 34 * MIB);
    let opts = CreateOptions { level: 5, chunk: 64 << 10, name: "live".into(), bitmap_region: Some(REGION), ..Default::default() };
    let mut arr = array::create(&specs(&files), &opts).unwrap();
    assert!(arr.superblock().live_map, "a new array with a bitmap has the live-data map");
    let vol = arr.volume().clone();
    let cap = vol.capacity();
    let logical_region = 3 * REGION;
    let regions = cap / logical_region;
    assert!(vol.read_at(0, MIB as usize).unwrap().iter().all(|&b| b == 0), "a fresh volume reads as zeros");
    assert_eq!(arr.status().volumes[0].live_bytes, Some(0));
    // A quarter of the logical regions, whole, at random, random data.
    let mut order: Vec<u64> = (0..regions).collect();
    order.shuffle(&mut rng);
    let chosen = &order[..(regions as usize).div_ceil(4)];
    let mut model = vec![0u8; cap as usize];
    for &r in chosen {
        let at = (r * logical_region) as usize;
        rng.fill_bytes(&mut model[at..at + logical_region as usize]);
        // In pieces of random sizes (sub-stripe writes too).
        let mut o = at;
        while o < at + logical_region as usize {
            let n = (rng.random_range(1..=64usize) * 4096).min(at + logical_region as usize - o);
            vol.write_at(o as u64, &model[o..o + n]).unwrap();
            o += n;
        }
    }
    vol.flush().unwrap();
    let live = arr.status().volumes[0].live_bytes.unwrap();
    assert_eq!(live, chosen.len() as u64 * logical_region, "live bytes after writing {} regions", chosen.len());
    assert_reads(&vol, &model, "before the failure");

    // Role 2 fails; the spare (full of garbage) is rebuilt.
    drop(vol);
    let r = fail_and_rebuild(&mut arr, 2, &spares[0]);
    let member = arr.volume().raid().geometry().member_size();
    assert_eq!(r.bytes_written, chosen.len() as u64 * REGION, "{r:?}");
    assert_eq!(r.bytes_written + r.bytes_skipped, member, "{r:?}");
    assert!(r.bytes_written * 100 / member <= 27, "a quarter written rebuilds about a quarter: {r:?}");
    let vol = arr.volume().clone();
    assert_reads(&vol, &model, "after the rebuild (garbage where nothing was written)");
    let c = arr.check(0, false, &mut |_, _| {}).unwrap();
    assert_eq!((c.mismatches, c.stripes_unchecked), (0, 0), "{c:?}");
    assert_eq!(c.bytes_checked, live, "check covers only the live data: {c:?}");
    assert_eq!(c.bytes_skipped + c.bytes_checked, cap - cap % (3 * 64 << 10), "{c:?}");

    // A write into a region never written: zeroed first on every member,
    // so its parity agrees (check) though the new member held garbage.
    let fresh = order[chosen.len()];
    let at = (fresh * logical_region + 3 * 4096) as usize;
    rng.fill_bytes(&mut model[at..at + 8192]);
    vol.write_at(at as u64, &model[at..at + 8192]).unwrap();
    assert_reads(&vol, &model, "after a first write into a region");
    assert_eq!(arr.check(0, false, &mut |_, _| {}).unwrap().mismatches, 0);

    // A discard of a whole written region: forgotten once idle, read as
    // zeros, and the next rebuild skips it.
    let gone = chosen[0];
    range_op(&vol, Op::Discard, gone * logical_region, logical_region as usize);
    let g = (gone * logical_region) as usize;
    model[g..g + logical_region as usize].fill(0);
    let bm = arr.bitmap().unwrap().clone();
    bm.clear_idle().unwrap();
    bm.clear_idle().unwrap();
    assert_eq!(bm.stats().forgotten, 1, "{:?}", bm.stats());
    assert_eq!(arr.status().volumes[0].live_bytes, Some(live), "one region gone, one new");
    assert_reads(&vol, &model, "after the discard");
    drop((vol, bm));
    let r2 = fail_and_rebuild(&mut arr, 0, &spares[1]);
    assert_eq!(r2.bytes_written, r.bytes_written, "one region discarded, one written: {r2:?}");
    let vol = arr.volume().clone();
    assert_reads(&vol, &model, "after the second rebuild");
    assert_eq!(arr.check(0, false, &mut |_, _| {}).unwrap().mismatches, 0);
    drop(vol);
    arr.stop().unwrap();

    // Assembled again: the map is read back from the members.
    let mut all = files.clone();
    all[2] = spares[0].clone();
    all[0] = spares[1].clone();
    let arr = array::assemble(&specs(&all)).unwrap();
    assert_eq!(arr.status().volumes[0].live_bytes, Some(live));
    assert_reads(arr.volume(), &model, "after assemble");
}

#[test]
fn sigkill_during_writes_leaves_no_acknowledged_write_in_a_region_not_live() {
    // The crash workload writes, FUA-writes, zeroes and discards over an
    // array with 4 MiB bitmap regions (the live-data map on): verify reads
    // back every acknowledged write and `check` finds no mismatch.
    let _g = shared();
    let mut rng = rng("sigkill_during_writes_leaves_no_acknowledged_write_in_a_region_not_live");
    for _ in 0..3 {
        let seed = rng.random::<u64>();
        let kill = rng.random_range(100..1500);
        crate::crash::one(5, 4, "off", seed, kill).unwrap_or_else(|e| panic!("seed {seed}, kill after {kill} ms: {e}"));
    }
}

/// Issue 33 on a declustered level: a discard of whole bitmap regions of a
/// draid5 volume whose rows hold two groups (2 data chunks + P each, a
/// distributed spare) forgets them in the live-data map: `status --json`'s
/// live bytes go down by those regions and stay down across an assemble,
/// the data outside the discard reads back. A region whose first row holds
/// a group outside the discard stays live. (Declustered volumes used to be
/// left out: their discards cleared nothing.)
#[test]
fn a_draid5_discard_of_whole_regions_clears_them_in_the_live_map() {
    let _g = shared();
    let mut rng = rng("a_draid5_discard_of_whole_regions_clears_them_in_the_live_map");
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "d", 8, 18 * MIB);
    let f = strs(&files);
    uraid_ok(&with(&["create", "--level", "draid5", "--data", "2", "--spares", "1", "--chunk", "64K", "--name", "dl", "--bitmap-region", "1M"], &f));
    let live_json = |f: &[&str]| -> u64 {
        let o = uraid_ok(&with(&["status", "--json"], f));
        let st: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        st["volumes"][0]["live_bytes"].as_u64().unwrap_or_else(|| panic!("no live bytes: {st}"))
    };
    let arr = array::assemble(&specs(&files)).unwrap();
    let vol = arr.volume().clone();
    let cap = vol.capacity();
    // A member region (1 MiB, 16 rows) holds 16 x 2 groups x 2 x 64 KiB.
    let logical_region = 4 * MIB;
    assert!(cap >= 4 * logical_region, "capacity {cap}");
    let mut model = vec![0u8; cap as usize];
    rng.fill_bytes(&mut model);
    for (i, part) in model.chunks(4 * MIB as usize).enumerate() {
        vol.write_at(i as u64 * 4 * MIB, part).unwrap();
    }
    vol.flush().unwrap();
    assert_eq!(arr.status().volumes[0].live_bytes, Some(cap), "written whole, all live");

    // From the second group of region 1's first row (so region 1 is not
    // whole) to the end of region 2, and a stripe into region 3.
    let (a, b) = (logical_region + (128 << 10), 3 * logical_region + (128 << 10));
    range_op(&vol, Op::Discard, a, (b - a) as usize);
    let bm = arr.bitmap().unwrap().clone();
    bm.clear_idle().unwrap();
    bm.clear_idle().unwrap();
    assert_eq!(bm.stats().forgotten, 1, "one region discarded whole: {:?}", bm.stats());
    let live = arr.status().volumes[0].live_bytes.unwrap();
    assert_eq!(live, cap - logical_region, "live bytes after the discard of region 2");
    model[2 * logical_region as usize..3 * logical_region as usize].fill(0);
    let back: Vec<u8> = (0..cap).step_by(4 * MIB as usize).flat_map(|at| vol.read_at(at, (cap - at).min(4 * MIB) as usize).unwrap()).collect();
    for (range, what) in [(0..a as usize, "before the discard"), (b as usize..cap as usize, "after the discard"), (2 * logical_region as usize..3 * logical_region as usize, "the forgotten region (zeros)")] {
        if let Some((off, n)) = first_difference(&back[range.clone()], &model[range.clone()]) {
            panic!("{what}: {n} bytes differ from the model at logical byte {}", range.start + off);
        }
    }
    drop((vol, bm));
    arr.stop().unwrap();
    assert_eq!(live_json(&f), live, "status --json after an assemble");
}
