//! The superblock's encoding: [`Superblock::encode`] writes the fields at
//! the offsets of the format table (see the module's documentation), and
//! [`Superblock::decode`] reads them back section by section (the fixed
//! header, the slot table, the volume table, the journal regions on
//! members, the reshape record), refusing any field that cannot be right.

use super::{
    check_name, check_name_of, name_at, put_name, u32_at, u64_at, uuid_at, DecodeError, JournalRegion, Reshape,
    ReshapeBackup, Slot, State, Superblock, VolumeEntry, CRC_AT, DATA_OFFSET, IN_SYNC, MAGIC, MAX_SLOTS, MAX_SPARES,
    MAX_VOLUMES, NAME_MAX, SB_SIZE, SLOTS_AT, SLOT_SIZE, VERSION, VERSION_LIVE_MAP, VERSION_RESHAPE, FEATURE_LIVE_MAP, VOLUMES_AT, VOLUME_SIZE,
};
use crate::raid::health::MemberState;

type Decoded<T> = std::result::Result<T, DecodeError>;

/// A [`DecodeError::Invalid`] naming `what`.
fn inv<T>(what: String) -> Decoded<T> {
    Err(DecodeError::Invalid(what))
}

/// The fixed header's counts and fields that the tables are read with.
struct Header {
    version: u32,
    member_count: u32,
    slot_count: u32,
    slot: u32,
    volume_count: u32,
    state: State,
    bitmap_region: u64,
    live_map: bool,
}

impl Superblock {
    /// Encodes into a 4 KiB block with the checksum filled in. Entries past
    /// [`MAX_SLOTS`] slots or [`MAX_VOLUMES`] volumes are not written (the
    /// control path never makes them).
    pub fn encode(&self) -> [u8; SB_SIZE] {
        // The control path never makes more (decode refuses them).
        debug_assert!(self.slots.len() <= MAX_SLOTS && self.volumes.len() <= MAX_VOLUMES, "{} slots, {} volumes", self.slots.len(), self.volumes.len());
        let mut b = [0u8; SB_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SB_SIZE as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.array_uuid);
        b[32..48].copy_from_slice(&self.member_uuid);
        put_name(&mut b, 48, &self.name);
        let slots = &self.slots[..self.slots.len().min(MAX_SLOTS)];
        let volumes = &self.volumes[..self.volumes.len().min(MAX_VOLUMES)];
        b[80..84].copy_from_slice(&self.member_count.to_le_bytes());
        b[84..88].copy_from_slice(&(slots.len() as u32).to_le_bytes());
        b[88..92].copy_from_slice(&self.slot.to_le_bytes());
        b[92..96].copy_from_slice(&(volumes.len() as u32).to_le_bytes());
        b[96..104].copy_from_slice(&self.ctime.to_le_bytes());
        b[104..112].copy_from_slice(&self.utime.to_le_bytes());
        b[112..120].copy_from_slice(&self.events.to_le_bytes());
        let st: u32 = match self.state {
            State::Clean => 0,
            State::Active => 1,
        };
        b[120..124].copy_from_slice(&st.to_le_bytes());
        b[128..136].copy_from_slice(&self.bitmap_region.to_le_bytes());
        if self.live_map {
            b[124..128].copy_from_slice(&FEATURE_LIVE_MAP.to_le_bytes());
        }
        if self.volumes.iter().any(|v| v.layout != 0 || v.draid.is_some()) {
            b[8..12].copy_from_slice(&VERSION_RESHAPE.to_le_bytes());
        }
        if let Some(r) = &self.reshape {
            b[8..12].copy_from_slice(&VERSION_RESHAPE.to_le_bytes());
            b[136..140].copy_from_slice(&(1u32 | if r.backup.is_some() { 2 } else { 0 } | if r.live { 4 } else { 0 } | r.old_level.map_or(0, |l| (l + 1) << 8)
                | r.old_chunk.map_or(0, |c| (c.trailing_zeros() - 11) << 16)
                | if r.old_parity_last { 1 << 24 } else { 0 })
                .to_le_bytes());
            b[140..144].copy_from_slice(&r.old_members.to_le_bytes());
            b[144..152].copy_from_slice(&r.position.to_le_bytes());
            b[184..188].copy_from_slice(&r.volume.to_le_bytes());
            if let Some(k) = &r.backup {
                b[152..160].copy_from_slice(&r.position.to_le_bytes());
                b[160..168].copy_from_slice(&k.len.to_le_bytes());
                b[168..172].copy_from_slice(&k.crc.to_le_bytes());
                b[172..176].copy_from_slice(&k.role.to_le_bytes());
                b[176..184].copy_from_slice(&k.offset.to_le_bytes());
            }
        }
        for (i, s) in slots.iter().enumerate() {
            let o = SLOTS_AT + SLOT_SIZE * i;
            b[o..o + 16].copy_from_slice(&s.uuid);
            b[o + 16] = s.state as u8;
            b[o + 17] = s.resync_from_bitmap as u8;
            b[o + 24..o + 32].copy_from_slice(&s.recovery_offset.unwrap_or(IN_SYNC).to_le_bytes());
        }
        for (i, v) in volumes.iter().enumerate() {
            let o = VOLUMES_AT + VOLUME_SIZE * i;
            put_name(&mut b, o, &v.name);
            b[o + 32..o + 48].copy_from_slice(&v.uuid);
            b[o + 48..o + 52].copy_from_slice(&v.level.to_le_bytes());
            b[o + 52..o + 56].copy_from_slice(&(v.chunk as u32).to_le_bytes());
            b[o + 56..o + 64].copy_from_slice(&v.member_start.to_le_bytes());
            b[o + 64..o + 72].copy_from_slice(&v.member_size.to_le_bytes());
            b[o + 72] = v.cache_mode;
            b[o + 73] = v.journal_lost as u8;
            b[o + 74] = v.layout;
            if let Some(d) = v.draid {
                b[o + 120] = d.version;
                b[o + 121] = d.data as u8;
                b[o + 122] = d.spares as u8;
                b[o + 123..o + 128].copy_from_slice(&d.held);
            }
            b[o + 76..o + 80].copy_from_slice(&v.cache_size_mib.to_le_bytes());
            b[o + 80..o + 84].copy_from_slice(&v.dirty_limit_mib.to_le_bytes());
            b[o + 84..o + 100].copy_from_slice(&v.journal_uuid);
            if let Some(r) = v.journal_region {
                b[o + 100..o + 104].copy_from_slice(&(r.role + 1).to_le_bytes());
                b[o + 104..o + 112].copy_from_slice(&r.start.to_le_bytes());
                b[o + 112..o + 120].copy_from_slice(&r.size.to_le_bytes());
            }
        }
        if self.live_map {
            // Also with a reshape or a parity-last volume: 4 implies 3.
            b[8..12].copy_from_slice(&VERSION_LIVE_MAP.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a block read from offset 0 of a member.
    ///
    /// Errors: [`DecodeError::NoMagic`] (not a uraid device),
    /// [`DecodeError::BadCrc`], [`DecodeError::Version`] (version 1 or a
    /// newer one), [`DecodeError::Invalid`] naming a field that cannot be
    /// right (counts, slot, states, levels, chunks, overlapping volumes).
    pub fn decode(b: &[u8]) -> std::result::Result<Superblock, DecodeError> {
        let h = decode_header(b)?;
        let slots = decode_slots(b, &h)?;
        let member_uuid = uuid_at(b, 32);
        if slots[h.slot as usize].uuid != member_uuid {
            return inv(format!("slot {} records another member UUID than this member's", h.slot));
        }
        let mut volumes: Vec<VolumeEntry> = Vec::with_capacity(h.volume_count as usize);
        for i in 0..h.volume_count as usize {
            let prev_end = volumes.last().map_or(DATA_OFFSET, VolumeEntry::member_end);
            volumes.push(decode_volume(b, i, &h, prev_end)?);
        }
        check_journal_regions(&volumes, h.member_count)?;
        // Names reach socket paths and the shell lines `serve` prints: the
        // rule of `create` holds on read too.
        let name = name_at(b, 48);
        if check_name(&name).is_err() {
            return inv(format!("array name ({name:?}: not 1 to {NAME_MAX} letters, digits, '-', '_' or '.')"));
        }
        let reshape = decode_reshape(b, &h)?;
        debug_assert!(volumes.windows(2).all(|w| w[0].member_end() <= w[1].member_start), "volumes in member-offset order, apart");
        Ok(Superblock {
            array_uuid: uuid_at(b, 16),
            member_uuid,
            name,
            member_count: h.member_count,
            slot: h.slot,
            ctime: u64_at(b, 96),
            utime: u64_at(b, 104),
            events: u64_at(b, 112),
            state: h.state,
            bitmap_region: h.bitmap_region,
            live_map: h.live_map,
            slots,
            volumes,
            reshape,
        })
    }
}

/// The magic, checksum, version and size, then the header's counts,
/// state and bitmap region size.
fn decode_header(b: &[u8]) -> Decoded<Header> {
    if b.len() < SB_SIZE || &b[0..8] != MAGIC {
        return Err(DecodeError::NoMagic);
    }
    let stored = u32_at(b, CRC_AT);
    let computed = crc32c::crc32c(&b[..CRC_AT]);
    if stored != computed {
        return Err(DecodeError::BadCrc { stored, computed });
    }
    let version = u32_at(b, 8);
    if version != VERSION && version != VERSION_RESHAPE && version != VERSION_LIVE_MAP {
        return Err(DecodeError::Version(version));
    }
    if u32_at(b, 12) as usize != SB_SIZE {
        return inv(format!("superblock size {}", u32_at(b, 12)));
    }
    let member_count = u32_at(b, 80);
    let slot_count = u32_at(b, 84);
    let slot = u32_at(b, 88);
    let volume_count = u32_at(b, 92);
    if member_count == 0 || member_count as usize > crate::raid::geometry::MAX_MEMBERS {
        return inv(format!("member count {member_count}"));
    }
    if slot_count < member_count || slot_count as usize > member_count as usize + MAX_SPARES {
        return inv(format!("slot count {slot_count} with {member_count} members"));
    }
    if slot >= slot_count {
        return inv(format!("slot {slot} of {slot_count}"));
    }
    if volume_count == 0 || volume_count as usize > MAX_VOLUMES {
        return inv(format!("volume count {volume_count}"));
    }
    let state = match u32_at(b, 120) {
        0 => State::Clean,
        1 => State::Active,
        s => return inv(format!("state {s}")),
    };
    let bitmap_region = u64_at(b, 128);
    if bitmap_region != 0 && (!bitmap_region.is_power_of_two() || bitmap_region < 4096) {
        return inv(format!("bitmap region size {bitmap_region}"));
    }
    let features = u32_at(b, 124);
    if features & !FEATURE_LIVE_MAP != 0 {
        return inv(format!("feature flags {features:#x} (bits this uraid does not know)"));
    }
    let live_map = features & FEATURE_LIVE_MAP != 0;
    if live_map && (bitmap_region == 0 || version != VERSION_LIVE_MAP) {
        return inv(format!("a live-data map in a version {version} superblock with bitmap region {bitmap_region}"));
    }
    Ok(Header { version, member_count, slot_count, slot, volume_count, state, bitmap_region, live_map })
}

/// The slot table: roles first (not spares), then spares.
fn decode_slots(b: &[u8], h: &Header) -> Decoded<Vec<Slot>> {
    let mut slots = Vec::with_capacity(h.slot_count as usize);
    for i in 0..h.slot_count as usize {
        let o = SLOTS_AT + SLOT_SIZE * i;
        let raw = b[o + 16];
        if raw > MemberState::Spared as u8 {
            return inv(format!("state {raw} of slot {i}"));
        }
        let state = MemberState::from_u8(raw);
        let spare = i >= h.member_count as usize;
        if spare != (state == MemberState::Spare) {
            return inv(format!("slot {i} is {} but {}", state.name(), if spare { "a spare slot" } else { "a role" }));
        }
        let rec = u64_at(b, o + 24);
        slots.push(Slot {
            uuid: uuid_at(b, o),
            state,
            resync_from_bitmap: b[o + 17] & 1 != 0,
            recovery_offset: (rec != IN_SYNC).then_some(rec),
        });
    }
    Ok(slots)
}

/// True when the spare assignments of `d` name roles below `member_count`,
/// each at most once, on spares below S only.
fn held_ok(d: &super::DraidEntry, member_count: u32) -> bool {
    d.held.iter().enumerate().all(|(k, &h)| {
        h == 0 || ((k as u32) < d.spares && (h as u32) <= member_count && !d.held[..k].contains(&h))
    })
}

/// Volume entry `i`, which must start at or past `prev_end` (the end of
/// the entry before it on the members, or [`DATA_OFFSET`]).
fn decode_volume(b: &[u8], i: usize, h: &Header, prev_end: u64) -> Decoded<VolumeEntry> {
    let member_count = h.member_count;
    let o = VOLUMES_AT + VOLUME_SIZE * i;
    let v = VolumeEntry {
        name: name_at(b, o),
        uuid: uuid_at(b, o + 32),
        level: u32_at(b, o + 48),
        chunk: u32_at(b, o + 52) as u64,
        member_start: u64_at(b, o + 56),
        member_size: u64_at(b, o + 64),
        cache_mode: b[o + 72],
        cache_size_mib: u32_at(b, o + 76),
        dirty_limit_mib: u32_at(b, o + 80),
        journal_uuid: b[o + 84..o + 100].try_into().expect("16 bytes"),
        journal_lost: b[o + 73] & 1 != 0,
        journal_region: match u32_at(b, o + 100) {
            0 => None,
            r => Some(JournalRegion { role: r - 1, start: u64_at(b, o + 104), size: u64_at(b, o + 112) }),
        },
        layout: b[o + 74],
        draid: (b[o + 120] != 0).then(|| super::DraidEntry {
            version: b[o + 120],
            data: b[o + 121] as u32,
            spares: b[o + 122] as u32,
            held: b[o + 123..o + 128].try_into().expect("5 bytes"),
        }),
    };
    if v.layout != 0 && (h.version < VERSION_RESHAPE || !matches!(v.level, 5 | 6) || crate::raid::layout::Variant::from_u8(v.layout).is_none()) {
        return inv(format!("layout {} of volume {i} (RAID {})", v.layout, v.level));
    }
    let declustered = crate::raid::geometry::Level::from_number(v.level).is_ok_and(|l| l.declustered());
    let draid_ok = match v.draid {
        None => !declustered,
        Some(d) => {
            declustered
                && h.version >= VERSION_RESHAPE
                && d.version == crate::raid::level::LAYOUT_VERSION
                && d.data > 0
                && (d.data + d.spares + crate::raid::geometry::Level::from_number(v.level).map_or(0, |l| l.desc().parity as u32)) <= member_count
                && held_ok(&d, member_count)
        }
    };
    if !draid_ok {
        return inv(format!("declustered layout {:?} of volume {i} (level {} over {member_count} members)", v.draid, v.level));
    }
    if check_name_of("volume", &v.name).is_err() {
        return inv(format!("name of volume {i} ({:?}: not 1 to {NAME_MAX} letters, digits, '-', '_' or '.')", v.name));
    }
    let Ok(level) = crate::raid::geometry::Level::from_number(v.level) else {
        return inv(format!("level {} of volume {i}", v.level));
    };
    if level.min_members() > member_count as usize {
        return inv(format!("volume {i} is RAID {} over {member_count} members", v.level));
    }
    if crate::cache::CacheMode::from_u8(v.cache_mode).is_err() {
        return inv(format!("cache mode {} of volume {i}", v.cache_mode));
    }
    if crate::raid::geometry::check_chunk(v.chunk).is_err() {
        return inv(format!("chunk size {} of volume {i}", v.chunk));
    }
    if v.member_start < prev_end || !v.member_start.is_multiple_of(4096) {
        return inv(format!("member start {} of volume {i}", v.member_start));
    }
    if v.member_size < v.chunk || !v.member_size.is_multiple_of(v.chunk) || v.member_start.checked_add(v.member_size).is_none() {
        return inv(format!("member size {} of volume {i}", v.member_size));
    }
    // The volume's capacity (at most member count x member size, at
    // every level) must be a byte count too.
    if v.member_size.checked_mul(member_count as u64).is_none() {
        return inv(format!("member size {} of volume {i} (over {member_count} members: past 2^64 bytes)", v.member_size));
    }
    Ok(v)
}

/// Journal regions on members: past the volumes' areas, apart.
fn check_journal_regions(volumes: &[VolumeEntry], member_count: u32) -> Decoded<()> {
    for (i, v) in volumes.iter().enumerate() {
        let Some(r) = v.journal_region else { continue };
        let bad = r.role >= member_count
            || v.cache_mode != crate::cache::CacheMode::Journal.to_u8()
            || r.start < DATA_OFFSET
            || r.start % 4096 != 0
            || r.size < crate::cache::journal::HEADER_SIZE + crate::cache::journal::MIN_LOG
            || r.start.checked_add(r.size).is_none()
            || volumes.iter().any(|o| o.member_start < r.start + r.size && r.start < o.member_end())
            || volumes[..i].iter().filter_map(|o| o.journal_region).any(|o| o.start < r.end() && r.start < o.end());
        if bad {
            return inv(format!("journal region of volume {i} (role {}, bytes {}+{})", r.role, r.start, r.size));
        }
    }
    Ok(())
}

/// The reshape record (version 3 only; `None` when no reshape is in
/// progress).
fn decode_reshape(b: &[u8], h: &Header) -> Decoded<Option<Reshape>> {
    let (member_count, volume_count) = (h.member_count, h.volume_count);
    if h.version < VERSION_RESHAPE || u32_at(b, 136) == 0 {
        return Ok(None);
    }
    let flags = u32_at(b, 136);
    let old_members = u32_at(b, 140);
    if flags & 1 == 0 || flags & !0x01ff_ff07 != 0 || (flags >> 8) & 0xff > 11 || (flags >> 16) & 0xff > 9 || old_members == 0 || old_members > member_count || (old_members == member_count && (flags >> 16) & 0xff == 0) {
        return inv(format!("reshape record (flags {flags}, from {old_members} to {member_count} members)"));
    }
    let position = u64_at(b, 144);
    let volume = u32_at(b, 184);
    if volume >= volume_count {
        return inv(format!("reshape record (volume {volume} of {volume_count})"));
    }
    let backup = if flags & 2 != 0 {
        let k = ReshapeBackup { len: u64_at(b, 160), crc: u32_at(b, 168), role: u32_at(b, 172), offset: u64_at(b, 176) };
        // A spread backup (a chunk change over the same members)
        // lies past the bitmap on every member that is up.
        let placed = if k.role == u32::MAX {
            old_members == member_count && k.offset >= 64 << 10 && k.offset < DATA_OFFSET
        } else {
            k.role < member_count && k.offset >= DATA_OFFSET
        };
        if u64_at(b, 152) != position || !placed || k.len == 0 || k.offset.checked_add(k.len).is_none() {
            return inv(format!("reshape backup (role {}, bytes {}+{})", k.role, k.offset, k.len));
        }
        Some(k)
    } else {
        None
    };
    Ok(Some(Reshape { old_members, position, backup, live: flags & 4 != 0, old_level: ((flags >> 8) & 0xff).checked_sub(1), old_chunk: match (flags >> 16) & 0xff { 0 => None, c => Some(1u64 << (c + 11)) }, old_parity_last: flags & (1 << 24) != 0, volume }))
}
