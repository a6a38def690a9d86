//! Benchmark targets: what `uraid suite` compares side by side.
//!
//! A target is written `[LABEL=]SPEC[+SPEC...]`: one file, block device or
//! `mem:` drive is benchmarked raw (a kernel md device, a file on a btrfs
//! raid0, one NVMe drive); several joined with `+` are an array: assembled
//! from their superblocks when they carry one, else a temporary RAID 0
//! (nothing persisted). One member of a uraid array given alone is
//! benchmarked over its data area, leaving its superblock alone.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use uraid_core::control::array::{self, Array, Examination};
use uraid_core::io::member::DATA_OFFSET;
use uraid_core::units::fmt_size;
use uraid_core::{bail, Geometry, MemberSpec, Result, Volume};

use crate::machine::{member_info, MemberInfo};

/// A target as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// The label given, if any.
    pub label: Option<String>,
    /// Its members (one for a raw target).
    pub specs: Vec<MemberSpec>,
    /// The text as given.
    pub text: String,
}

impl std::str::FromStr for TargetSpec {
    type Err = uraid_core::Error;

    /// Parses `[LABEL=]SPEC[+SPEC...]`. The label may not contain `/`, `:`
    /// or `,` (so `mem:1G,bw=250M` and paths with `=` are not split); a
    /// path that exists as given is never split at `+`.
    fn from_str(s: &str) -> Result<TargetSpec> {
        let (label, rest) = match s.split_once('=') {
            Some((l, r)) if !l.is_empty() && !l.contains(['/', ':', ',']) && !Path::new(s).exists() => (Some(l.to_string()), r),
            _ => (None, s),
        };
        if rest.is_empty() {
            bail!(InvalidInput, "target '{s}' names no drive; write [LABEL=]PATH or LABEL=PATH+PATH for an array");
        }
        let parts: Vec<&str> = if Path::new(rest).exists() { vec![rest] } else { rest.split('+').collect() };
        let specs = parts
            .iter()
            .map(|p| {
                if p.is_empty() {
                    bail!(InvalidInput, "target '{s}' has an empty member between '+' signs");
                }
                p.parse::<MemberSpec>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TargetSpec { label, specs, text: s.to_string() })
    }
}

/// How a target was opened.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub enum TargetKind {
    /// One drive or file, from byte 0.
    Raw,
    /// A uraid array assembled from its superblocks (its name).
    Array(String),
    /// The data area of one member of a uraid array (the array's name).
    MemberDataArea(String),
    /// An array made for this run over raw drives (chunk in bytes; RAID 0
    /// unless `uraid bench --level` asks for another level).
    Temporary(u64),
}

/// An open target.
pub struct Target {
    /// Label in tables and charts.
    pub label: String,
    /// What to do I/O on.
    pub vol: Arc<Volume>,
    /// How it was opened.
    pub kind: TargetKind,
    /// One line for the reader.
    pub description: String,
    /// What each member is and sits on.
    pub members: Vec<MemberInfo>,
    /// Warnings to show (unequal members).
    pub warnings: Vec<String>,
    array: Option<Array>,
}

/// How to open targets.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Chunk of a temporary RAID 0 in bytes.
    pub chunk: u64,
    /// Treat drives as raw even when they carry a uraid superblock.
    pub raw: bool,
    /// The tests will write.
    pub writes: bool,
    /// Allow writing over a filesystem, a partition table or a superblock.
    pub overwrite: bool,
}

fn refuse(what: &str, sig: &str) -> uraid_core::Error {
    uraid_core::Error::new(
        uraid_core::ErrorKind::WouldDestroy,
        format!(
            "{what} holds {sig}; the write tests would destroy it. Nothing was written. \
             Use --read-only, or --overwrite if you mean it"
        ),
    )
}

/// Opens `spec`. `index` numbers unlabelled targets.
///
/// Errors: a member that cannot be opened or is busy, an array that does
/// not assemble, and write tests on a target holding data without
/// `overwrite` (nothing is written then).
pub fn open(spec: &TargetSpec, index: usize, o: OpenOptions) -> Result<Target> {
    // The journal of a volume whose cache keeps one is given with the
    // members, as to every command that assembles the array.
    let all_members = !o.raw && array::are_array_devices(&spec.specs);
    let mut warnings = Vec::new();
    let (vol, kind, array) = if all_members {
        match array::assemble(&spec.specs) {
            Ok(arr) => {
                let v = arr.volume().clone();
                let head = v.read_at(0, (uraid_core::control::signature::PROBE_LEN as u64).min(v.capacity()) as usize & !4095)?;
                if o.writes && !o.overwrite {
                    if let Some(sig) = uraid_core::control::signature::detect(&head) {
                        let name = arr.name().to_string();
                        drop(v);
                        let _ = arr.stop();
                        return Err(refuse(&format!("array '{name}'"), sig));
                    }
                }
                let name = arr.name().to_string();
                (v, TargetKind::Array(name), Some(arr))
            }
            Err(e) if spec.specs.len() == 1 => {
                // One member of a larger array: its data area.
                let Ok(Examination::Member(sb)) = array::examine(&spec.specs[0]) else { return Err(e) };
                let members = array::open_members(&spec.specs, o.writes, true)?;
                if o.writes && !o.overwrite {
                    return Err(refuse(
                        &format!("{} (a member of array '{}')", members[0].name(), sb.name),
                        "array data in its data area",
                    ));
                }
                let m = members.into_iter().next().expect("one member");
                let size = m.size().saturating_sub(DATA_OFFSET);
                let v = Volume::new(Arc::new(vec![m]), Geometry::single(size), DATA_OFFSET)?;
                (v, TargetKind::MemberDataArea(sb.name.clone()), None)
            }
            Err(e) => return Err(e),
        }
    } else {
        let members = array::open_members(&spec.specs, o.writes, true)?;
        if o.writes && !o.overwrite {
            for m in &members {
                if let Some(sig) = array::probe(m)? {
                    return Err(refuse(m.name(), sig));
                }
            }
        }
        if members.len() == 1 {
            let m = members.into_iter().next().expect("one member");
            let size = m.size();
            (Volume::new(Arc::new(vec![m]), Geometry::single(size), 0)?, TargetKind::Raw, None)
        } else {
            let (v, warn) = array::temporary(members, o.chunk)?;
            warnings.extend(warn);
            (v, TargetKind::Temporary(o.chunk), None)
        }
    };
    let members: Vec<MemberInfo> = vol.raid().members().iter().map(member_info).collect();
    let label = spec.label.clone().unwrap_or_else(|| match (&kind, vol.raid().members().len()) {
        (TargetKind::Raw, _) | (TargetKind::MemberDataArea(_), _) => vol.raid().members()[0].name().to_string(),
        (TargetKind::Array(n), k) => format!("{n} (RAID {} x{k})", vol.raid().geometry().level().number()),
        (TargetKind::Temporary(_), k) => format!("RAID {} x{k}", vol.raid().geometry().level().number()),
    });
    let _ = index;
    let description = describe(&vol, &kind);
    Ok(Target { label, vol, kind, description, members, warnings, array })
}

/// One line describing `vol` opened as `kind`.
pub fn describe(vol: &Volume, kind: &TargetKind) -> String {
    let names: Vec<String> = vol
        .raid().members()
        .iter()
        .map(|m| format!("{}{}", m.name(), if m.direct() || matches!(m.kind(), uraid_core::io::member::MemberKind::Mem | uraid_core::io::member::MemberKind::Null) { "" } else { " (buffered)" }))
        .collect();
    let geo = vol.raid().geometry();
    match kind {
        TargetKind::Raw => format!("{} ({} bytes, {})", names[0], vol.capacity(), fmt_size(vol.capacity())),
        TargetKind::MemberDataArea(a) => {
            format!("{} data area (member of array '{a}'), {} bytes from offset {}", names[0], vol.capacity(), vol.raid().data_offset())
        }
        TargetKind::Array(n) => format!(
            "array '{n}': RAID {} over {} members, chunk {}, {} bytes, cache {}: {}",
            geo.level().number(),
            vol.raid().members().len(),
            fmt_size(geo.chunk()),
            vol.capacity(),
            match vol.cache() {
                Some(c) => format!("{} {}", c.config().mode.name(), fmt_size(c.config().size)),
                None => "off".to_string(),
            },
            names.join(" ")
        ),
        TargetKind::Temporary(c) => format!(
            "temporary RAID {} over {} members, chunk {}, {} bytes: {}",
            geo.level().number(),
            vol.raid().members().len(),
            fmt_size(*c),
            vol.capacity(),
            names.join(" ")
        ),
    }
}

impl Target {
    /// Releases the target: an assembled array is flushed and marked clean.
    pub fn close(self) -> Result<()> {
        let Target { vol, array, .. } = self;
        drop(vol);
        match array {
            Some(a) => a.stop(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_specs_parse() {
        let t: TargetSpec = "array=mem:64M+mem:64M".parse().unwrap();
        assert_eq!(t.label.as_deref(), Some("array"));
        assert_eq!(t.specs.len(), 2);
        let t: TargetSpec = "mem:64M,bw=250M,iops=1000".parse().unwrap();
        assert_eq!((t.label, t.specs.len()), (None, 1));
        let t: TargetSpec = "/dev/loop0+/dev/loop1".parse().unwrap();
        assert_eq!((t.label, t.specs.len()), (None, 2));
        let t: TargetSpec = "md=/dev/md0".parse().unwrap();
        assert_eq!(t.specs, vec![MemberSpec::Path("/dev/md0".into())]);
        assert!("x=".parse::<TargetSpec>().is_err());
        assert!("a=mem:64M++mem:64M".parse::<TargetSpec>().unwrap_err().to_string().contains("empty member"));
    }
}
