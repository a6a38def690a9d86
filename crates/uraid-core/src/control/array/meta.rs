//! The persistent state of an array ([`Meta`]): the authoritative
//! superblock, the device in each slot and how it was named, and the
//! member handles the volumes are built over; writing it to every member
//! (the event counter goes up by one each time), and reading one member's.

use std::sync::Arc;

use super::open_member;
use super::survival::{down_roles, lost_volumes};
use crate::control::superblock::{DecodeError, Superblock, SB_SIZE};
use crate::io::member::{Limits, MemSpec, Member, MemberSpec, OpenMode};
use crate::raid::health::{Health, MemberState};
use crate::{IoBuf, Result};

/// The persistent state of an array, shared with the [`Health`] hook that
/// persists member failures met by the data path.
pub(super) struct Meta {
    /// The authoritative superblock: slot and volume tables, events,
    /// clean/active. `member_uuid` and `slot` are filled in per device on
    /// every write.
    pub(super) sb: Superblock,
    /// The device in each slot (roles, then spares), `None` where no
    /// device is held.
    pub(super) devices: Vec<Option<Member>>,
    /// How each device was named, for finding it again by path.
    pub(super) specs: Vec<Option<MemberSpec>>,
    /// One member per role for the volumes: a handle on the device, or an
    /// empty placeholder (`mem:`) where no device is held, which the data
    /// path never touches (its state is faulty or missing).
    pub(super) roles: Arc<Vec<Member>>,
}

impl Meta {
    pub(super) fn n(&self) -> usize {
        self.sb.member_count as usize
    }

    /// Rebuilds the per-role member list after a device came or went.
    pub(super) fn rebuild_roles(&mut self) -> Result<()> {
        debug_assert!(self.devices.len() == self.sb.slots.len() && self.specs.len() == self.sb.slots.len(), "one device and spec per slot");
        debug_assert!(
            {
                let held: Vec<_> = (0..self.devices.len()).filter(|&s| self.devices[s].is_some()).map(|s| self.sb.slots[s].uuid).collect();
                held.iter().enumerate().all(|(i, u)| !held[..i].contains(u))
            },
            "each device held has a member UUID of its own"
        );
        let end = self.sb.data_end();
        let roles = (0..self.n())
            .map(|r| match &self.devices[r] {
                Some(m) => m.try_clone(),
                None => placeholder(end),
            })
            .collect::<Result<Vec<_>>>()?;
        self.roles = Arc::new(roles);
        Ok(())
    }

    /// Copies the role states of `health` into the slot table, bumps the
    /// event counter and writes the superblock of every held device that
    /// is not faulty. A role whose write fails is marked faulty (as md
    /// does) and the others are written again; the first error is
    /// returned when a device could not be written.
    pub(super) fn persist(&mut self, health: &Health) -> Result<()> {
        let mut first_err = None;
        for _ in 0..=self.sb.slots.len() {
            for r in 0..self.n() {
                let state = health.state(r as u32);
                self.sb.slots[r].state = state;
                self.sb.slots[r].recovery_offset = matches!(state, MemberState::Rebuilding | MemberState::Spared)
                    .then(|| health.recovery(r as u32))
                    .filter(|&o| o != u64::MAX);
                if state != MemberState::Rebuilding {
                    self.sb.slots[r].resync_from_bitmap = false;
                }
            }
            let before = self.sb.events;
            self.sb.next_event()?;
            debug_assert_eq!(self.sb.events, before + 1, "every superblock write is one event newer");
            let mut failed_role = false;
            for (slot, dev) in self.devices.iter().enumerate() {
                let Some(m) = dev else { continue };
                if slot < self.n() && matches!(self.sb.slots[slot].state, MemberState::Faulty | MemberState::Missing | MemberState::Spared) {
                    continue;
                }
                let mut sb = self.sb.clone();
                sb.slot = slot as u32;
                sb.member_uuid = sb.slots[slot].uuid;
                if let Err(e) = write_superblock(m, &sb) {
                    if slot < self.n() {
                        health.set_state(slot as u32, MemberState::Faulty);
                        failed_role = true;
                    }
                    first_err.get_or_insert(e);
                }
            }
            if !failed_role {
                break;
            }
        }
        // Past a volume's tolerance nothing more may be written (the
        // superblocks above still record which members are gone).
        if !lost_volumes(&self.sb, &down_roles(health)).is_empty() {
            health.stop_writes();
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub(super) fn read_superblock(m: &Member) -> Result<std::result::Result<Superblock, DecodeError>> {
    if m.size() < SB_SIZE as u64 {
        return Ok(Err(DecodeError::NoMagic));
    }
    let mut buf = IoBuf::new(SB_SIZE);
    m.read_exact_at(&mut buf, 0)?;
    Ok(Superblock::decode(&buf))
}

pub(super) fn write_superblock(m: &Member, sb: &Superblock) -> Result<()> {
    let mut buf = IoBuf::new(SB_SIZE);
    buf.copy_from_slice(&sb.encode());
    m.write_all_at(&buf, 0)
}

/// An empty stand-in for a role without a device: a sparse emulated drive
/// of `size` bytes (no memory is used until written, and the data path
/// never writes a faulty or missing member).
pub(super) fn placeholder(size: u64) -> Result<Member> {
    open_member(
        &MemberSpec::Mem(MemSpec { size, limits: Limits::default() }),
        OpenMode { write: true, exclusive: false },
    )
}
