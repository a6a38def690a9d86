//! The control path: create, examine and assemble arrays, in mdadm's spirit.
//!
//! Every check a user can fail runs before the first byte is written: a
//! failed `create` or `assemble` leaves every member as it was.

use std::sync::Arc;

use crate::geometry::{check_chunk, Geometry, Level, MAX_MEMBERS};
use crate::member::{check_distinct, Member, MemberSpec, OpenMode};
use crate::signature::{detect, PROBE_LEN};
use crate::superblock::{self, fmt_uuid, DecodeError, State, Superblock, DATA_OFFSET, SB_SIZE};
use crate::{bail, Error, ErrorKind, IoBuf, Result, Volume};

/// What `create` is asked to make.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// RAID level number.
    pub level: u32,
    /// Chunk size in bytes.
    pub chunk: u64,
    /// Array name.
    pub name: String,
    /// Overwrite members that hold a superblock or a filesystem.
    pub force: bool,
}

/// An assembled (or just created) array, its members held exclusively.
#[derive(Debug)]
pub struct Array {
    superblocks: Vec<Superblock>,
    volume: Arc<Volume>,
    warnings: Vec<String>,
}

/// What `examine` found on a member.
#[derive(Debug)]
pub enum Examination {
    /// A valid uraid superblock.
    Member(Box<Superblock>),
    /// A uraid superblock that does not decode (why).
    Corrupt(String),
    /// Something else: a filesystem, a partition table (its name).
    Foreign(&'static str),
    /// Nothing known.
    Empty,
}

/// Opens `specs` in order after checking that no drive is named twice.
/// `exclusive` takes each member's lock (see [`OpenMode`]).
pub fn open_members(specs: &[MemberSpec], write: bool, exclusive: bool) -> Result<Vec<Member>> {
    check_distinct(specs)?;
    specs.iter().map(|s| Member::open(s, OpenMode { write, exclusive })).collect()
}

/// Reads the first bytes of `m` and names any known signature on it.
pub fn probe(m: &Member) -> Result<Option<&'static str>> {
    let len = (PROBE_LEN as u64).min(m.size() / 4096 * 4096) as usize;
    if len == 0 {
        return Ok(None);
    }
    let mut buf = IoBuf::new(len);
    m.read_exact_at(&mut buf, 0)?;
    Ok(detect(&buf))
}

fn read_superblock(m: &Member) -> Result<std::result::Result<Superblock, DecodeError>> {
    if m.size() < SB_SIZE as u64 {
        return Ok(Err(DecodeError::NoMagic));
    }
    let mut buf = IoBuf::new(SB_SIZE);
    m.read_exact_at(&mut buf, 0)?;
    Ok(Superblock::decode(&buf))
}

fn write_superblock(m: &Member, sb: &Superblock) -> Result<()> {
    let mut buf = IoBuf::new(SB_SIZE);
    buf.copy_from_slice(&sb.encode());
    m.write_all_at(&buf, 0)
}

/// Looks at one member without taking it: its superblock, or what else is
/// there. Errors: `Io` when it cannot be opened or read.
pub fn examine(spec: &MemberSpec) -> Result<Examination> {
    let m = Member::open(spec, OpenMode { write: false, exclusive: false })?;
    Ok(match read_superblock(&m)? {
        Ok(sb) => Examination::Member(Box::new(sb)),
        Err(DecodeError::NoMagic) => match probe(&m)? {
            Some(sig) => Examination::Foreign(sig),
            None => Examination::Empty,
        },
        Err(e) => Examination::Corrupt(e.to_string()),
    })
}

/// Builds an array that lives only in this process (no superblock is
/// written): RAID 0 over `members` with `chunk`, data from 1 MiB on, as a
/// created array would have it. Used by `bench`, `compare` and `demo`.
pub fn temporary(members: Vec<Member>, chunk: u64) -> Result<(Arc<Volume>, Option<String>)> {
    let (data_size, warning) = data_size(&members, chunk)?;
    let geometry = Geometry::raid0(members.len(), chunk, data_size)?;
    Ok((Volume::new(Arc::new(members), geometry, DATA_OFFSET)?, warning))
}

fn data_size(members: &[Member], chunk: u64) -> Result<(u64, Option<String>)> {
    let need = DATA_OFFSET + chunk;
    for m in members {
        if m.size() < need {
            bail!(
                TooSmall,
                "member {} is too small: it has {} bytes, an array with {} chunks needs at least {} \
                 (1 MiB for the superblock area plus one chunk)",
                m.name(),
                m.size(),
                crate::units::fmt_size(chunk),
                need
            );
        }
    }
    let min = members.iter().map(Member::size).min().unwrap_or(0);
    let max = members.iter().map(Member::size).max().unwrap_or(0);
    let size = (min - DATA_OFFSET) / chunk * chunk;
    let warning = (max != min).then(|| {
        let lost: u64 = members.iter().map(|m| m.size() - min).sum();
        format!(
            "members differ in size: capacity is {} x the smallest ({} bytes), so {} bytes ({}) on the larger members stay unused",
            members.len(),
            min,
            lost,
            crate::units::fmt_size(lost)
        )
    });
    Ok((size, warning))
}

/// Creates an array on `specs` (in role order) and returns it assembled.
///
/// Errors, all before anything is written: `InvalidInput` (chunk, level,
/// name, member count, a drive named twice), `Unsupported` (level not built
/// yet), `Busy` (member in use), `WouldDestroy` (a member holds a superblock
/// or filesystem and `force` is off), `TooSmall`.
pub fn create(specs: &[MemberSpec], opts: &CreateOptions) -> Result<Array> {
    check_chunk(opts.chunk)?;
    let level = Level::from_number(opts.level)?;
    if level != Level::Raid0 {
        bail!(Unsupported, "creating RAID {} arrays is being wired in; use --level 0", level.number());
    }
    superblock::check_name(&opts.name)?;
    if specs.is_empty() || specs.len() > MAX_MEMBERS {
        bail!(InvalidInput, "RAID 0 needs 1 to {MAX_MEMBERS} members, {} given", specs.len());
    }
    let members = open_members(specs, true, true)?;
    if !opts.force {
        for m in &members {
            if let Some(sig) = probe(m)? {
                bail!(
                    WouldDestroy,
                    "member {} holds {sig}; creating an array would destroy it. Nothing was written. \
                     Check the device name, or add --force to overwrite it",
                    m.name()
                );
            }
        }
    }
    let (data_size, warning) = data_size(&members, opts.chunk)?;
    let geometry = Geometry::raid0(members.len(), opts.chunk, data_size)?;
    debug_assert_eq!(geometry.level(), level);
    let array_uuid = superblock::new_uuid();
    let uuids: Vec<[u8; 16]> = members.iter().map(|_| superblock::new_uuid()).collect();
    let now = superblock::unix_now();
    let superblocks: Vec<Superblock> = (0..members.len())
        .map(|i| Superblock {
            array_uuid,
            member_uuid: uuids[i],
            name: opts.name.clone(),
            level: opts.level,
            chunk: opts.chunk,
            member_count: members.len() as u32,
            member_index: i as u32,
            data_offset: DATA_OFFSET,
            data_size: geometry.member_size(),
            ctime: now,
            utime: now,
            events: 1,
            state: State::Active,
            members: uuids.clone(),
        })
        .collect();
    for (m, sb) in members.iter().zip(&superblocks) {
        write_superblock(m, sb)?;
    }
    let volume = Volume::new(Arc::new(members), geometry, DATA_OFFSET)?;
    Ok(Array { superblocks, volume, warnings: warning.into_iter().collect() })
}

/// Assembles the array whose members are `specs`, given in any order, and
/// marks it active (event counter + 1, as md does on assemble).
///
/// Errors, all before anything is written: `InvalidInput` (a drive named
/// twice), `Busy` (in use), `Superblock` (no superblock, a corrupt one, a
/// member of another array, a stale member), `Membership` (a member
/// missing, two members claiming one role), `TooSmall` (a member shrank).
pub fn assemble(specs: &[MemberSpec]) -> Result<Array> {
    let mut a = open(specs)?;
    a.activate()?;
    Ok(a)
}

/// Like [`assemble`], but writes nothing: the members are checked and held
/// exclusively, the superblocks are left as they are. Use
/// [`Array::activate`] before writing data, or [`Array::release`] to let go
/// without a trace (a read-only benchmark).
pub fn open(specs: &[MemberSpec]) -> Result<Array> {
    if specs.is_empty() {
        bail!(InvalidInput, "assemble needs the members of the array");
    }
    let members = open_members(specs, true, true)?;
    let mut sbs = Vec::with_capacity(members.len());
    for m in &members {
        match read_superblock(m)? {
            Ok(sb) => sbs.push(sb),
            Err(DecodeError::NoMagic) => bail!(
                Superblock,
                "{} is not a uraid member (no superblock); check the name, or run 'uraid examine {}'",
                m.name(),
                m.name()
            ),
            Err(e) => bail!(
                Superblock,
                "{} has a damaged superblock: {e}. Nothing was written; the array cannot be \
                 assembled from this member",
                m.name()
            ),
        }
    }
    let first = &sbs[0];
    for (m, sb) in members.iter().zip(&sbs).skip(1) {
        if sb.array_uuid != first.array_uuid {
            bail!(
                Superblock,
                "{} belongs to array '{}' ({}), but {} belongs to array '{}' ({}); give the members of one array",
                m.name(),
                sb.name,
                fmt_uuid(&sb.array_uuid),
                members[0].name(),
                first.name,
                fmt_uuid(&first.array_uuid)
            );
        }
        if sb.member_count != first.member_count
            || sb.chunk != first.chunk
            || sb.level != first.level
            || sb.data_offset != first.data_offset
            || sb.data_size != first.data_size
            || sb.members != first.members
        {
            bail!(
                Superblock,
                "{} and {} disagree on the layout of array '{}'; one of them was changed by hand",
                m.name(),
                members[0].name(),
                first.name
            );
        }
    }
    let max_events = sbs.iter().map(|s| s.events).max().unwrap_or(0);
    let n = first.member_count as usize;
    let mut by_role: Vec<Option<usize>> = vec![None; n];
    for (i, sb) in sbs.iter().enumerate() {
        let role = sb.member_index as usize;
        if sb.members[role] != sb.member_uuid {
            bail!(Superblock, "{} claims role {role} but its UUID is not the one recorded for it", members[i].name());
        }
        if let Some(j) = by_role[role] {
            bail!(
                Membership,
                "{} and {} both claim role {role} of array '{}' (one is a copy of the other?); give each member once",
                members[j].name(),
                members[i].name(),
                first.name
            );
        }
        if sb.events < max_events {
            bail!(
                Superblock,
                "{} is stale: its event counter is {} but the others are at {max_events}; it missed \
                 changes and RAID 0 cannot repair it",
                members[i].name(),
                sb.events
            );
        }
        if members[i].size() < sb.data_offset + sb.data_size {
            bail!(
                TooSmall,
                "{} has {} bytes but the array stores data up to byte {}; was it truncated?",
                members[i].name(),
                members[i].size(),
                sb.data_offset + sb.data_size
            );
        }
        by_role[role] = Some(i);
    }
    if let Some(role) = by_role.iter().position(Option::is_none) {
        let missing: Vec<String> = by_role
            .iter()
            .enumerate()
            .filter(|(_, x)| x.is_none())
            .map(|(r, _)| format!("role {r} (member {})", fmt_uuid(&first.members[r])))
            .collect();
        let _ = role;
        bail!(
            Membership,
            "array '{}' has {n} members but {} were given; missing {}. Give every member",
            first.name,
            specs.len(),
            missing.join(", ")
        );
    }
    if specs.len() > n {
        bail!(Membership, "array '{}' has {n} members but {} were given", first.name, specs.len());
    }
    let level = Level::from_number(first.level)?;
    let geometry = Geometry::new(level, n, first.chunk, first.data_size)?;
    let (chunk, data_offset) = (first.chunk, first.data_offset);
    let _ = chunk;
    // Put members and superblocks in role order.
    let mut slots: Vec<Option<(Member, Superblock)>> = members.into_iter().zip(sbs).map(Some).collect();
    let mut ordered = Vec::with_capacity(n);
    let mut superblocks = Vec::with_capacity(n);
    for i in by_role.into_iter().flatten() {
        let (m, sb) = slots[i].take().expect("each index once");
        ordered.push(m);
        superblocks.push(sb);
    }
    Ok(Array { superblocks, volume: Volume::new(Arc::new(ordered), geometry, data_offset)?, warnings: Vec::new() })
}

impl Array {
    /// The volume to do I/O on.
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }
    /// Superblocks in role order.
    pub fn superblocks(&self) -> &[Superblock] {
        &self.superblocks
    }
    /// Array name.
    pub fn name(&self) -> &str {
        &self.superblocks[0].name
    }
    /// Array UUID.
    pub fn uuid(&self) -> String {
        fmt_uuid(&self.superblocks[0].array_uuid)
    }
    /// Warnings to show the user (unequal members).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn update(&mut self, state: State) -> Result<()> {
        let now = superblock::unix_now();
        for (m, sb) in self.volume.members().iter().zip(self.superblocks.iter_mut()) {
            sb.events += 1;
            sb.state = state;
            sb.utime = now;
            write_superblock(m, sb)?;
        }
        Ok(())
    }

    /// Marks the array active in every superblock (event counter + 1).
    pub fn activate(&mut self) -> Result<()> {
        self.update(State::Active)
    }

    /// Lets go of the members without writing anything.
    pub fn release(self) {}

    /// Flushes the members, marks the array clean in every superblock and
    /// releases the members.
    pub fn stop(mut self) -> Result<()> {
        self.volume.flush()?;
        self.update(State::Clean)
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Error {
        Error::new(ErrorKind::Superblock, e.to_string())
    }
}
