//! Distributed spare space of a declustered volume (issue 33), on the
//! control path: the assignments the superblock records (which spare holds
//! which role, bytes 123..128 of the volume's entry; the role is
//! [`Spared`](MemberState::Spared), its slot's recovery offset the
//! rebuild's checkpoint) loaded into the health's
//! [`SpareMap`](crate::raid::spare::SpareMap) at assemble, and a free
//! spare taken for each failed role when the array is activated (stopped:
//! `uraid rebuild`, assemble; served: the maintenance pass). The rebuild
//! itself is `control::maint`'s (`draid_spare.rs` writes the spare
//! chunks); the data path reads and writes a held role through the map.
//! When a device takes a held role, the spare keeps holding it while the
//! role is rebuilt onto the device by copying the spare chunks (the
//! rebalance: the role is rebuilding, its record kept), and is freed at
//! the end ([`Array::end_rebalance`]).
//!
//! Distributed spares are taken only when the array's one volume is
//! declustered: a Matrix array's other volumes would need the role's own
//! device.

use std::sync::Arc;

use super::Array;
use crate::raid::health::MemberState;
use crate::raid::spare::SpareMap;
use crate::Result;

/// One distributed spare in use, for status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpareUse {
    /// The distributed spare's number (below S).
    pub spare: u32,
    /// The role it holds.
    pub role: u32,
    /// Absolute member byte the rebuild into it reached; `None` when in
    /// sync.
    pub recovery_offset: Option<u64>,
    /// While a device that took the role is rebuilt from the spare (the
    /// rebalance): the absolute member byte it reached (below it the
    /// role's bytes are on the device, from it on in the spare chunks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalanced_to: Option<u64>,
}

impl Array {
    /// Loads the superblock's spare assignments into the health (at
    /// assemble and create): a record whose role is not spared any more
    /// is dropped, and a spared role without a record is failed.
    pub(super) fn load_spare_space(&mut self) {
        let sm = {
            let mut m = self.meta();
            let n = m.n();
            let one = m.sb.volumes.len() == 1;
            let Some(d) = m.sb.volumes.first_mut().and_then(|v| v.draid.as_mut()) else { return };
            for k in 0..d.held.len() as u32 {
                if let Some(r) = d.role_of(k) {
                    // A role rebuilding keeps its spare: the rebalance.
                    if !one || r as usize >= n || !matches!(self.health.state(r), MemberState::Spared | MemberState::Rebuilding) {
                        d.held[k as usize] = 0;
                    }
                }
            }
            let held = *d;
            for r in 0..n as u32 {
                if self.health.state(r) == MemberState::Spared && held.spare_of(r).is_none() {
                    self.health.set_state(r, MemberState::Faulty);
                }
            }
            if !one {
                return;
            }
            let vol = &self.vols.all()[0];
            let Some(l) = vol.raid().geometry().layout() else { return };
            let Some(map) = l.draid() else { return };
            let sm = SpareMap::new(*map, l.chunk(), vol.raid().data_offset(), vol.raid().geometry().member_size());
            for r in 0..n as u32 {
                sm.set(r, held.spare_of(r));
            }
            sm
        };
        self.health.set_spare_map(Arc::new(sm));
    }

    /// Puts a free distributed spare into each failed (faulty or missing)
    /// role of the array's declustered volume, lowest spare first, and
    /// marks the role [`Spared`](MemberState::Spared) from recovery offset
    /// 0 ([`rebuild`](Self::rebuild) then fills the spare chunks); the
    /// assignment is persisted. A failed role that a spare held loses that
    /// spare first (its spare chunks are lost with it). Returns the roles
    /// taken.
    ///
    /// Errors: `Io` from the superblock writes.
    pub fn take_distributed_spares(&mut self) -> Result<Vec<u32>> {
        let Some(sm) = self.health.spare_map().cloned() else { return Ok(Vec::new()) };
        if self.inspect || self.health.writes_stopped() {
            return Ok(Vec::new());
        }
        let mut taken = Vec::new();
        {
            let mut m = self.meta();
            let n = m.n() as u32;
            let Some(d) = m.sb.volumes.first_mut().and_then(|v| v.draid.as_mut()) else { return Ok(Vec::new()) };
            for r in 0..n {
                if !matches!(self.health.state(r), MemberState::Faulty | MemberState::Missing) {
                    continue;
                }
                if let Some(k) = d.spare_of(r) {
                    d.held[k as usize] = 0;
                    sm.set(r, None);
                }
                let Some(k) = d.free_spare() else { continue };
                d.held[k as usize] = r as u8 + 1;
                sm.set(r, Some(k));
                self.health.set_state(r, MemberState::Spared);
                taken.push(r);
            }
        }
        if !taken.is_empty() {
            self.persist()?;
        }
        Ok(taken)
    }

    /// A device takes `role` (a replacement, a dedicated spare), which
    /// the caller then makes rebuilding: when a distributed spare holds the
    /// role in sync, it keeps holding it during the rebuild onto the device
    /// (the rebalance copies its spare chunks, and the volume stays
    /// redundant: see [`Health::rebalancing`](crate::raid::health::Health::rebalancing));
    /// otherwise the spare (its rebuild unfinished) is freed at once and the
    /// device is rebuilt from the others.
    pub(super) fn hand_over(&mut self, role: u32) {
        let in_sync = self.health.state(role) == MemberState::Spared && self.health.recovery(role) == u64::MAX;
        if !in_sync {
            self.retire_spare(role);
        }
    }

    /// Frees the distributed spare of `role` once the rebalance onto its
    /// device ended (the role is active): called after each rebuild; the
    /// caller persists.
    pub(super) fn end_rebalance(&mut self, role: u32) {
        if self.health.state(role) == MemberState::Active && self.health.spare_map().is_some_and(|sm| sm.spare_of(role).is_some()) {
            self.retire_spare(role);
        }
    }

    /// Ends the hold of a distributed spare on `role`: its spare chunks
    /// are free again. The caller persists the change (with the role's
    /// new state).
    pub(super) fn retire_spare(&mut self, role: u32) {
        if let Some(sm) = self.health.spare_map() {
            sm.set(role, None);
        }
        self.health.note_spared();
        let mut m = self.meta();
        if let Some(d) = m.sb.volumes.first_mut().and_then(|v| v.draid.as_mut()) {
            if let Some(k) = d.spare_of(role) {
                d.held[k as usize] = 0;
            }
        }
    }

    /// True when activating would put a distributed spare into a failed
    /// role: the array's volume is declustered, has a free spare, and a
    /// role is faulty or missing.
    pub fn distributed_spare_due(&self) -> bool {
        if self.health.spare_map().is_none() {
            return false;
        }
        let m = self.meta();
        let Some(d) = m.sb.volumes.first().and_then(|v| v.draid) else { return false };
        d.free_spare().is_some() && (0..m.n() as u32).any(|r| matches!(self.health.state(r), MemberState::Faulty | MemberState::Missing))
    }

    /// The distributed spares in use, lowest first.
    pub fn spare_space(&self) -> Vec<SpareUse> {
        spare_uses(&self.health)
    }
}

/// The distributed spares in use in `health`'s spare map, lowest first.
pub(super) fn spare_uses(health: &crate::raid::health::Health) -> Vec<SpareUse> {
    let Some(sm) = health.spare_map() else { return Vec::new() };
    (0..sm.draid().spares())
        .filter_map(|k| {
            let role = sm.role_of(k)?;
            let rec = health.recovery(role);
            if health.rebalancing(role) {
                return Some(SpareUse { spare: k, role, recovery_offset: None, rebalanced_to: Some(rec) });
            }
            Some(SpareUse { spare: k, role, recovery_offset: (rec != u64::MAX).then_some(rec), rebalanced_to: None })
        })
        .collect()
}
