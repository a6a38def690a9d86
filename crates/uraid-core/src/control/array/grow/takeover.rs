//! Level changes in which no data moves (md's takeovers: RAID 1 <-> 10
//! over 2, RAID 0 -> 5, 5 -> 6 and 0 -> 10, a RAID 1's new copies): the
//! superblocks change, and the new roles are rebuilt, for a stopped array
//! or a served one (its users paused for the switch).

use super::live::array_over;
use super::plan::Takeover;
use super::{open, persist_all, slot_order, GrowOptions, GrowReport, NewMember, open_added, with_new_roles};
use crate::control::array::Array;
use crate::control::superblock::{self, Slot, State, Superblock};
use crate::io::member::{Member, MemberSpec};
use crate::raid::health::MemberState;
use crate::Result;

/// The devices (slot order) and the superblock (not yet written) of
/// takeover `t` of the opened, checked array `a` (superblock `sb`) with
/// the new devices `added`: the new roles rebuilding from their start.
pub(super) fn takeover(a: &Array, sb: &Superblock, t: &Takeover, added: &[NewMember]) -> Result<(Vec<Member>, Vec<Option<MemberSpec>>, Superblock)> {
    let n = sb.member_count as usize;
    let specs = a.meta().specs.clone();
    let new_specs = || specs[..n].iter().cloned().chain(added.iter().map(|(s, _)| Some(s.clone()))).chain(specs[n..].iter().cloned()).collect();
    match *t {
        Takeover::Relabel(to) => {
            let mut new_sb = sb.clone();
            new_sb.volumes[0].level = to;
            Ok((slot_order(a, n, &[])?, specs.clone(), new_sb))
        }
        Takeover::Rebuilt(to) => {
            let mut new_sb = with_new_roles(sb, added.len(), MemberState::Rebuilding, Some(0));
            if to != sb.volumes[0].level {
                new_sb.volumes[0].level = to;
                new_sb.volumes[0].layout = crate::raid::layout::Variant::ParityLast.to_u8();
            }
            Ok((slot_order(a, n, added)?, new_specs(), new_sb))
        }
        Takeover::Mirror => {
            let mut old = slot_order(a, n, &[])?;
            let spare_devs = old.split_off(n);
            let spares: Vec<Slot> = sb.spares().to_vec();
            let mut devs = Vec::with_capacity(2 * n + spare_devs.len());
            let mut slots = Vec::with_capacity(2 * n + spares.len());
            let mut names = Vec::with_capacity(2 * n + spares.len());
            for (i, (m, (spec, new))) in old.into_iter().zip(added).enumerate() {
                devs.push(m);
                devs.push(new.try_clone()?);
                names.push(specs[i].clone());
                names.push(Some(spec.clone()));
                slots.push(sb.slots[i]);
                slots.push(Slot { uuid: superblock::new_uuid(), state: MemberState::Rebuilding, resync_from_bitmap: false, recovery_offset: Some(0) });
            }
            devs.extend(spare_devs);
            slots.extend(spares);
            names.extend(specs[n..].iter().cloned());
            let mut new_sb = sb.clone();
            new_sb.slots = slots;
            new_sb.member_count = (2 * n) as u32;
            new_sb.volumes[0].level = 10;
            Ok((devs, names, new_sb))
        }
    }
}

/// The end of a growth that adds copies (RAID 1's more copies, RAID 0 ->
/// 10, the parity of RAID 0 -> 5 and 5 -> 6): the array over `specs` and
/// `added`, whose new roles the
/// superblocks record as rebuilding, is assembled and rebuilt, then
/// stopped. Errors: from the assemble or the rebuild (the rebuild goes on
/// from its checkpoint at the next assemble).
#[allow(clippy::too_many_arguments)]
pub(super) fn rebuild_copies(
    specs: &[MemberSpec],
    added: Vec<NewMember>,
    name: &str,
    level: u32,
    before: u32,
    opts: &GrowOptions,
    progress: &mut dyn FnMut(u64, u64),
    t0: std::time::Instant,
) -> Result<GrowReport> {
    let all: Vec<MemberSpec> = specs.iter().cloned().chain(added.into_iter().map(|(s, _)| s)).collect();
    let mut arr = open(&all)?;
    arr.activate_for_rebuild()?;
    let capacity = arr.volume().raid().capacity();
    let members = arr.member_count();
    let reports = arr.rebuild(opts.rate, &mut |_, done, total| progress(done, total))?;
    arr.stop()?;
    let written: u64 = reports.iter().map(|r| r.bytes_written).sum();
    Ok(GrowReport {
        array: name.to_string(),
        level,
        members: (before, members),
        volumes: 1,
        capacity: (capacity, capacity),
        started_at: 0,
        bytes_read: written,
        bytes_written: written,
        backed_up_rows: 0,
        seconds: crate::clock::since(t0).as_secs_f64(),
    })
}

impl Array {
    /// Takeover `t` of this served array (see [`Array::grow_live`]).
    pub(super) fn takeover_live(
        &mut self,
        sb: &Superblock,
        t: &Takeover,
        opts: &GrowOptions,
        quiet: &mut dyn FnMut() -> Result<()>,
        t0: std::time::Instant,
    ) -> Result<GrowReport> {
        let added = open_added(self, opts)?;
        let (devs, specs, mut new_sb) = takeover(self, sb, t, &added)?;
        quiet()?;
        for v in self.vols.all() {
            v.flush()?;
        }
        // The users are quiet and their writes on the members: the new
        // array starts clean (activate marks it active).
        self.daemon = None;
        new_sb.state = State::Clean;
        if let Err(e) = persist_all(&devs, &mut new_sb) {
            self.start_daemon();
            return Err(e);
        }
        self.frozen = true;
        self.health.set_on_change(|_, _| Ok(()));
        *self = array_over(&devs, specs, &new_sb)?;
        let capacity = self.volume().capacity();
        Ok(GrowReport::unmoved(sb.name.clone(), new_sb.volumes[0].level, (sb.member_count, new_sb.member_count), capacity, crate::clock::since(t0).as_secs_f64()))
    }
}
