//! What the decoder tests (`tests/decoders.rs`) and the cargo-fuzz targets
//! (`fuzz/fuzz_targets/{bitmap,journal,volume_table}.rs`, which include
//! this file by path) run on untrusted bytes, and the encoders that make
//! their seed inputs. Each `*_input` function takes the raw fuzz input and
//! returns the decoder's result: it must never panic or hang, whatever the
//! bytes.
#![allow(dead_code)]

use std::sync::Arc;

use uraid_core::raid::bitmap::{Bitmap, BITMAP_OFFSET};
use uraid_core::raid::geometry::Geometry;
use uraid_core::raid::health::Health;
use uraid_core::cache::journal::{Journal, JournalId, RecordKind, HEADER_SIZE, MIN_LOG};
use uraid_core::io::member::{MemSpec, MemberSpec, OpenMode};
use uraid_core::control::superblock::{Superblock, VolumeEntry, DATA_OFFSET, SB_SIZE};
use uraid_core::{IoBuf, Level, Member, Result, Volume};

const RW: OpenMode = OpenMode { write: true, exclusive: false };

/// A fresh, zeroed `mem:` member of `size` bytes (sparse).
pub fn mem(size: u64) -> Member {
    Member::open(&MemberSpec::Mem(MemSpec { size, limits: Default::default() }), RW).expect("a mem: member")
}

fn put_crc(b: &mut [u8], at: usize) {
    let crc = crc32c::crc32c(&b[..at]);
    b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o.checked_add(8)?)?.try_into().ok()?))
}

// ---------------------------------------------------------------- bitmap

/// Bytes of the bitmap area (`[BITMAP_OFFSET, DATA_OFFSET)`).
pub const BITMAP_AREA: usize = (DATA_OFFSET - BITMAP_OFFSET) as usize;
/// Bytes of the bitmap input before the area's bytes.
pub const BITMAP_PREFIX: usize = 4;

/// The parameters a bitmap input asks for: (flags, region size, data end).
/// Byte 0: flags (bit 0: make the header's CRC right; bit 1: member 1's
/// area is left zero, a bad copy that load rewrites; bit 2: write a valid
/// header for the parameters, CRC included, so that arbitrary bits load);
/// byte 1: region size
/// 4 KiB << (b % 8); bytes 2..4: data area of (LE u16 + 1) x 4 KiB.
fn bitmap_params(data: &[u8]) -> (u8, u64, u64) {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let region = 4096u64 << (b(1) % 8);
    let data_end = DATA_OFFSET + (u16::from_le_bytes([b(2), b(3)]) as u64 + 1) * 4096;
    (b(0), region, data_end)
}

/// Places `data[BITMAP_PREFIX..]` where the write-intent bitmap lives on
/// two `mem:` members (see [`bitmap_params`] for the prefix) and loads
/// the bitmap. Checks that what loads stays inside the data area.
pub fn bitmap_input(data: &[u8]) -> Result<()> {
    let (flags, region, data_end) = bitmap_params(data);
    let mut area = data.get(BITMAP_PREFIX..).unwrap_or(&[]).to_vec();
    area.truncate(BITMAP_AREA);
    if area.len() < 8192 {
        area.resize(8192, 0);
    }
    if flags & 4 != 0 {
        let regions = (data_end - DATA_OFFSET).div_ceil(region);
        let bits = (regions.div_ceil(4)).next_multiple_of(4096);
        area[..8].copy_from_slice(uraid_core::raid::bitmap::MAGIC);
        area[8..12].copy_from_slice(&uraid_core::raid::bitmap::VERSION.to_le_bytes());
        area[12..16].copy_from_slice(&(uraid_core::raid::bitmap::HEADER_SIZE as u32).to_le_bytes());
        for (i, v) in [region, regions, DATA_OFFSET, data_end, uraid_core::raid::bitmap::BITS_OFFSET, bits].into_iter().enumerate() {
            area[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
    }
    if flags & 5 != 0 {
        put_crc(&mut area, 4092);
    }
    let members: Vec<Member> = (0..2).map(|_| mem(data_end)).collect();
    for (i, m) in members.iter().enumerate() {
        if i == 0 || flags & 2 == 0 {
            m.write_all_at(&area, BITMAP_OFFSET).expect("write to a mem: member");
        }
    }
    let b = Bitmap::load(Arc::new(members), Arc::new(Health::new(2)), region, data_end)?;
    for r in b.dirty() {
        assert!(DATA_OFFSET <= r.start && r.start < r.end && r.end <= data_end, "dirty range {r:?} outside the data area");
    }
    let st = b.stats();
    assert!(st.dirty <= st.regions && st.written <= st.regions, "{st:?}");
    Ok(())
}

/// Valid bitmap inputs made by uraid's own encoder ([`Bitmap::create`]
/// and [`Bitmap::start_write`]): (file name, bytes).
pub fn bitmap_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    // (flags, region shift byte, data area in 4 KiB units - 1, writes)
    let cases: [(&str, u8, u8, u16, &[u64]); 3] = [
        ("r64k-1m-clean", 0, 4, 255, &[]),
        ("r4k-64m-dirty", 0, 0, 16383, &[0, 5, 4095, 16000]),
        ("r16k-8m-dirty-bad-copy", 2, 2, 2047, &[1, 2, 511]),
    ];
    for (name, flags, shift, units, writes) in cases {
        let prefix = [flags, shift, units.to_le_bytes()[0], units.to_le_bytes()[1]];
        let (_, region, data_end) = bitmap_params(&prefix);
        let ms = Arc::new(vec![mem(data_end)]);
        let b = Bitmap::create(ms.clone(), Arc::new(Health::new(1)), region, data_end).expect("create");
        for &r in writes {
            b.start_write(DATA_OFFSET + r * region, 4096).expect("start_write");
        }
        let len = 4096 + ((b.regions().div_ceil(4) as usize).next_multiple_of(4096));
        let mut buf = IoBuf::new(len);
        ms[0].read_exact_at(&mut buf, BITMAP_OFFSET).expect("read back");
        let mut v = prefix.to_vec();
        v.extend_from_slice(&buf);
        out.push((name.to_string(), v));
    }
    out
}

// --------------------------------------------------------------- journal

/// Bytes of the journal device the journal input is placed on: a log a
/// little larger than the smallest.
pub const JOURNAL_DEVICE: u64 = HEADER_SIZE + MIN_LOG + (1 << 20);

/// A RAID 5 volume over three fresh `mem:` members (2 MiB, 64 KiB
/// chunks), for replay to write to.
pub fn replay_volume() -> Arc<Volume> {
    let chunk = 64 << 10;
    let ms: Vec<Member> = (0..3).map(|_| mem(DATA_OFFSET + 16 * chunk)).collect();
    let g = Geometry::new(Level::Raid5, 3, chunk, 16 * chunk).expect("geometry");
    Volume::new(Arc::new(ms), g, DATA_OFFSET).expect("volume")
}

/// Makes the header of journal `j` valid (`header`: magic, version, a log
/// size the device holds, a tail whose first record lies in the first 8
/// KiB of the log, a tail sequence number below 2^62) and its CRC right;
/// with `records`, the records that follow one another from the tail
/// (as far as they lie in `j`, at most 64, not across the log's end) get
/// right CRCs, and with `chain` also the right magic, sequence number,
/// position and nonce, and fields in plausible ranges (kind 1 to 4, whole
/// sectors, often 0 or whole 64 KiB, lengths below 8 KiB, offsets below
/// 4 MiB, strides below 256 KiB, no data for a zeroes record), still
/// arbitrary within them.
fn journal_reseal(j: &mut [u8], header: bool, records: bool, chain: bool) {
    if j.len() < HEADER_SIZE as usize {
        return;
    }
    let (Some(mut log), Some(mut tail), Some(mut seq)) = (u64_at(j, 64), u64_at(j, 72), u64_at(j, 80)) else { return };
    if header {
        log = MIN_LOG + log % (JOURNAL_DEVICE - HEADER_SIZE - MIN_LOG + 1);
        let t = tail % (1 << 62);
        tail = t - t % log + t % log % 8192;
        seq %= 1 << 62;
        j[..8].copy_from_slice(uraid_core::cache::journal::MAGIC);
        j[8..12].copy_from_slice(&3u32.to_le_bytes());
        j[64..72].copy_from_slice(&log.to_le_bytes());
        j[72..80].copy_from_slice(&tail.to_le_bytes());
        j[80..88].copy_from_slice(&seq.to_le_bytes());
    }
    put_crc(j, 4092);
    let nonce = u64_at(j, 88).unwrap_or(0);
    if !(records || chain) || log == 0 {
        return;
    }
    let mut pos = tail;
    for i in 0..64u64 {
        let at = (pos % log).checked_add(HEADER_SIZE).and_then(|a| usize::try_from(a).ok());
        let Some(at) = at.filter(|&a| a.checked_add(512).is_some_and(|e| e <= j.len())) else { return };
        if chain {
            j[at..at + 8].copy_from_slice(b"URAIDJR\x01");
            j[at + 8..at + 16].copy_from_slice(&seq.wrapping_add(i).to_le_bytes());
            j[at + 16..at + 24].copy_from_slice(&pos.to_le_bytes());
            j[at + 56..at + 64].copy_from_slice(&nonce.to_le_bytes());
            let kind = 1 + u32::from_le_bytes(j[at + 24..at + 28].try_into().expect("4 bytes")) % 4;
            j[at + 24..at + 28].copy_from_slice(&kind.to_le_bytes());
            for (o, bound) in [(32, 4u64 << 20), (40, 8 << 10), (72, 256 << 10), (80, 8 << 10)] {
                // Zero, whole 64 KiB (line edges) or whole sectors.
                let raw = u64_at(j, at + o).unwrap_or(0);
                let v = match raw % 8 {
                    0 => 0,
                    1 => (raw >> 3) % bound / (64 << 10) * (64 << 10),
                    _ => (raw >> 3) % bound / 512 * 512,
                };
                let v = if o == 40 && kind == 4 { 0 } else { v };
                j[at + o..at + o + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        let Some(len) = u64_at(j, at + 40) else { return };
        let data_end = (at as u64 + 512).checked_add(len).filter(|&e| e <= j.len() as u64);
        if let Some(e) = data_end {
            let crc = crc32c::crc32c(&j[at + 512..e as usize]);
            j[at + 48..at + 52].copy_from_slice(&crc.to_le_bytes());
        }
        put_crc(&mut j[at..at + 512], 508);
        match pos.checked_add(512).and_then(|p| p.checked_add(len)) {
            Some(p) if data_end.is_some() => pos = p,
            _ => return,
        }
    }
}

/// Places `data[1..]` as a journal (header and log, from byte 0) on a
/// `mem:` device of [`JOURNAL_DEVICE`] bytes, opens it and replays it onto
/// [`replay_volume`]. Byte 0: flags (bit 0: make the header's CRC right;
/// bit 1: also the CRCs of the records from the tail on; bit 2: make the
/// header valid; bit 3: make the records from the tail on plausible: see
/// [`journal_reseal`]). Returns
/// the (records, bytes) replayed.
pub fn journal_input(data: &[u8]) -> Result<(u64, u64)> {
    let flags = data.first().copied().unwrap_or(0);
    let mut j = data.get(1..).unwrap_or(&[]).to_vec();
    j.truncate(JOURNAL_DEVICE as usize);
    if flags & 15 != 0 {
        journal_reseal(&mut j, flags & 4 != 0, flags & 2 != 0, flags & 8 != 0);
    }
    let m = mem(JOURNAL_DEVICE);
    m.write_all_at(&j, 0).expect("write to a mem: member");
    let journal = Journal::open(m)?;
    let vol = replay_volume();
    journal.replay(vol.raid(), uraid_core::cache::Cache::line_for(vol.raid()))
}

/// Valid journal inputs made by uraid's own encoder ([`Journal::format`]
/// and its record writers): (file name, bytes). Each replays whole.
pub fn journal_seeds() -> Vec<(String, Vec<u8>)> {
    let id = JournalId { array: [1; 16], volume: [2; 16], journal: [3; 16] };
    type Fill = fn(&Journal);
    let cases: [(&str, Fill); 3] = [
        ("empty", |_| {}),
        ("data-rows-zeroes", |j| {
            let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 1) as u8).collect();
            let r = j.reserve(8192, 1, None).expect("room");
            j.write(r, RecordKind::Data, 4096, 1, &data).expect("data record");
            let r = j.reserve(2048, 2, None).expect("room");
            j.write_rows(r, 64 << 10, 64 << 10, 1024, 2, &data[..2048]).expect("rows record");
            let r = j.reserve(0, 3, None).expect("room");
            j.write_zeroes(r, 8192, 4096, 3).expect("zeroes record");
        }),
        ("stripe-and-data", |j| {
            let data = vec![0xa5u8; 128 << 10];
            let r = j.reserve(128 << 10, 5, None).expect("room");
            j.write(r, RecordKind::Stripe, 0, 5, &data).expect("stripe record");
            let r = j.reserve(512, 4, None).expect("room");
            j.write(r, RecordKind::Data, 512, 4, &data[..512]).expect("data record");
        }),
    ];
    let mut out = Vec::new();
    for (name, fill) in cases {
        let m = mem(JOURNAL_DEVICE);
        let j = Journal::format(m.try_clone().expect("clone"), id).expect("format");
        fill(&j);
        let mut buf = IoBuf::new((HEADER_SIZE + j.used() + 512) as usize);
        m.read_exact_at(&mut buf, 0).expect("read back");
        let mut v = vec![0u8];
        v.extend_from_slice(&buf);
        out.push((name.to_string(), v));
    }
    out
}

// ---------------------------------------------------------- volume table

/// Where the volume table lies in a superblock, and its size (8 entries of
/// 128 bytes; see the format in `superblock.rs`).
pub const VOLUMES_AT: usize = 1536;
/// Bytes of the volume table.
pub const VOLUMES_LEN: usize = 8 * 128;

fn volume(name: &str, level: u32, chunk: u64, start: u64, size: u64) -> VolumeEntry {
    VolumeEntry {
        name: name.into(),
        uuid: [0x11; 16],
        level,
        chunk,
        member_start: start,
        member_size: size,
        cache_mode: 0,
        cache_size_mib: 0,
        dirty_limit_mib: 0,
        journal_uuid: [0; 16],
        journal_lost: false,
        journal_region: None,
        layout: 0,
        draid: None,
    }
}

/// A valid superblock of a 4-member array with one spare and `volumes`.
pub fn superblock_with(volumes: Vec<VolumeEntry>) -> Superblock {
    use uraid_core::raid::health::MemberState;
    use uraid_core::control::superblock::{Slot, State};
    let slot = |uuid: u8, state| Slot { uuid: [uuid; 16], state, resync_from_bitmap: false, recovery_offset: None };
    Superblock {
        array_uuid: [0x42; 16],
        member_uuid: [2; 16],
        name: "fuzz".into(),
        member_count: 4,
        slot: 1,
        ctime: 1,
        utime: 2,
        events: 3,
        state: State::Clean,
        bitmap_region: 64 << 20,
        live_map: false,
        slots: vec![
            slot(1, MemberState::Active),
            slot(2, MemberState::Active),
            slot(3, MemberState::Active),
            slot(4, MemberState::Active),
            slot(5, MemberState::Spare),
        ],
        volumes,
        reshape: None,
    }
}

/// A valid superblock ([`superblock_with`] one volume) whose volume count
/// is `data[0] % 10` (0 and 9 are out of range) and whose volume table is
/// `data[1..]` (zero padded), with the CRC made right, decoded. Checks
/// that what decodes encodes back the same and that the values callers
/// derive from it (ends, capacities, cache settings) come out.
pub fn volume_table_input(data: &[u8]) -> std::result::Result<Superblock, uraid_core::control::superblock::DecodeError> {
    let mut b = superblock_with(vec![volume("v", 0, 64 << 10, DATA_OFFSET, 1 << 20)]).encode();
    let count = data.first().map_or(1, |c| u32::from(c % 10));
    b[92..96].copy_from_slice(&count.to_le_bytes());
    let table = data.get(1..).unwrap_or(&[]);
    let n = table.len().min(VOLUMES_LEN);
    b[VOLUMES_AT..VOLUMES_AT + n].copy_from_slice(&table[..n]);
    b[VOLUMES_AT + n..VOLUMES_AT + VOLUMES_LEN].fill(0);
    put_crc(&mut b, SB_SIZE - 4);
    let sb = Superblock::decode(&b)?;
    assert_eq!(Superblock::decode(&sb.encode()).as_ref(), Ok(&sb), "a decoded superblock encodes back differently");
    assert!(sb.used_end() >= sb.data_end());
    for v in &sb.volumes {
        let _ = v.capacity(sb.member_count as usize);
        let _ = v.cache_config();
    }
    Ok(sb)
}

/// Valid volume-table inputs made by [`Superblock::encode`]: (file name,
/// bytes).
pub fn volume_table_seeds() -> Vec<(String, Vec<u8>)> {
    let mut journaled = volume("safe", 5, 64 << 10, DATA_OFFSET + (256 << 20), 512 << 20);
    journaled.cache_mode = uraid_core::cache::CacheMode::Journal.to_u8();
    journaled.journal_uuid = [5; 16];
    let end = DATA_OFFSET + (768 << 20);
    journaled.journal_region = Some(uraid_core::control::superblock::JournalRegion { role: 2, start: end, size: 80 << 20 });
    let eight: Vec<VolumeEntry> =
        (0..8u64).map(|i| volume(&format!("v{i}"), [0, 1, 5, 6, 10][i as usize % 5], 4096 << i, DATA_OFFSET + (i << 30), 64 << 20)).collect();
    let cases = [
        ("raid0-raid5-journal", vec![volume("speed", 0, 128 << 10, DATA_OFFSET, 256 << 20), journaled]),
        ("eight-volumes", eight),
        ("one-raid10", vec![volume("m", 10, 512 << 10, DATA_OFFSET, 1 << 30)]),
    ];
    cases
        .into_iter()
        .map(|(name, vols)| {
            let n = vols.len() as u8;
            let b = superblock_with(vols).encode();
            let mut v = vec![n];
            v.extend_from_slice(&b[VOLUMES_AT..VOLUMES_AT + VOLUMES_LEN]);
            (name.to_string(), v)
        })
        .collect()
}
