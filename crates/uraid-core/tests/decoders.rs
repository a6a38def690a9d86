//! Every decoder of on-disk bytes takes untrusted input: the write-intent
//! bitmap ([`Bitmap::load`]), the journal ([`Journal::open`] and replay)
//! and the superblock's volume table give `Ok` or an error for any bytes,
//! never a panic or a hang. Arbitrary bytes, valid encodings with bytes
//! changed (checksums made right again, so the checks past them run), and
//! every seed of the cargo-fuzz corpora in `fuzz/corpus` (the fuzz targets
//! run the same code, `tests/harness/mod.rs`).
//!
//! `cargo test -p uraid-core --test decoders -- --ignored write_seed_corpus`
//! writes the seed corpora again from uraid's encoders.

mod harness;

use std::path::PathBuf;
use std::sync::LazyLock;

use harness::*;
use proptest::prelude::*;
use uraid_core::control::superblock::Superblock;

type Seeds = LazyLock<Vec<(String, Vec<u8>)>>;
static BITMAP_SEEDS: Seeds = LazyLock::new(bitmap_seeds);
static JOURNAL_SEEDS: Seeds = LazyLock::new(journal_seeds);
static VOLUME_TABLE_SEEDS: Seeds = LazyLock::new(volume_table_seeds);

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("seed file"))).collect()
}

/// `base` with each `(at, value)` written (`at` taken modulo its length).
fn mutate(base: &[u8], muts: &[(usize, u8)]) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(at, x) in muts {
        let n = v.len();
        v[at % n] = x;
    }
    v
}

/// A u64 a decoder's bounds are likely to meet: edges, powers of two,
/// sector multiples near the top, anything.
fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(512),
        Just(4096),
        (0u32..64).prop_map(|s| 1u64 << s),
        (0u32..64).prop_map(|s| u64::MAX >> s),
        (0u32..64).prop_map(|s| (u64::MAX << s) & !511),
        any::<u64>(),
    ]
}

/// `base` with each `(at, value)` written as a little-endian u64 (where it
/// fits).
fn put_u64s(base: &mut [u8], puts: &[(usize, u64)]) {
    for &(at, x) in puts {
        if let Some(d) = base.get_mut(at..at + 8) {
            d.copy_from_slice(&x.to_le_bytes());
        }
    }
}

/// Input offsets of the record headers of a journal seed (back to back
/// from the log's start, input byte 0 being the flags), the first free
/// place after them included.
fn record_starts(input: &[u8]) -> Vec<usize> {
    let mut v = vec![1 + 4096];
    while let Some(h) = input.get(*v.last().unwrap()..).filter(|h| h.len() >= 512 && h[..8] == *b"URAIDJR\x01") {
        let len = u64::from_le_bytes(h[40..48].try_into().unwrap()) as usize;
        v.push(v.last().unwrap() + 512 + len);
    }
    v
}

#[test]
fn seeds_from_the_encoders_decode() {
    for (name, b) in bitmap_seeds() {
        bitmap_input(&b).unwrap_or_else(|e| panic!("bitmap seed {name}: {e}"));
    }
    let want = [("empty", 0), ("data-rows-zeroes", 3), ("stripe-and-data", 2)];
    for ((name, b), (wname, n)) in journal_seeds().into_iter().zip(want) {
        assert_eq!(name, wname);
        let (records, _) = journal_input(&b).unwrap_or_else(|e| panic!("journal seed {name}: {e}"));
        assert_eq!(records, n, "journal seed {name}");
        assert_eq!(record_starts(&b).len(), n as usize + 1, "journal seed {name}");
    }
    for (name, b) in volume_table_seeds() {
        volume_table_input(&b).unwrap_or_else(|e| panic!("volume table seed {name}: {e}"));
    }
}

/// The u64 values the field sweeps put in every field.
const EDGES: [u64; 12] = [0, 1, 511, 512, 4096, 1 << 32, 1 << 62, (1 << 62) + 512, 1 << 63, (u64::MAX / 2) & !511, !511, u64::MAX];

/// Every u64 field of every record header (and of the header) of every
/// journal seed, set to each of [`EDGES`], checksums made right: opens
/// and replays or gives an error.
#[test]
fn journal_field_sweep() {
    for (name, seed) in JOURNAL_SEEDS.iter() {
        let mut places: Vec<usize> = (8..12).map(|f| 1 + 8 * f).collect();
        let starts = record_starts(seed);
        for &r in &starts[..starts.len() - 1] {
            places.extend((1..11).map(|f| r + 8 * f));
        }
        for &at in &places {
            for x in EDGES {
                let mut b = seed.clone();
                b[0] = 3;
                put_u64s(&mut b, &[(at, x)]);
                if let Err(e) = std::panic::catch_unwind(|| journal_input(&b)) {
                    panic!("journal seed {name}, byte {} set to {x}: {e:?}", at - 1);
                }
            }
        }
    }
}

/// Every u64 field of the header of every bitmap seed set to each of
/// [`EDGES`], CRC made right: loads or gives an error.
#[test]
fn bitmap_field_sweep() {
    for (name, seed) in BITMAP_SEEDS.iter() {
        for f in 2..8 {
            for x in EDGES {
                let mut b = seed.clone();
                b[0] |= 1;
                put_u64s(&mut b, &[(BITMAP_PREFIX + 8 * f, x)]);
                if let Err(e) = std::panic::catch_unwind(|| bitmap_input(&b)) {
                    panic!("bitmap seed {name}, header byte {} set to {x}: {e:?}", 8 * f);
                }
            }
        }
    }
}

/// Every u32 and u64 field of every volume entry of every volume-table
/// seed set to each of [`EDGES`] (truncated for u32s): decodes or gives an
/// error.
#[test]
fn volume_table_field_sweep() {
    for (name, seed) in VOLUME_TABLE_SEEDS.iter() {
        for v in 0..8 {
            let entry = 1 + 128 * v;
            let u64s = [56, 64, 104, 112];
            let u32s = [48, 52, 76, 80, 100];
            for x in EDGES {
                for (at, wide) in u64s.iter().map(|&o| (o, true)).chain(u32s.iter().map(|&o| (o, false))) {
                    let mut b = seed.clone();
                    let bytes = x.to_le_bytes();
                    let n = if wide { 8 } else { 4 };
                    b[entry + at..entry + at + n].copy_from_slice(&bytes[..n]);
                    if let Err(e) = std::panic::catch_unwind(|| volume_table_input(&b)) {
                        panic!("volume table seed {name}, entry {v} byte {at} set to {x}: {e:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_seed_of_the_fuzz_corpora_runs() {
    for (p, b) in corpus("bitmap") {
        let _ = bitmap_input(&b);
        println!("{}: ok", p.display());
    }
    for (p, b) in corpus("journal") {
        let _ = journal_input(&b);
        println!("{}: ok", p.display());
    }
    for (p, b) in corpus("volume_table") {
        let _ = volume_table_input(&b);
        println!("{}: ok", p.display());
    }
    for (p, b) in corpus("superblock") {
        // As fuzz_targets/superblock.rs does.
        if let Ok(sb) = Superblock::decode(&b) {
            assert_eq!(Superblock::decode(&sb.encode()).map(|s| s.encode()), Ok(sb.encode()), "{}", p.display());
        }
    }
}

/// Writes the seed corpora from the encoders (run by hand; the corpora are
/// committed).
#[test]
#[ignore]
fn write_seed_corpus() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (target, seeds) in [("bitmap", bitmap_seeds()), ("journal", journal_seeds()), ("volume_table", volume_table_seeds())] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, b) in seeds {
            std::fs::write(dir.join(name), b).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes in the bitmap area under arbitrary region sizes and
    /// data ends, the header's CRC right or not, or a valid header over
    /// arbitrary bits.
    #[test]
    fn bitmap_arbitrary_bytes(flags in 0u8..8, mut data in proptest::collection::vec(any::<u8>(), 1..10_000)) {
        data[0] = flags;
        let _ = bitmap_input(&data);
    }

    /// Encoded bitmaps with bytes changed (header fields, bits), the CRC
    /// made right again or not.
    #[test]
    fn bitmap_mutated_encodings(seed in 0usize..3, flags in 0u8..4,
                                head in proptest::collection::vec((4usize..4 + 64, any::<u8>()), 0..6),
                                fields in proptest::collection::vec((2usize..8, edge_u64()), 0..3),
                                any_at in proptest::collection::vec((0usize..1 << 20, any::<u8>()), 0..6)) {
        let seeds = &*BITMAP_SEEDS;
        let mut b = mutate(&seeds[seed % seeds.len()].1, &head);
        // Header fields 16..64 (after the 4-byte input prefix).
        put_u64s(&mut b, &fields.iter().map(|&(f, x)| (4 + 8 * f, x)).collect::<Vec<_>>());
        b = mutate(&b, &any_at);
        b[0] = flags;
        let _ = bitmap_input(&b);
    }

    /// Arbitrary bytes as a journal, with the header's (and the records')
    /// CRCs right or not, or a valid header and records with arbitrary
    /// kinds, offsets, lengths and data.
    #[test]
    fn journal_arbitrary_bytes(flags in 0u8..16, mut data in proptest::collection::vec(any::<u8>(), 1..40_000)) {
        data[0] = flags;
        let _ = journal_input(&data);
    }

    /// Encoded journals with bytes changed (header fields, record header
    /// fields, data), the CRCs made right again or not.
    #[test]
    fn journal_mutated_encodings(seed in 0usize..3, flags in 0u8..4,
                                 head in proptest::collection::vec((1usize..1 + 96, any::<u8>()), 0..4),
                                 rec in proptest::collection::vec((0usize..4, 0usize..96, any::<u8>()), 0..6),
                                 head_fields in proptest::collection::vec((8usize..12, edge_u64()), 0..2),
                                 rec_fields in proptest::collection::vec((0usize..4, 1usize..11, edge_u64()), 0..3),
                                 any_at in proptest::collection::vec((0usize..1 << 20, any::<u8>()), 0..4)) {
        let seeds = &*JOURNAL_SEEDS;
        let mut b = mutate(&seeds[seed % seeds.len()].1, &head);
        // Bytes and u64 fields of the records' headers (the seed's records
        // lie back to back from the log's start), and the header's log
        // size, tail, tail sequence number and nonce.
        let starts = record_starts(&b);
        let at = |k: usize| starts[k % starts.len()];
        let rec: Vec<(usize, u8)> = rec.into_iter().map(|(k, o, x)| (at(k) + o, x)).collect();
        b = mutate(&b, &rec);
        put_u64s(&mut b, &head_fields.iter().map(|&(f, x)| (1 + 8 * f, x)).collect::<Vec<_>>());
        put_u64s(&mut b, &rec_fields.iter().map(|&(k, f, x)| (at(k) + 8 * f, x)).collect::<Vec<_>>());
        b = mutate(&b, &any_at);
        b[0] = flags;
        let _ = journal_input(&b);
    }

    /// Arbitrary volume tables, and encoded ones with bytes changed, behind
    /// a valid superblock header.
    #[test]
    fn volume_table_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..1100), seed in 0usize..3,
                                 muts in proptest::collection::vec((0usize..1025, any::<u8>()), 1..8)) {
        let _ = volume_table_input(&raw);
        let seeds = &*VOLUME_TABLE_SEEDS;
        let _ = volume_table_input(&mutate(&seeds[seed].1, &muts));
    }
}

/// A journal header whose tail sequence number is the largest u64, with a
/// valid record of that number at the tail: replay counted past it (an
/// overflow, a panic in a debug build). Now open refuses the header.
#[test]
fn journal_tail_sequence_at_the_end_of_u64_is_refused() {
    let mut b = JOURNAL_SEEDS[1].1.clone();
    // Input byte 0 is the flags; the journal starts at byte 1.
    b[0] = 3; // make the header's and the records' CRCs right
    b[1 + 80..1 + 88].copy_from_slice(&u64::MAX.to_le_bytes());
    b[1 + 4096 + 8..1 + 4096 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = journal_input(&b).expect_err("a tail sequence number of 2^64 - 1 opened");
    assert_eq!(e.kind(), uraid_core::ErrorKind::Superblock, "{e}");
    assert!(e.to_string().contains("sequence number"), "{e}");
}

/// A volume entry whose member size is valid alone (whole chunks, its end
/// in u64) but whose capacity over the members is past 2^64 bytes: the
/// superblock decoded, and the first capacity computed from it (assemble,
/// `VolumeEntry::capacity`) overflowed. Now decode refuses the entry.
#[test]
fn volume_whose_capacity_overflows_is_refused() {
    let mut b = VOLUME_TABLE_SEEDS.iter().find(|(n, _)| n == "one-raid10").unwrap().1.clone();
    // Input byte 0 is the volume count; entry 0's member size at byte 64.
    b[1 + 64..1 + 72].copy_from_slice(&(1u64 << 63).to_le_bytes());
    let e = volume_table_input(&b).expect_err("a RAID 10 volume of 2^64 bytes decoded");
    assert!(e.to_string().contains("member size 9223372036854775808 of volume 0"), "{e}");
}
