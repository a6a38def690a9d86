//! Looking at a device without taking it: its superblock, another known
//! format on it (a filesystem, a journal), or nothing.

use super::meta::read_superblock;
use super::open_member;
use crate::control::signature::{detect, PROBE_LEN};
use crate::control::superblock::{DecodeError, Superblock};
use crate::io::member::{Member, MemberSpec, OpenMode};
use crate::{IoBuf, Result};

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

/// Looks at one member without taking it: its superblock, or what else is
/// there. Errors: `Io` when it cannot be opened or read.
pub fn examine(spec: &MemberSpec) -> Result<Examination> {
    let m = open_member(spec, OpenMode { write: false, exclusive: false })?;
    Ok(match read_superblock(&m)? {
        Ok(sb) => Examination::Member(Box::new(sb)),
        Err(DecodeError::NoMagic) => match probe(&m)? {
            Some(sig) => Examination::Foreign(sig),
            None => Examination::Empty,
        },
        Err(e) => Examination::Corrupt(e.to_string()),
    })
}

impl Examination {
    /// True for what the commands that assemble an array take: a member
    /// (a superblock) or a journal ([`crate::cache::journal`]).
    pub fn is_array_device(&self) -> bool {
        match self {
            Examination::Member(_) => true,
            Examination::Foreign(sig) => *sig == crate::control::signature::JOURNAL,
            _ => false,
        }
    }
}

/// True when `specs` are the devices of an array, as the commands that
/// assemble one take them: at least one carries a uraid superblock and
/// every other one does or is a journal ([`crate::cache::journal`]). A device
/// that cannot be read counts as neither.
pub fn are_array_devices(specs: &[MemberSpec]) -> bool {
    let found: Vec<Option<Examination>> = specs.iter().map(|s| examine(s).ok()).collect();
    found.iter().any(|e| matches!(e, Some(Examination::Member(_)))) && found.iter().all(|e| e.as_ref().is_some_and(Examination::is_array_device))
}
