//! `grow --add` (control/array/grow.rs): a volume restriped onto more
//! members reads back equal to a model, its parity checks clean, it
//! survives stop and assemble with the members in another order, and an
//! interrupted reshape (stopped after any number of windows, in the
//! critical section or past it) is finished by the next assemble.

use std::path::{Path, PathBuf};

use rand::{Rng, RngCore, SeedableRng};
use uraid_core::control::array::{self, CreateOptions, GrowOptions, LiveChange};
use uraid_core::MemberSpec;

fn files(dir: &Path, prefix: &str, n: usize, size: u64) -> Vec<MemberSpec> {
    (0..n)
        .map(|i| {
            let p: PathBuf = dir.join(format!("{prefix}{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            MemberSpec::Path(p)
        })
        .collect()
}

/// Creates a `level` array over `n` members of `size` bytes, fills it with
/// random data (the model), stops it; returns the specs and the model.
fn filled(dir: &Path, level: u32, n: usize, size: u64, chunk: u64, seed: u64) -> (Vec<MemberSpec>, Vec<u8>) {
    let specs = files(dir, "m", n, size);
    let opts = CreateOptions { level, chunk, name: "grow".into(), ..Default::default() };
    let a = array::create(&specs, &opts).unwrap();
    let cap = a.volume().raid().capacity();
    let mut model = vec![0u8; cap as usize];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut model);
    for (i, piece) in model.chunks(4 << 20).enumerate() {
        a.volume().write_at(i as u64 * (4 << 20), piece).unwrap();
    }
    a.volume().flush().unwrap();
    a.stop().unwrap();
    (specs, model)
}

/// Assembles `specs` (shuffled), checks the capacity, the model (the new
/// space reads as zeros) and, for parity levels, a clean check.
fn verify(specs: &[MemberSpec], model: &[u8], cap: u64, level: u32, seed: u64) {
    let mut shuffled = specs.to_vec();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.random_range(0..=i));
    }
    let a = array::assemble(&shuffled).unwrap();
    assert_eq!(a.volume().raid().capacity(), cap, "capacity after the reshape");
    let mut got = Vec::with_capacity(cap as usize);
    for at in (0..cap).step_by(4 << 20) {
        got.extend(a.volume().read_at(at, (cap - at).min(4 << 20) as usize).unwrap());
    }
    assert!(got[..model.len()] == *model, "the data moved: first difference at byte {:?}", got.iter().zip(model).position(|(a, b)| a != b));
    assert!(got[model.len()..].iter().all(|&b| b == 0), "the new space does not read as zeros");
    if level != 0 {
        let r = a.check(0, false, &mut |_, _| {}).unwrap();
        assert_eq!(r.mismatches, 0, "parity after the reshape: {r:?}");
        assert!(r.stripes_checked > 0);
    }
    a.stop().unwrap();
}

#[test]
fn raid0_5_6_grow_onto_more_members_and_keep_their_data() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        (0u32, 2usize, 1usize, 64u64 << 10),
        (5, 3, 1, 64 << 10),
        (5, 4, 2, 16 << 10),
        (6, 4, 1, 32 << 10),
        (0, 3, 3, 4 << 10),
        // RAID 10: an even member count to an odd one (copy pairs then
        // straddle rows) and odd to even.
        (10, 4, 1, 64 << 10),
        (10, 3, 1, 32 << 10),
        (10, 2, 2, 16 << 10),
    ];
    for (i, (level, n, k, chunk)) in cases.into_iter().enumerate() {
        let dir = d.path().join(format!("case{i}"));
        std::fs::create_dir(&dir).unwrap();
        let (specs, model) = filled(&dir, level, n, 24 << 20, chunk, i as u64);
        let add = files(&dir, "new", k, 24 << 20);
        let mut calls = 0;
        let rep = array::grow(&specs, &GrowOptions { add: add.clone(), ..Default::default() }, &mut |_, _| calls += 1).unwrap();
        assert_eq!(rep.members, (n as u32, (n + k) as u32));
        assert_eq!(rep.capacity.0, model.len() as u64);
        assert!(rep.capacity.1 > rep.capacity.0, "{rep:?}");
        assert!(rep.backed_up_rows > 0 && calls > 1, "{rep:?}");
        let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
        verify(&all, &model, rep.capacity.1, level, i as u64);
    }
}

#[test]
fn raid1_gains_a_copy_on_each_new_member() {
    let d = tempfile::tempdir().unwrap();
    let (specs, model) = filled(d.path(), 1, 2, 16 << 20, 64 << 10, 7);
    let add = files(d.path(), "new", 2, 16 << 20);
    let rep = array::grow(&specs, &GrowOptions { add: add.clone(), ..Default::default() }, &mut |_, _| {}).unwrap();
    assert_eq!(rep.members, (2, 4));
    assert_eq!(rep.capacity, (model.len() as u64, model.len() as u64));
    assert!(rep.bytes_written > 0, "{rep:?}");
    let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    let st = array::open(&all).unwrap().status();
    assert_eq!(st.members.iter().filter(|m| m.state == "active").count(), 4, "{:?}", st.members);
    verify(&all, &model, rep.capacity.1, 1, 7);
    // Each new member alone holds the whole volume: its copy reads back.
    let m = uraid_core::Member::open(&add[1], uraid_core::io::member::OpenMode { write: false, exclusive: false }).unwrap();
    let mut copy = uraid_core::IoBuf::new(4 << 20);
    m.read_exact_at(&mut copy, uraid_core::control::superblock::DATA_OFFSET).unwrap();
    assert!(copy[..] == model[..4 << 20], "the new copy differs");
}

#[test]
fn refusals_write_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (specs, _) = filled(d.path(), 5, 3, 8 << 20, 64 << 10, 1);
    let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    let small = files(d.path(), "small", 1, 2 << 20);
    let e = array::grow(&specs, &GrowOptions { add: small, ..Default::default() }, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("too small"), "{e}");
    let e = array::grow(&specs, &GrowOptions { add: vec![specs[1].clone()], ..Default::default() }, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");
    let e = array::grow(&specs, &GrowOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("--add"), "{e}");
    // A new device that holds something is refused without --force.
    let used = files(d.path(), "used", 1, 16 << 20);
    let mut sig = vec![0u8; 4096];
    sig[1080..1082].copy_from_slice(&[0x53, 0xef]); // the ext2/3/4 magic
    std::fs::write(used[0].to_string(), &sig).unwrap();
    std::fs::OpenOptions::new().write(true).open(used[0].to_string()).unwrap().set_len(16 << 20).unwrap();
    let e = array::grow(&specs, &GrowOptions { add: used, ..Default::default() }, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("--force"), "{e}");
    let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    assert!(before == after, "a refused grow changed a member");
}

/// What a reshape cannot do (yet) is refused before anything is written,
/// saying what to do: a Matrix array with a RAID 1 volume, a degraded
/// array, an array not stopped cleanly.
#[test]
fn arrays_a_reshape_cannot_take_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let refused = |specs: &[MemberSpec], what: &str, needle: &str| {
        let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
        let new = files(d.path(), &format!("new-{what}-"), 1, 16 << 20);
        let e = array::grow(specs, &GrowOptions { add: new.clone(), ..Default::default() }, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains(needle) && e.to_string().contains("Nothing was written"), "{what}: {e}");
        let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
        assert!(before == after, "{what}: the refused grow changed a member");
        assert!(std::fs::read(new[0].to_string()).unwrap().iter().all(|&b| b == 0), "{what}: the new device was written");
    };
    let mk = |prefix: &str, n: usize, opts: CreateOptions| {
        let specs = files(d.path(), prefix, n, 16 << 20);
        (specs.clone(), array::create(&specs, &opts).unwrap())
    };
    let vols = vec![
        array::VolumeSpec { name: "fast".into(), level: 0, size: Some(8 << 20), chunk: None },
        array::VolumeSpec { name: "copies".into(), level: 1, size: None, chunk: None },
    ];
    let (matrix, a) = mk("mx-", 3, CreateOptions { level: 5, name: "mx".into(), volumes: vols, ..Default::default() });
    a.stop().unwrap();
    refused(&matrix, "matrix", "adding members to a Matrix array with such a volume");
    let (deg, mut a) = mk("deg-", 3, CreateOptions { level: 5, name: "deg".into(), ..Default::default() });
    a.fail(1, false).unwrap();
    a.stop().unwrap();
    refused(&deg, "degraded", "in sync");
    let (dirty, a) = mk("dirty-", 3, CreateOptions { level: 5, name: "dirty".into(), ..Default::default() });
    // Let go without the clean stop: as after a crash.
    a.release();
    refused(&dirty, "unclean", "not stopped cleanly");
}

/// A reshape record `grow` never writes (here: on a RAID 1, whose layout
/// does not widen) is refused by assemble, which writes nothing.
#[test]
fn a_reshape_record_grow_did_not_write_is_refused() {
    use uraid_core::control::superblock::{Reshape, Superblock, SB_SIZE};
    let d = tempfile::tempdir().unwrap();
    let (specs, _) = filled(d.path(), 1, 2, 8 << 20, 64 << 10, 3);
    for s in &specs {
        let path = s.to_string();
        let mut bytes = std::fs::read(&path).unwrap();
        let mut sb = Superblock::decode(&bytes[..SB_SIZE]).unwrap();
        sb.reshape = Some(Reshape { old_members: 1, position: 0, backup: None, live: false, old_level: None, old_chunk: None, old_parity_last: false, volume: 0 });
        bytes[..SB_SIZE].copy_from_slice(&sb.encode());
        std::fs::write(&path, &bytes).unwrap();
    }
    let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    let e = array::assemble(&specs).unwrap_err();
    assert!(e.to_string().contains("a reshape this uraid did not write"), "{e}");
    let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    assert!(before == after, "the refused assemble changed a member");
}

/// A reshape of an assembled (served) array: a writer thread writes and
/// reads back through the reshaping volume while the windows move (its
/// reads must see its writes, whichever layout holds them), requests
/// straddle the position; pauses and goes on; at the end the array over
/// every member holds the model, checks clean and assembles again.
#[test]
fn a_served_array_is_reshaped_while_a_writer_writes() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        (5u32, 3usize, 1usize, 64u64 << 10, None, None),
        (6, 4, 2, 32 << 10, None, None),
        (0, 2, 1, 16 << 10, None, None),
        (10, 3, 1, 64 << 10, None, None),
        // And to another chunk size.
        (5, 3, 1, 64 << 10, Some(128u64 << 10), None),
        (6, 4, 1, 32 << 10, Some(8 << 10), None),
        // And over the same members.
        (5, 4, 0, 64 << 10, Some(128 << 10), None),
        (10, 3, 0, 32 << 10, Some(8 << 10), None),
        // And RAID 1 over 2 restriped as RAID 5 and RAID 10 over more.
        (1, 2, 1, 64 << 10, None, Some(5u32)),
        (1, 2, 2, 32 << 10, None, Some(10)),
    ];
    for (i, (level, n, k, chunk, new_chunk, to)) in cases.into_iter().enumerate() {
        let dir = d.path().join(format!("live{i}"));
        std::fs::create_dir(&dir).unwrap();
        let (specs, model) = filled(&dir, level, n, 40 << 20, chunk, 10 + i as u64);
        let add = files(&dir, "new", k, 40 << 20);
        let mut arr = array::assemble(&specs).unwrap();
        arr.activate().unwrap();
        let mut live = match arr.grow_live(&GrowOptions { add: add.clone(), chunk: new_chunk, level: to, ..Default::default() }, &mut || Ok(())).unwrap() {
            LiveChange::Reshape(l) => l,
            LiveChange::Converted(r) => panic!("a takeover: {r:?}"),
        };
        // The array is frozen: its membership cannot change meanwhile.
        assert!(arr.fail(0, true).is_err(), "a frozen array took a membership change");
        let model = step_with_a_writer(&mut live, model, 99 + i as u64, 64, 3);
        let rep = live.finish(&mut arr).unwrap();
        assert_eq!(rep.members, (n as u32, (n + k) as u32));
        assert_eq!(arr.volume().capacity(), rep.capacity.1);
        assert_eq!(arr.member_count() as usize, n + k);
        assert_eq!(arr.volume_entries()[0].chunk, new_chunk.unwrap_or(chunk));
        assert_eq!(arr.volume_entries()[0].level, to.unwrap_or(level));
        arr.stop().unwrap();
        let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
        verify(&all, &model, rep.capacity.1, to.unwrap_or(level), i as u64);
    }
}

/// `grow --size max` after every member was replaced by a larger one (here
/// the files grow): the volume grows into the room, its data stays where
/// it was, the new space reads as zeros, copies and parity check clean (the
/// bitmap, made again over the larger area, loads); then there is no more
/// room, and a size past it or not larger is refused.
#[test]
fn a_volume_grows_into_larger_members_and_keeps_its_data() {
    use uraid_core::control::array::NewSize;
    let d = tempfile::tempdir().unwrap();
    for (i, (level, n)) in [(5u32, 3usize), (1, 2), (10, 4), (6, 4), (0, 2)].into_iter().enumerate() {
        let dir = d.path().join(format!("size{i}"));
        std::fs::create_dir(&dir).unwrap();
        let (specs, model) = filled(&dir, level, n, 24 << 20, 64 << 10, 40 + i as u64);
        for (k, s) in specs.iter().enumerate() {
            // A larger drive that held something else: its new room is not
            // zeros, so the new area's copies and parity must be made.
            let MemberSpec::Path(p) = s else { unreachable!() };
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(40 << 20).unwrap();
            let mut junk = vec![0u8; 16 << 20];
            rand::rngs::StdRng::seed_from_u64(k as u64).fill_bytes(&mut junk);
            std::os::unix::fs::FileExt::write_all_at(&f, &junk, 24 << 20).unwrap();
        }
        let rep = array::resize(&specs, NewSize::Max, &mut |_, _| {}).unwrap();
        assert_eq!(rep.capacity.0, model.len() as u64, "{rep:?}");
        assert!(rep.capacity.1 > rep.capacity.0 * 3 / 2, "RAID {level}: {rep:?}");
        verify(&specs, &model, rep.capacity.1, level, i as u64);
        let e = array::resize(&specs, NewSize::Max, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("no more room"), "{e}");
        let e = array::resize(&specs, NewSize::Bytes(rep.capacity.1 * 2), &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("can hold at most"), "{e}");
    }
    // A Matrix array: the last volume grows by a size, the first keeps its data.
    let dir = d.path().join("matrix");
    std::fs::create_dir(&dir).unwrap();
    let specs = files(&dir, "x", 3, 40 << 20);
    let vols = vec![
        array::VolumeSpec { name: "fast".into(), level: 0, size: Some(12 << 20), chunk: None },
        array::VolumeSpec { name: "safe".into(), level: 5, size: Some(8 << 20), chunk: None },
    ];
    let a = array::create(&specs, &CreateOptions { level: 5, name: "mx".into(), volumes: vols, ..Default::default() }).unwrap();
    let data: Vec<u8> = (0..12 << 20).map(|i: u32| (i % 251) as u8).collect();
    a.volumes()[0].write_at(0, &data).unwrap();
    a.volumes()[1].write_at(0, &data[..8 << 20]).unwrap();
    a.stop().unwrap();
    let rep = array::resize(&specs, NewSize::Bytes(20 << 20), &mut |_, _| {}).unwrap();
    assert_eq!((rep.volume.as_str(), rep.capacity.0), ("safe", 8 << 20), "{rep:?}");
    assert!(rep.capacity.1 >= 20 << 20 && rep.capacity.1 < 21 << 20, "{rep:?}");
    let a = array::assemble(&specs).unwrap();
    assert_eq!(a.volumes()[0].read_at(0, 12 << 20).unwrap(), data);
    assert_eq!(a.volumes()[1].read_at(0, 8 << 20).unwrap(), data[..8 << 20]);
    assert!(a.volumes()[1].read_at(8 << 20, 12 << 20).unwrap().iter().all(|&b| b == 0));
    assert_eq!(a.check(1, false, &mut |_, _| {}).unwrap().mismatches, 0);
    a.stop().unwrap();
}

/// Level conversions (`--level`): RAID 1 over 2 members to RAID 10 and
/// back (the same bytes), RAID 1 over 2 restriped as RAID 5 over 3 and as
/// RAID 10 over 4, RAID 0 to RAID 10 with as many new members (each
/// rebuilt as a copy); the data reads back equal and checks
/// clean. Conversions that drop redundancy, or are not there yet, are
/// refused and write nothing.
#[test]
fn levels_convert_where_the_bytes_stay_in_place() {
    let d = tempfile::tempdir().unwrap();
    let conv = |specs: &[MemberSpec], add: &[MemberSpec], level: u32| {
        array::grow(specs, &GrowOptions { add: add.to_vec(), level: Some(level), ..Default::default() }, &mut |_, _| {})
    };
    // RAID 1 -> 10 and back (2 members: the same bytes), then 1 -> 5 with
    // a third member (restriped).
    let dir = d.path().join("r1");
    std::fs::create_dir(&dir).unwrap();
    let (specs, model) = filled(&dir, 1, 2, 24 << 20, 64 << 10, 50);
    let e = conv(&specs, &[], 5).unwrap_err().to_string();
    assert!(e.contains("RAID 5 needs 3 members or more"), "{e}");
    let rep = conv(&specs, &[], 10).unwrap();
    assert_eq!((rep.level, rep.members), (10, (2, 2)), "{rep:?}");
    verify(&specs, &model, model.len() as u64, 10, 1);
    conv(&specs, &[], 1).unwrap();
    verify(&specs, &model, model.len() as u64, 1, 2);
    let add = files(&dir, "new", 1, 24 << 20);
    let rep = conv(&specs, &add, 5).unwrap();
    assert_eq!((rep.level, rep.members), (5, (2, 3)), "{rep:?}");
    let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    verify(&all, &model, rep.capacity.1, 5, 3);
    assert_eq!(rep.capacity.1, 2 * model.len() as u64);
    // RAID 1 -> 10 (2 members) and onto 2 more.
    let dir = d.path().join("r10");
    std::fs::create_dir(&dir).unwrap();
    let (specs, model) = filled(&dir, 1, 2, 24 << 20, 32 << 10, 51);
    let add = files(&dir, "new", 2, 24 << 20);
    let rep = conv(&specs, &add, 10).unwrap();
    assert_eq!((rep.level, rep.members), (10, (2, 4)), "{rep:?}");
    let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    verify(&all, &model, rep.capacity.1, 10, 4);
    // RAID 0 -> 10 with as many new members: each a rebuilt copy.
    let dir = d.path().join("r0");
    std::fs::create_dir(&dir).unwrap();
    let (specs, model) = filled(&dir, 0, 3, 24 << 20, 64 << 10, 52);
    let e = conv(&specs, &files(&dir, "few", 2, 24 << 20), 10).unwrap_err().to_string();
    assert!(e.contains("give 3 new device(s)") && e.contains("Nothing was written"), "{e}");
    let add = files(&dir, "new", 3, 24 << 20);
    let rep = conv(&specs, &add, 10).unwrap();
    assert_eq!((rep.level, rep.members, rep.capacity.0), (10, (3, 6), model.len() as u64), "{rep:?}");
    let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    verify(&all, &model, model.len() as u64, 10, 5);
    // Member i is role 2i now: its copy is role 2i + 1; role 1 alone may go.
    let mut a = array::assemble(&all).unwrap();
    let st = a.status();
    assert_eq!(st.members[2].device.as_deref(), Some(all[1].to_string().as_str()), "{st:?}");
    a.fail(0, false).unwrap();
    for at in (0..model.len()).step_by(16 << 20) {
        let len = (model.len() - at).min(16 << 20);
        assert!(a.volume().read_at(at as u64, len).unwrap() == model[at..at + len], "role 0 failed: bytes {at}+{len} differ");
    }
    a.stop().unwrap();
    // Refused, nothing written: dropping redundancy, and what is not there yet.
    let dir = d.path().join("no");
    std::fs::create_dir(&dir).unwrap();
    let (specs, _) = filled(&dir, 6, 4, 16 << 20, 64 << 10, 53);
    let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    let e = conv(&specs, &[], 5).unwrap_err().to_string();
    assert!(e.contains("second parity") && e.contains("Nothing was written"), "{e}");
    let e = conv(&specs, &[], 0).unwrap_err().to_string();
    assert!(e.contains("would drop its parity"), "{e}");
    let e = conv(&specs, &files(&dir, "new", 1, 16 << 20), 10).unwrap_err().to_string();
    assert!(e.contains("not there yet") && e.contains("Nothing"), "{e}");
    let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    assert!(before == after, "a refused conversion changed a member");
}

/// RAID 0 -> 5 and RAID 5 -> 6 with one new member each (md's takeovers:
/// the new member keeps P, then Q; no data chunk moves): the data reads
/// back, checks clean, and survives losing the members the level allows;
/// a parity-last volume is not restriped (refused, nothing written).
#[test]
fn raid0_becomes_raid5_and_raid5_becomes_raid6_with_a_parity_member() {
    let d = tempfile::tempdir().unwrap();
    let (specs, model) = filled(d.path(), 0, 3, 24 << 20, 64 << 10, 60);
    let p = files(d.path(), "p", 1, 24 << 20);
    let rep = array::grow(&specs, &GrowOptions { add: p.clone(), level: Some(5), ..Default::default() }, &mut |_, _| {}).unwrap();
    assert_eq!((rep.level, rep.members, rep.capacity.0, rep.capacity.1), (5, (3, 4), model.len() as u64, model.len() as u64), "{rep:?}");
    let all: Vec<MemberSpec> = specs.iter().chain(&p).cloned().collect();
    verify(&all, &model, model.len() as u64, 5, 7);
    let q = files(d.path(), "q", 1, 24 << 20);
    let rep = array::grow(&all, &GrowOptions { add: q.clone(), level: Some(6), ..Default::default() }, &mut |_, _| {});
    // RAID 6 from a parity-last RAID 5 is not there yet; from a standard one it is.
    assert!(rep.unwrap_err().to_string().contains("not there yet"));
    let e = array::grow(&all, &GrowOptions { chunk: Some(128 << 10), ..Default::default() }, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("parity on its last member") && e.contains("Nothing was written"), "{e}");
    // Restriped onto one more member: into md's rotating layout.
    let rep = array::grow(&all, &GrowOptions { add: q.clone(), ..Default::default() }, &mut |_, _| {}).unwrap();
    assert_eq!((rep.level, rep.members, rep.capacity.1), (5, (4, 5), model.len() as u64 / 3 * 4), "{rep:?}");
    let all: Vec<MemberSpec> = all.iter().chain(&q).cloned().collect();
    verify(&all, &model, rep.capacity.1, 5, 17);
    let a = array::open(&all).unwrap();
    assert_eq!(a.volume_entries()[0].layout, 0, "the restriped volume is not in the rotating layout");
    a.release();
    let dir = d.path().join("r5");
    std::fs::create_dir(&dir).unwrap();
    let (specs, model) = filled(&dir, 5, 4, 24 << 20, 32 << 10, 61);
    let q = files(&dir, "q", 1, 24 << 20);
    let rep = array::grow(&specs, &GrowOptions { add: q.clone(), level: Some(6), ..Default::default() }, &mut |_, _| {}).unwrap();
    assert_eq!((rep.level, rep.members, rep.capacity.1), (6, (4, 5), model.len() as u64), "{rep:?}");
    let all: Vec<MemberSpec> = specs.iter().chain(&q).cloned().collect();
    verify(&all, &model, model.len() as u64, 6, 8);
    // Two members gone: RAID 6 reads every byte back.
    let mut a = array::assemble(&all).unwrap();
    a.fail(0, false).unwrap();
    a.fail(4, false).unwrap();
    for at in (0..model.len()).step_by(16 << 20) {
        let len = (model.len() - at).min(16 << 20);
        assert!(a.volume().read_at(at as u64, len).unwrap() == model[at..at + len], "two members failed: bytes {at}+{len} differ");
    }
    a.stop().unwrap();
}

/// `--chunk` with `--add`: the volume is restriped onto more members with
/// another chunk size, larger or smaller (RAID 0, 5, 6, 10); the data
/// reads back equal and checks clean. Without new members, or with a chunk
/// that does not divide the member size, it is refused and writes nothing.
#[test]
fn the_chunk_changes_while_the_volume_is_restriped_onto_more_members() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        (5u32, 3usize, 1usize, 64u64 << 10, 128u64 << 10),
        (0, 2, 1, 64 << 10, 4 << 10),
        (6, 4, 1, 16 << 10, 256 << 10),
        (10, 4, 2, 64 << 10, 32 << 10),
        // Over the same members: every window through the backup spread
        // past the bitmap on every member.
        (5, 4, 0, 64 << 10, 128 << 10),
        (0, 3, 0, 64 << 10, 16 << 10),
        (6, 5, 0, 32 << 10, 1 << 20),
        (10, 3, 0, 16 << 10, 64 << 10),
    ];
    for (i, (level, n, k, from, to)) in cases.into_iter().enumerate() {
        let dir = d.path().join(format!("chunk{i}"));
        std::fs::create_dir(&dir).unwrap();
        let (specs, model) = filled(&dir, level, n, 24 << 20, from, 70 + i as u64);
        let add = files(&dir, "new", k, 24 << 20);
        let rep = array::grow(&specs, &GrowOptions { add: add.clone(), chunk: Some(to), ..Default::default() }, &mut |_, _| {}).unwrap();
        assert_eq!(rep.members, (n as u32, (n + k) as u32), "{rep:?}");
        let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
        verify(&all, &model, rep.capacity.1, level, 9 + i as u64);
        let a = array::open(&all).unwrap();
        assert_eq!(a.volume_entries()[0].chunk, to);
        a.release();
    }
    let dir = d.path().join("refused");
    std::fs::create_dir(&dir).unwrap();
    // 23 MiB + 64 KiB of volume on each member: no whole number of 128 KiB chunks.
    let (specs, _) = filled(&dir, 5, 3, (24 << 20) + (64 << 10), 64 << 10, 80);
    let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    let e = array::grow(&specs, &GrowOptions { chunk: Some(128 << 10), ..Default::default() }, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("not a whole number of") && e.contains("Nothing was written"), "{e}");
    let add = files(&dir, "new", 1, (24 << 20) + (64 << 10));
    let e = array::grow(&specs, &GrowOptions { add, chunk: Some(128 << 10), ..Default::default() }, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("not a whole number of") && e.contains("Nothing was written"), "{e}");
    let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    assert!(before == after, "a refused chunk change changed a member");
    // RAID 0 over 8 members from 64K to 1M chunks over the same members:
    // a window is 8 MiB, more than the backup room past the bitmap holds.
    let dir = d.path().join("noroom");
    std::fs::create_dir(&dir).unwrap();
    let (specs, _) = filled(&dir, 0, 8, 8 << 20, 64 << 10, 81);
    let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    let e = array::grow(&specs, &GrowOptions { chunk: Some(1 << 20), ..Default::default() }, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("the room for it") && e.contains("(--add)") && e.contains("Nothing was written"), "{e}");
    let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    assert!(before == after, "a refused chunk change changed a member");
}

/// A takeover cut between its superblock writes (a crash after the new
/// superblock reached some members): here RAID 1 -> 10 over 2 members,
/// with member 0's superblock put back as it was before. The members
/// disagree on the level, one event apart; assemble takes the newer one
/// (md's one-event margin), says so, writes member 0's superblock again,
/// and the data reads back. Two events apart is still a stale member.
#[test]
fn a_takeover_cut_between_its_superblock_writes_assembles() {
    use std::os::unix::fs::FileExt;
    let d = tempfile::tempdir().unwrap();
    let (specs, model) = filled(d.path(), 1, 2, 24 << 20, 64 << 10, 90);
    let MemberSpec::Path(p0) = &specs[0] else { unreachable!() };
    let old_sb = |p: &PathBuf| {
        let mut b = vec![0u8; 4096];
        std::fs::File::open(p).unwrap().read_exact_at(&mut b, 0).unwrap();
        b
    };
    let put_back = |p: &PathBuf, b: &[u8]| std::fs::OpenOptions::new().write(true).open(p).unwrap().write_all_at(b, 0).unwrap();
    let before = old_sb(p0);
    let rep = array::grow(&specs, &GrowOptions { level: Some(10), ..Default::default() }, &mut |_, _| {}).unwrap();
    assert_eq!(rep.level, 10);
    put_back(p0, &before);
    let a = array::assemble(&[specs[1].clone(), specs[0].clone()]).unwrap();
    assert!(a.warnings().iter().any(|w| w.contains("missed the last superblock change")), "{:?}", a.warnings());
    assert_eq!(a.volume_entries()[0].level, 10);
    a.stop().unwrap();
    verify(&specs, &model, model.len() as u64, 10, 5);
    // Two changes behind: stale, refused.
    let before = old_sb(p0);
    array::grow(&specs, &GrowOptions { level: Some(1), ..Default::default() }, &mut |_, _| {}).unwrap();
    array::grow(&specs, &GrowOptions { level: Some(10), ..Default::default() }, &mut |_, _| {}).unwrap();
    put_back(p0, &before);
    let e = array::assemble(&specs).unwrap_err().to_string();
    assert!(e.contains("is stale"), "{e}");
}

/// `grow --size` cut between its superblock writes and its new bitmap:
/// the members' superblocks say the volume is larger while their bitmaps
/// still cover the old size (here put back as they were). Assemble takes
/// such a bitmap as every region written and dirty, writes it again at
/// the new size, and the volume reads back (its old bytes, then zeros)
/// and checks clean.
#[test]
fn a_resize_cut_before_its_new_bitmap_assembles() {
    use std::os::unix::fs::FileExt;
    use uraid_core::control::array::NewSize;
    let d = tempfile::tempdir().unwrap();
    let (specs, model) = filled(d.path(), 5, 3, 24 << 20, 64 << 10, 91);
    let paths: Vec<PathBuf> = specs.iter().map(|s| PathBuf::from(s.to_string())).collect();
    let area = |p: &PathBuf| {
        let mut b = vec![0u8; (1 << 20) - (64 << 10)];
        std::fs::File::open(p).unwrap().read_exact_at(&mut b, 64 << 10).unwrap();
        b
    };
    let bitmaps: Vec<Vec<u8>> = paths.iter().map(area).collect();
    for p in &paths {
        std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(40 << 20).unwrap();
    }
    let rep = array::resize(&specs, NewSize::Max, &mut |_, _| {}).unwrap();
    assert!(rep.capacity.1 > rep.capacity.0, "{rep:?}");
    for (p, b) in paths.iter().zip(&bitmaps) {
        std::fs::OpenOptions::new().write(true).open(p).unwrap().write_all_at(b, 64 << 10).unwrap();
    }
    array::assemble(&specs).unwrap().stop().unwrap();
    verify(&specs, &model, rep.capacity.1, 5, 6);
}

/// A Matrix array's growth cut in the middle of its second volume (the
/// progress callback panics there, unwinding out of the reshape after a
/// window was recorded, as a crash would leave it) is finished by the next
/// assemble, which goes on with that volume and the one after; every
/// volume keeps its bytes.
#[test]
fn a_matrix_growth_cut_in_its_second_volume_is_finished_by_the_next_assemble() {
    let d = tempfile::tempdir().unwrap();
    let (specs, models) = matrix(d.path(), 96);
    let add = files(d.path(), "new", 1, 40 << 20);
    let mut seen = Vec::new();
    let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        array::grow(&specs, &GrowOptions { add: add.clone(), ..Default::default() }, &mut |_, total| {
            if seen.last() != Some(&total) {
                seen.push(total);
            }
            if seen.len() == 2 {
                panic!("cut in the second volume");
            }
        })
    }));
    assert!(cut.is_err(), "the growth was not cut");
    let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    let a = array::assemble(&all).unwrap();
    assert!(a.warnings().iter().any(|w| w.contains("went on from there")), "{:?}", a.warnings());
    assert_eq!(a.member_count(), 5);
    check_matrix(&a, &models);
    a.stop().unwrap();
}

/// A Matrix array over 4 files of 40 MiB in `dir`: RAID 0 (24 MiB, 16K
/// chunks), RAID 5 (36 MiB) and RAID 10 (the rest, 32K chunks), each
/// volume filled with random bytes (returned per volume).
fn matrix(dir: &Path, seed: u64) -> (Vec<MemberSpec>, Vec<Vec<u8>>) {
    use rand::RngCore;
    let specs = files(dir, "mx", 4, 40 << 20);
    let vols = vec![
        array::VolumeSpec { name: "fast".into(), level: 0, size: Some(24 << 20), chunk: Some(16 << 10) },
        array::VolumeSpec { name: "safe".into(), level: 5, size: Some(36 << 20), chunk: None },
        array::VolumeSpec { name: "both".into(), level: 10, size: None, chunk: Some(32 << 10) },
    ];
    let a = array::create(&specs, &CreateOptions { level: 5, chunk: 64 << 10, name: "mx".into(), volumes: vols, ..Default::default() }).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut models = Vec::new();
    for v in a.volumes() {
        let mut data = vec![0u8; v.capacity() as usize];
        rng.fill_bytes(&mut data);
        for at in (0..data.len()).step_by(4 << 20) {
            let end = (at + (4 << 20)).min(data.len());
            v.write_at(at as u64, &data[at..end]).unwrap();
        }
        models.push(data);
    }
    a.stop().unwrap();
    (specs, models)
}

/// Every volume of `a` grew and holds its model, then zeros; the
/// redundant ones check clean.
fn check_matrix(a: &array::Array, models: &[Vec<u8>]) {
    for (i, (v, model)) in a.volumes().iter().zip(models).enumerate() {
        let cap = v.capacity() as usize;
        assert!(cap > model.len(), "volume {i} did not grow: {cap} bytes");
        let got = v.read_at(0, cap).unwrap();
        assert!(got[..model.len()] == model[..], "volume {i}: the data moved: first difference at {:?}", got.iter().zip(model).position(|(a, b)| a != b));
        assert!(got[model.len()..].iter().all(|&b| b == 0), "volume {i}: the new space does not read as zeros");
        if a.volume_entries()[i].level != 0 {
            let r = a.check(i, false, &mut |_, _| {}).unwrap();
            assert_eq!(r.mismatches, 0, "volume {i}: {r:?}");
        }
    }
}

/// A Matrix array (RAID 0, RAID 5 and RAID 10 volumes over the same 4
/// members) gains 2 members: every volume is restriped onto all 6 in turn,
/// each keeps its bytes (the new space reads as zeros) and checks clean,
/// and the array assembles in another order. A level or chunk change of
/// such an array is refused, writing nothing.
#[test]
fn a_matrix_array_gains_members_and_every_volume_is_restriped() {
    let d = tempfile::tempdir().unwrap();
    let (specs, models) = matrix(d.path(), 95);
    let before: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    for opts in [GrowOptions { level: Some(6), add: files(d.path(), "x", 1, 40 << 20), ..Default::default() }, GrowOptions { chunk: Some(128 << 10), ..Default::default() }] {
        let e = array::grow(&specs, &opts, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("Matrix") && e.contains("Nothing was written"), "{e}");
    }
    let after: Vec<Vec<u8>> = specs.iter().map(|s| std::fs::read(s.to_string()).unwrap()).collect();
    assert!(before == after, "a refused Matrix grow changed a member");
    let add = files(d.path(), "new", 2, 40 << 20);
    let rep = array::grow(&specs, &GrowOptions { add: add.clone(), ..Default::default() }, &mut |_, _| {}).unwrap();
    assert_eq!((rep.members, rep.volumes), ((4, 6), 3), "{rep:?}");
    let mut all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    all.reverse();
    let a = array::assemble(&all).unwrap();
    assert!(a.superblock().reshape.is_none());
    check_matrix(&a, &models);
    a.stop().unwrap();
}

/// A served Matrix array gains a member: a writer writes and reads back
/// through the first volume (the exported one) while it is restriped, the
/// reshape pauses and goes on, then the other volumes are restriped in
/// turn; at the end every volume holds its bytes (the first one the
/// writer's too) and checks clean.
#[test]
fn a_served_matrix_array_gains_a_member() {
    let d = tempfile::tempdir().unwrap();
    let (specs, mut models) = matrix(d.path(), 97);
    let add = files(d.path(), "new", 1, 40 << 20);
    let mut arr = array::assemble(&specs).unwrap();
    arr.activate().unwrap();
    let mut live = match arr.grow_live(&GrowOptions { add: add.clone(), ..Default::default() }, &mut || Ok(())).unwrap() {
        LiveChange::Reshape(l) => l,
        LiveChange::Converted(r) => panic!("a takeover: {r:?}"),
    };
    models[0] = step_with_a_writer(&mut live, models[0].clone(), 98, 16, 2);
    let rep = live.finish(&mut arr).unwrap();
    assert_eq!((rep.members, rep.volumes), ((4, 5), 3), "{rep:?}");
    arr.stop().unwrap();
    let all: Vec<MemberSpec> = specs.iter().chain(&add).cloned().collect();
    let a = array::assemble(&all).unwrap();
    check_matrix(&a, &models);
    a.stop().unwrap();
}

/// Runs the served reshape `live` to its end while a writer thread writes
/// random runs of 4 KiB blocks (1 to `max_blocks`) through its volume and
/// reads each back (its reads must see its writes, whichever layout holds
/// them), at least 50 of them: the reshape pauses after `pause_after`
/// windows and goes on. Returns `model` with the writes laid over it.
fn step_with_a_writer(live: &mut array::LiveGrow, mut model: Vec<u8>, seed: u64, max_blocks: usize, pause_after: usize) -> Vec<u8> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use uraid_core::BlockQueue;
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (vol, done) = (live.volume().clone(), done.clone());
        std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut q = vol.queue(4).unwrap();
            let cap = vol.capacity();
            let mut writes = 0;
            while !done.load(Ordering::Relaxed) || writes < 50 {
                let len = rng.random_range(1..=max_blocks) * 4096;
                let at = rng.random_range(0..(cap - len as u64) / 4096) * 4096;
                let mut data = vec![0u8; len];
                rng.fill_bytes(&mut data);
                q.write_at(at, &data).unwrap();
                model[at as usize..at as usize + len].copy_from_slice(&data);
                assert!(q.read_at(at, len).unwrap() == data, "a read after a write at {at}+{len} differs");
                writes += 1;
            }
            q.flush().unwrap();
            model
        })
    };
    let stop = AtomicBool::new(false);
    let mut windows = 0;
    let paused = live
        .step(None, &stop, &mut |_, _| {
            windows += 1;
            if windows == pause_after {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
    assert!(!paused, "the reshape did not pause");
    stop.store(false, Ordering::Relaxed);
    assert!(live.step(None, &stop, &mut |_, _| {}).unwrap());
    done.store(true, Ordering::Relaxed);
    writer.join().unwrap()
}
