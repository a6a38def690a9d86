//! `uraid examine` and `uraid assemble` output after `uraid create`: the
//! fields of every superblock (also decoded here from the raw bytes, by the
//! documented format), assembly from any order, and the event counter.

use std::path::PathBuf;

use rand::seq::SliceRandom;
use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;

fn examine_json(paths: &[&str]) -> Value {
    let mut args = vec!["examine", "--json"];
    args.extend_from_slice(paths);
    let o = uraid_ok(&args);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("examine --json printed no JSON ({e}):\n{}", o.stdout))
}

fn uuid_of(v: &Value) -> Vec<u8> {
    v.as_array().unwrap_or_else(|| panic!("not a UUID: {v}")).iter().map(|x| x.as_u64().unwrap() as u8).collect()
}

#[test]
fn examine_and_assemble_after_create() {
    let _g = shared();
    let mut rng = rng("examine_and_assemble_after_create");
    let dir = tmpdir();
    let files: Vec<PathBuf> = sparse_files(dir.path(), "m", 3, 8 * MIB);
    let f: Vec<&str> = files.iter().map(|p| s(p)).collect();
    let o = uraid_ok(&["create", "--level", "0", "--chunk", "64K", "--name", "e2e-examine", f[0], f[1], f[2]]);
    assert_contains(&o.stdout, &["created array 'e2e-examine'", "RAID 0 over 3 members", "chunk 64K", &format!("capacity {} bytes", 21 * MIB)], "create");

    let j = examine_json(&f);
    let list = j.as_array().expect("examine --json prints a list");
    assert_eq!(list.len(), 3);
    let member_uuids: Vec<Vec<u8>> = list.iter().map(|e| uuid_of(&e["superblock"]["member_uuid"])).collect();
    for (i, e) in list.iter().enumerate() {
        let sb = &e["superblock"];
        assert_eq!(e["member"], f[i], "{e}");
        assert_eq!(sb["name"], "e2e-examine", "{e}");
        // One volume named like the array, over all the space from 1 MiB on.
        let vols = sb["volumes"].as_array().expect("a volume table");
        assert_eq!(vols.len(), 1, "{e}");
        assert_eq!(vols[0]["name"], "e2e-examine", "{e}");
        assert_eq!(vols[0]["level"], 0, "{e}");
        assert_eq!(vols[0]["chunk"], 65536, "{e}");
        assert_eq!(vols[0]["member_start"], MIB, "{e}");
        assert_eq!(vols[0]["member_size"], 7 * MIB, "{e}");
        assert_eq!(vols[0]["cache_mode"], 0, "{e}");
        assert_eq!(sb["member_count"], 3, "{e}");
        assert_eq!(sb["slot"], i, "{e}");
        assert_eq!(sb["bitmap_region"], 0, "RAID 0 has no bitmap: {e}");
        assert_eq!(sb["state"], "Clean", "create stops the array cleanly: {e}");
        assert_eq!(sb["array_uuid"], list[0]["superblock"]["array_uuid"], "one array UUID");
        let slots = sb["slots"].as_array().unwrap();
        let table: Vec<Vec<u8>> = slots.iter().map(|s| uuid_of(&s["uuid"])).collect();
        assert_eq!(table, member_uuids, "role table of member {i}");
        assert!(slots.iter().all(|s| s["state"] == "Active" && s["recovery_offset"].is_null()), "{e}");
        // The same fields straight from the bytes on the member.
        let raw = raw_superblock(&files[i]);
        assert_eq!((raw.version, raw.sb_size), (2, 4096));
        assert_eq!(raw.name, "e2e-examine");
        assert_eq!((raw.member_count, raw.slot, raw.state, raw.bitmap_region), (3, i as u32, 0, 0));
        assert_eq!(raw.volumes.len(), 1);
        let v = &raw.volumes[0];
        assert_eq!((v.name.as_str(), v.level, v.chunk, v.member_start, v.member_size, v.cache_mode), ("e2e-examine", 0, 65536, MIB, 7 * MIB, 0));
        assert_eq!(v.uuid.to_vec(), uuid_of(&vols[0]["uuid"]));
        assert_eq!(raw.slots.iter().map(|s| s.uuid.to_vec()).collect::<Vec<_>>(), member_uuids);
        assert!(raw.slots.iter().all(|s| s.state == 0 && s.recovery == u64::MAX), "{:?}", raw.slots);
        assert_eq!(raw.events, sb["events"].as_u64().unwrap());
        assert_eq!(raw.array_uuid.to_vec(), uuid_of(&sb["array_uuid"]));
        assert_eq!(raw.member_uuid.to_vec(), member_uuids[i]);
    }
    let mut distinct = member_uuids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "member UUIDs are not distinct");

    // Examine in another order reports each member's own role.
    let j = examine_json(&[f[2], f[0]]);
    assert_eq!((j[0]["member"].as_str(), j[0]["superblock"]["slot"].as_u64()), (Some(f[2]), Some(2)));
    assert_eq!((j[1]["member"].as_str(), j[1]["superblock"]["slot"].as_u64()), (Some(f[0]), Some(0)));
    // The text form.
    let o = uraid_ok(&["examine", f[1]]);
    assert_contains(&o.stdout, &["name : e2e-examine", "version 2", "volume 0 : 'e2e-examine' raid0, chunk 64K", "members : 3", "this member : role 1", "state : Clean", "role 2 : active"], "examine");

    // Assemble from every order: roles come from the superblocks, and the
    // event counter moves on each time.
    let mut events = raw_superblock(&files[0]).events;
    let array_uuid = raw_superblock(&files[0]).array_uuid;
    let mut orders: Vec<Vec<usize>> = vec![vec![2, 1, 0], vec![1, 2, 0], vec![0, 1, 2]];
    let mut r: Vec<usize> = (0..3).collect();
    r.shuffle(&mut rng);
    orders.push(r);
    for order in orders {
        let given: Vec<&str> = order.iter().map(|&i| f[i]).collect();
        let mut args = vec!["assemble", "--json"];
        args.extend_from_slice(&given);
        let o = uraid_ok(&args);
        let a: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("assemble --json: {e}: {}", o.stdout));
        assert_eq!(a["name"], "e2e-examine");
        assert_eq!(a["level"], 0);
        assert_eq!(a["chunk"], 65536);
        assert_eq!(a["capacity"], 21 * MIB);
        let roles: Vec<(u64, String)> = a["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_u64().unwrap(), m["member"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(roles, (0..3).map(|i| (i as u64, f[i].to_string())).collect::<Vec<_>>(), "roles when given in order {order:?}");
        let during = a["events"].as_u64().unwrap();
        assert!(during > events, "order {order:?}: assemble reported events {during}, not above {events}");
        let j = examine_json(&f);
        for (i, e) in j.as_array().unwrap().iter().enumerate() {
            let now = e["superblock"]["events"].as_u64().unwrap();
            assert!(now >= during && now > events, "member {i}: events {now} after an assemble that reported {during} (before: {events})");
            assert_eq!(now, j[0]["superblock"]["events"].as_u64().unwrap(), "members disagree on events");
            assert_eq!(e["superblock"]["state"], "Clean", "assemble's stop marks the array clean");
            assert_eq!(raw_superblock(&files[i]).array_uuid, array_uuid);
        }
        events = j[0]["superblock"]["events"].as_u64().unwrap();
    }
    // The text form of assemble.
    let o = uraid_ok(&["assemble", f[1], f[2], f[0]]);
    assert_contains(&o.stdout, &["assembled array 'e2e-examine'", &format!("role 0: {}", f[0]), &format!("role 2: {}", f[2])], "assemble");
}

#[test]
fn examine_non_members() {
    let _g = shared();
    let dir = tmpdir();
    let empty = sparse_file(dir.path(), "empty", 8 * MIB);
    let ext4 = sparse_file(dir.path(), "ext4", 16 * MIB);
    mkfs_ext4(&ext4);
    let snap = Snapshot::take(&[&empty, &ext4]);
    let j = examine_json(&[s(&empty), s(&ext4)]);
    assert_eq!(j[0]["member"], s(&empty));
    assert!(j[0]["holds"].is_null() && j[0].get("superblock").is_none(), "{j}");
    assert_eq!(j[1]["holds"], "an ext2/ext3/ext4 filesystem", "{j}");
    let o = uraid_ok(&["examine", s(&empty), s(&ext4)]);
    assert_contains(&o.stdout, &["no uraid superblock, no known signature", "holds an ext2/ext3/ext4 filesystem"], "examine");
    let missing = dir.path().join("missing");
    uraid_fails(&["examine", s(&missing)], &["cannot open member", "missing"]);
    snap.assert_unchanged("examine");
}
