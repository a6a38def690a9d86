//! Rebuild into distributed spare space (issue 33): where a rebuild of a
//! role writes. A replacement device takes the role's bytes as one range;
//! a role a distributed spare holds
//! ([`Spared`](crate::raid::health::MemberState::Spared)) takes each chunk
//! row's bytes on the member holding that row's spare chunk, so a batch's
//! writes go to every survivor at once (one thread per member written).

use crate::io::member::Member;
use crate::raid::access::{sync, write_member, zero_member};
use crate::raid::health::{Health, MemberState};
use crate::raid::spare::SpareMap;
use crate::Result;

/// Where a rebuild of one role writes.
pub(super) enum Target<'a> {
    /// The role's own device (a replacement, a spare taking the role).
    Device(&'a Member),
    /// The spare chunks of a declustered volume's distributed spare.
    Spread {
        /// Every role's device.
        members: &'a [Member],
        /// Where each row's spare chunk is.
        sm: &'a SpareMap,
    },
}

impl<'a> Target<'a> {
    /// The target of a rebuild of `role`: spread when a distributed spare
    /// holds it.
    pub(super) fn of(members: &'a [Member], health: &'a Health, role: u32) -> Target<'a> {
        match health.spare_map() {
            Some(sm) if health.state(role) == MemberState::Spared => Target::Spread { members, sm },
            _ => Target::Device(&members[role as usize]),
        }
    }

    /// True for a rebuild into distributed spare space.
    pub(super) fn spread(&self) -> bool {
        matches!(self, Target::Spread { .. })
    }

    /// The runs of `[start, start + len)` of `role` by the member that
    /// holds them: (member, offset, len), one per chunk row in the spare
    /// map's volume; a row whose spare chunk is on a member whose role
    /// another spare holds goes where that role keeps its row
    /// ([`Health::physical`]). Rows that land on no member in service are
    /// left out: they stay degraded.
    fn runs(sm: &SpareMap, health: &Health, role: u32, start: u64, len: u64) -> Vec<(u32, u64, u64)> {
        let mut runs = Vec::new();
        let (mut at, end) = (start, start + len);
        while at < end {
            let stop = sm.row_end(at).min(end);
            // Where the row lives (the spare chunk, or where the role held
            // in the spare chunk's member keeps its row: draid6's second
            // spare).
            let x = health.physical(role, at);
            if x != role && matches!(health.state(x), MemberState::Active | MemberState::Rebuilding) {
                runs.push((x, at, stop - at));
            }
            at = stop;
        }
        runs
    }

    /// Writes `buf` (the role's bytes from absolute `start`), or zeros
    /// when `buf` is `None` over `len` bytes. A member whose write fails is
    /// failed in `health` and the error returned.
    pub(super) fn write(&self, health: &Health, role: u32, buf: Option<&[u8]>, start: u64, len: u64) -> Result<()> {
        let (members, sm) = match self {
            Target::Device(m) => {
                let r = match buf {
                    Some(b) => write_member(m, &b[..len as usize], start),
                    None => zero_member(m, start, len),
                };
                if r.is_err() {
                    health.fail(role)?;
                }
                return r;
            }
            Target::Spread { members, sm } => (*members, *sm),
        };
        let runs = Self::runs(sm, health, role, start, len);
        let mut by_member: Vec<Vec<(u64, u64)>> = vec![Vec::new(); members.len()];
        for &(x, at, n) in &runs {
            by_member[x as usize].push((at, n));
        }
        let errors: Vec<(u32, crate::Error)> = std::thread::scope(|s| {
            let handles: Vec<_> = by_member
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.is_empty())
                .map(|(x, r)| {
                    s.spawn(move || {
                        for &(at, n) in r {
                            let res = match buf {
                                Some(b) => write_member(&members[x], &b[(at - start) as usize..(at - start + n) as usize], at),
                                None => zero_member(&members[x], at, n),
                            };
                            if let Err(e) = res {
                                return Some((x as u32, e));
                            }
                        }
                        None
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().expect("spare write thread panicked")).collect()
        });
        let mut first = None;
        for (x, e) in errors {
            health.fail(x)?;
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }

    /// Makes what was written durable: the device, or every member in
    /// service.
    pub(super) fn sync(&self, health: &Health, role: u32) -> Result<()> {
        match self {
            Target::Device(m) => sync(m, health, role),
            Target::Spread { members, .. } => {
                for (x, m) in members.iter().enumerate() {
                    let x = x as u32;
                    if x != role && matches!(health.state(x), MemberState::Active | MemberState::Rebuilding) {
                        sync(m, health, x)?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Whose chunk rebuild target `target`'s chunk in member row `r` holds:
/// its own, or, when that chunk is a spare chunk of a distributed spare
/// holding another role, that role's (rebuilt from that role's stripe:
/// the target's device, or where it lives now, keeps the held role's row).
pub(super) fn content_of(health: &Health, target: u32, r: u64) -> u32 {
    let Some(sm) = health.spare_map() else { return target };
    let d = sm.draid();
    (0..d.spares()).find(|&k| d.spare(r, k) == target).and_then(|k| sm.role_of(k)).filter(|&x| x != target).unwrap_or(target)
}
