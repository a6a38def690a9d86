//! Tests of the superblock codec: round trips (with volumes, spares, a
//! checkpoint, a reshape, a journal on a member), every flipped bit caught,
//! refused versions, impossible fields named, names, the event counter.

use super::*;

fn volume(name: &str, level: u32, chunk: u64, start: u64, size: u64) -> VolumeEntry {
    VolumeEntry { name: name.into(), uuid: new_uuid(), level, chunk, member_start: start, member_size: size, cache_mode: 0, cache_size_mib: 0, dirty_limit_mib: 0, journal_uuid: [0; 16], journal_lost: false, journal_region: None, layout: 0, draid: None }
}

fn sample() -> Superblock {
    Superblock {
        array_uuid: new_uuid(),
        member_uuid: [7; 16],
        name: "fast".into(),
        member_count: 3,
        slot: 1,
        ctime: 1,
        utime: 2,
        events: 3,
        state: State::Active,
        bitmap_region: 64 << 20,
        live_map: false,
        slots: vec![
            Slot { uuid: [1; 16], state: MemberState::Active, resync_from_bitmap: false, recovery_offset: None },
            Slot { uuid: [7; 16], state: MemberState::Rebuilding, resync_from_bitmap: true, recovery_offset: Some(5 << 20) },
            Slot { uuid: [0; 16], state: MemberState::Missing, resync_from_bitmap: false, recovery_offset: None },
            Slot { uuid: [9; 16], state: MemberState::Spare, resync_from_bitmap: false, recovery_offset: None },
        ],
        volumes: vec![
            volume("speed", 0, 128 << 10, DATA_OFFSET, 256 << 20),
            volume("safe", 5, 64 << 10, DATA_OFFSET + (256 << 20), 512 << 20),
        ],
        reshape: None,
    }
}

#[test]
fn a_reshape_record_roundtrips_as_version_3() {
    let mut s = sample();
    s.reshape = Some(Reshape { old_members: 2, position: 3 << 20, backup: None, live: true, old_level: Some(1), old_chunk: Some(64 << 10), old_parity_last: true, volume: 0 });
    let b = s.encode();
    assert_eq!(u32_at(&b, 8), VERSION_RESHAPE);
    assert_eq!(Superblock::decode(&b).unwrap(), s);
    s.reshape = Some(Reshape { old_members: 2, position: 3 << 20, live: false, old_level: None, old_chunk: None, old_parity_last: false, volume: 0, backup: Some(ReshapeBackup { len: 1 << 20, crc: 7, role: 2, offset: 900 << 20 }) });
    assert_eq!(Superblock::decode(&s.encode()).unwrap(), s);
    // Back to version 2 when it ends.
    s.reshape = None;
    assert_eq!(u32_at(&s.encode(), 8), VERSION);
    // A record that cannot be right: from as many members as after.
    s.reshape = Some(Reshape { old_members: 3, position: 0, backup: None, live: false, old_level: None, old_chunk: None, old_parity_last: false, volume: 0 });
    assert!(matches!(Superblock::decode(&s.encode()), Err(DecodeError::Invalid(_))));
}

#[test]
fn roundtrip_with_volume_table_spares_and_checkpoint() {
    let s = sample();
    let d = Superblock::decode(&s.encode()).unwrap();
    assert_eq!(d, s);
    assert_eq!(d.roles().len(), 3);
    assert_eq!(d.spares().len(), 1);
    assert!(!d.is_spare());
    assert_eq!(d.data_end(), DATA_OFFSET + (768 << 20));
    // Field positions as the format table gives them.
    let b = s.encode();
    assert_eq!(u32_at(&b, 8), 2);
    assert_eq!(u32_at(&b, 84), 4);
    assert_eq!(b[SLOTS_AT + SLOT_SIZE + 16], MemberState::Rebuilding as u8);
    assert_eq!(u64_at(&b, SLOTS_AT + SLOT_SIZE + 24), 5 << 20);
    assert_eq!(u64_at(&b, SLOTS_AT + 24), u64::MAX);
    assert_eq!(u32_at(&b, VOLUMES_AT + VOLUME_SIZE + 48), 5);
    assert_eq!(u64_at(&b, VOLUMES_AT + VOLUME_SIZE + 56), DATA_OFFSET + (256 << 20));
    // A spare's own superblock.
    let mut sp = s.clone();
    sp.slot = 3;
    sp.member_uuid = [9; 16];
    let d = Superblock::decode(&sp.encode()).unwrap();
    assert!(d.is_spare());
    assert!(d.same_layout(&s));
}

#[test]
fn every_flipped_bit_is_caught() {
    let b = sample().encode();
    for i in (0..SB_SIZE).step_by(7).chain([80, 88, 256 + 16, 1536 + 48, 4092]) {
        let mut c = b;
        c[i] ^= 0x10;
        assert!(Superblock::decode(&c).is_err(), "flip at byte {i} not detected");
    }
}

fn reseal(b: &mut [u8; SB_SIZE]) {
    let crc = crc32c::crc32c(&b[..CRC_AT]);
    b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn version_1_is_refused_clearly() {
    let mut b = sample().encode();
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    reseal(&mut b);
    let e = Superblock::decode(&b).unwrap_err();
    assert_eq!(e, DecodeError::Version(1));
    let msg = e.to_string();
    assert!(msg.contains("version 1") && msg.contains("older uraid") && msg.contains("create the array again"), "{msg}");
    b[8..12].copy_from_slice(&5u32.to_le_bytes());
    reseal(&mut b);
    assert!(Superblock::decode(&b).unwrap_err().to_string().contains("newer"));
}

#[test]
fn the_live_map_feature_round_trips_as_version_4_and_bad_bits_are_refused() {
    let mut sb = sample();
    sb.live_map = true;
    let b = sb.encode();
    assert_eq!((u32_at(&b, 8), u32_at(&b, 124)), (super::VERSION_LIVE_MAP, 1));
    assert_eq!(Superblock::decode(&b).unwrap(), sb);
    // Unknown feature bits, the map without a bitmap or in a version 3
    // superblock: refused, named.
    for (at, v, what) in [(124, 3u32, "feature flags"), (8, 3, "live-data map")] {
        let mut c = b;
        c[at..at + 4].copy_from_slice(&v.to_le_bytes());
        reseal(&mut c);
        let e = Superblock::decode(&c).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
    let mut c = b;
    c[128..136].copy_from_slice(&0u64.to_le_bytes());
    reseal(&mut c);
    assert!(Superblock::decode(&c).unwrap_err().to_string().contains("live-data map"));
}

type Damage = Box<dyn Fn(&mut [u8; SB_SIZE])>;

#[test]
fn impossible_fields_are_named() {
    let cases: Vec<(Damage, &str)> = vec![
        (Box::new(|b| b[80..84].copy_from_slice(&0u32.to_le_bytes())), "member count"),
        (Box::new(|b| b[84..88].copy_from_slice(&20u32.to_le_bytes())), "slot count"),
        (Box::new(|b| b[88..92].copy_from_slice(&4u32.to_le_bytes())), "slot 4"),
        (Box::new(|b| b[92..96].copy_from_slice(&9u32.to_le_bytes())), "volume count"),
        (Box::new(|b| b[SLOTS_AT + 16] = 9), "state 9 of slot 0"),
        (Box::new(|b| b[SLOTS_AT + 16] = MemberState::Spare as u8), "slot 0 is spare"),
        (Box::new(|b| b[VOLUMES_AT + 48] = 7), "level 7"),
        (Box::new(|b| b[VOLUMES_AT + VOLUME_SIZE + 48] = 6), "RAID 6 over 3"),
        (Box::new(|b| b[VOLUMES_AT + 52..VOLUMES_AT + 56].copy_from_slice(&3000u32.to_le_bytes())), "chunk size 3000"),
        (
            Box::new(|b| b[VOLUMES_AT + VOLUME_SIZE + 56..VOLUMES_AT + VOLUME_SIZE + 64].copy_from_slice(&(DATA_OFFSET + 4096).to_le_bytes())),
            "member start",
        ),
        (Box::new(|b| b[128..136].copy_from_slice(&5000u64.to_le_bytes())), "bitmap region"),
        (Box::new(|b| b[32] ^= 1), "another member UUID"),
    ];
    for (f, needle) in cases {
        let mut b = sample().encode();
        f(&mut b);
        reseal(&mut b);
        let e = Superblock::decode(&b).unwrap_err();
        assert!(matches!(e, DecodeError::Invalid(_)) && e.to_string().contains(needle), "{needle}: {e}");
    }
}

/// `sample()` with volume "safe" in journal mode, its journal on role 2
/// at the given region.
fn with_member_journal(start: u64, size: u64) -> Superblock {
    let mut s = sample();
    let v = &mut s.volumes[1];
    v.cache_mode = crate::cache::CacheMode::Journal.to_u8();
    v.journal_uuid = [5; 16];
    v.journal_region = Some(JournalRegion { role: 2, start, size });
    s
}

#[test]
fn a_journal_on_a_member_roundtrips_and_must_lie_past_the_volumes() {
    let end = DATA_OFFSET + (768 << 20);
    let s = with_member_journal(end, 80 << 20);
    let b = s.encode();
    assert_eq!(Superblock::decode(&b).unwrap(), s);
    let o = VOLUMES_AT + VOLUME_SIZE;
    assert_eq!((u32_at(&b, o + 100), u64_at(&b, o + 104), u64_at(&b, o + 112)), (3, end, 80 << 20));
    assert_eq!(s.used_end(), end + (80 << 20));
    assert_eq!(s.data_end(), end);
    // A journal device of its own lost while running: byte 73, bit 0.
    let mut lost = s.clone();
    lost.volumes[0].cache_mode = crate::cache::CacheMode::Journal.to_u8();
    lost.volumes[0].journal_lost = true;
    let bl = lost.encode();
    assert_eq!(bl[VOLUMES_AT + 73], 1);
    assert_eq!(Superblock::decode(&bl).unwrap(), lost);
    // Leaving the journal mode drops the region and the lost mark.
    let mut v = s.volumes[1].clone();
    v.journal_lost = true;
    v.set_cache_config(&crate::cache::CacheConfig::default());
    assert_eq!((v.journal_region, v.journal_uuid, v.journal_lost), (None, [0; 16], false));
    for (bad, why) in [
        (with_member_journal(end - (1 << 20), 80 << 20), "overlaps a volume"),
        (with_member_journal(end, 1 << 20), "smaller than a journal"),
        (with_member_journal(end + 512, 80 << 20), "not 4 KiB aligned"),
        ({
            let mut s = with_member_journal(end, 80 << 20);
            s.volumes[1].journal_region.as_mut().unwrap().role = 3;
            s
        }, "a spare slot, not a role"),
        ({
            let mut s = with_member_journal(end, 80 << 20);
            s.volumes[1].cache_mode = 2;
            s
        }, "not in journal mode"),
        ({
            let mut s = with_member_journal(end, 80 << 20);
            s.volumes[0].cache_mode = crate::cache::CacheMode::Journal.to_u8();
            s.volumes[0].journal_region = Some(JournalRegion { role: 0, start: end + (40 << 20), size: 80 << 20 });
            s
        }, "overlaps the other journal"),
    ] {
        let e = Superblock::decode(&bad.encode()).unwrap_err();
        assert!(e.to_string().contains("journal region of volume"), "{why}: {e}");
    }
}

#[test]
fn names_are_checked_on_read_as_on_create() {
    for bad in ["../../etc/x", "a b", "a;rm -rf /", ""] {
        let mut sb = sample();
        sb.name = bad.into();
        let mut b = sb.encode();
        // encode truncates to 32 bytes but writes what it is given.
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        let e = Superblock::decode(&b).expect_err(bad);
        assert!(e.to_string().contains("array name"), "{bad}: {e}");
        let mut sb = sample();
        sb.volumes[0].name = if bad.is_empty() { "x/y".into() } else { bad.into() };
        let e = Superblock::decode(&sb.encode()).expect_err(bad);
        assert!(e.to_string().contains("name of volume 0"), "{bad}: {e}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// Arbitrary bytes, and valid superblocks with bytes changed and the
    /// checksum made right again, decode or give an error: never a
    /// panic.
    #[test]
    fn decode_never_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..SB_SIZE + 64),
                           flips in proptest::collection::vec((0..SB_SIZE, proptest::prelude::any::<u8>()), 1..24)) {
        let _ = Superblock::decode(&raw);
        let mut b = sample().encode();
        for (at, v) in flips {
            if !(CRC_AT..CRC_AT + 4).contains(&at) {
                b[at] = v;
            }
        }
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        let _ = Superblock::decode(&b);
    }
}

#[test]
fn the_event_counter_never_wraps() {
    let mut sb = sample();
    sb.events = u64::MAX - 1;
    sb.next_event().unwrap();
    assert_eq!(sb.events, u64::MAX);
    let e = sb.next_event().unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::OutOfRange);
    assert!(e.to_string().contains("event counter") && e.to_string().contains("18446744073709551615"), "{e}");
    assert_eq!(sb.events, u64::MAX, "unchanged");
}

#[test]
fn names_and_uuids() {
    assert!(check_name("fast-0.a_b").is_ok());
    assert!(check_name("").is_err());
    assert!(check_name("a b").is_err());
    assert!(check_name(&"x".repeat(33)).is_err());
    assert!(check_name_of("volume", "a/b").unwrap_err().to_string().contains("volume name 'a/b'"));
    let u = new_uuid();
    assert_eq!(fmt_uuid(&u).len(), 36);
    assert_eq!(u[6] >> 4, 4);
}

/// Issue 33: a declustered volume's D, S and layout version round-trip
/// (as version 3, bytes 120..123 of its entry); a superblock without one
/// keeps version 2 and zeros there; impossible declustered fields are
/// refused by name.
#[test]
fn a_declustered_volume_roundtrips_as_version_3() {
    let mut s = sample();
    assert_eq!(u32_at(&s.encode(), 8), VERSION);
    assert!(s.encode()[VOLUMES_AT + VOLUME_SIZE + 120..VOLUMES_AT + VOLUME_SIZE + 128].iter().all(|&b| b == 0));
    s.member_count = 4;
    s.slots.insert(3, Slot { uuid: [3; 16], state: MemberState::Active, resync_from_bitmap: false, recovery_offset: None });
    s.volumes[1].level = 105;
    s.volumes[1].draid = Some(DraidEntry { version: 1, data: 2, spares: 1, held: [0; 5] });
    let b = s.encode();
    assert_eq!(u32_at(&b, 8), VERSION_RESHAPE);
    assert_eq!(&b[VOLUMES_AT + VOLUME_SIZE + 120..VOLUMES_AT + VOLUME_SIZE + 123], &[1, 2, 1]);
    let d = Superblock::decode(&b).unwrap();
    assert_eq!(d, s);
    assert_eq!(d.volumes[1].geometry(4).unwrap().layout().unwrap().draid().unwrap().data(), 2);
    for bad in [
        Some(DraidEntry { version: 2, data: 2, spares: 1, held: [0; 5] }),
        Some(DraidEntry { version: 1, data: 0, spares: 1, held: [0; 5] }),
        Some(DraidEntry { version: 1, data: 3, spares: 1, held: [0; 5] }),
        None,
    ] {
        s.volumes[1].draid = bad;
        let e = Superblock::decode(&s.encode()).unwrap_err();
        assert!(matches!(&e, DecodeError::Invalid(w) if w.contains("declustered layout")), "{bad:?}: {e:?}");
    }
    s.volumes[1].level = 5;
    s.volumes[1].draid = Some(DraidEntry { version: 1, data: 2, spares: 1, held: [0; 5] });
    assert!(matches!(Superblock::decode(&s.encode()), Err(DecodeError::Invalid(_))), "RAID 5 with a declustered shape");
}

/// Issue 33: which role each distributed spare holds round-trips (bytes
/// 123..128 of the volume's entry) with the role's Spared state (5) and
/// its recovery offset; hostile bytes there (a role past the members, a
/// spare past S, a role held twice) and a spared spare slot are refused
/// by name, never a panic.
#[test]
fn distributed_spare_assignments_roundtrip_and_hostile_ones_are_refused() {
    let mut s = sample();
    s.member_count = 4;
    s.slots.insert(3, Slot { uuid: [3; 16], state: MemberState::Active, resync_from_bitmap: false, recovery_offset: None });
    s.volumes[1].level = 105;
    s.volumes[1].draid = Some(DraidEntry { version: 1, data: 1, spares: 2, held: [3, 0, 0, 0, 0] });
    s.slots[2].state = MemberState::Spared;
    s.slots[2].recovery_offset = Some(7 << 20);
    let b = s.encode();
    assert_eq!(&b[VOLUMES_AT + VOLUME_SIZE + 123..VOLUMES_AT + VOLUME_SIZE + 128], &[3, 0, 0, 0, 0]);
    assert_eq!(b[SLOTS_AT + SLOT_SIZE * 2 + 16], 5, "the Spared state's byte");
    let d = Superblock::decode(&b).unwrap();
    assert_eq!(d, s);
    let e = d.volumes[1].draid.unwrap();
    assert_eq!((e.role_of(0), e.spare_of(2), e.free_spare()), (Some(2), Some(0), Some(1)));
    for held in [[5, 0, 0, 0, 0], [0, 0, 1, 0, 0], [1, 1, 0, 0, 0], [255, 255, 255, 255, 255]] {
        s.volumes[1].draid = Some(DraidEntry { version: 1, data: 1, spares: 2, held });
        let e = Superblock::decode(&s.encode()).unwrap_err();
        assert!(matches!(&e, DecodeError::Invalid(w) if w.contains("declustered layout")), "{held:?}: {e:?}");
    }
    // Every byte of the assignments and every state byte: an answer, never a panic.
    s.volumes[1].draid = Some(DraidEntry { version: 1, data: 1, spares: 2, held: [0; 5] });
    let good = s.encode();
    for at in (VOLUMES_AT + VOLUME_SIZE + 123..VOLUMES_AT + VOLUME_SIZE + 128).chain((0..4).map(|i| SLOTS_AT + SLOT_SIZE * i + 16)) {
        for v in 0..=255u8 {
            let mut b = good.clone();
            b[at] = v;
            let crc = crc32c::crc32c(&b[..CRC_AT]);
            b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
            let _ = Superblock::decode(&b);
        }
    }
}
