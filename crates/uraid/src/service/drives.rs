//! The console's drives panel (issue 32): every block device of the
//! machine that could hold data (disks, their partitions, loop devices
//! with a backing file), who it is (`uraid_core::io::identity`), its last
//! health reading, and what it is used for: a role, spare or faulty
//! member of this array, a member of another uraid array, mounted, swap,
//! held by another driver (dm, md, a kernel NVMe target...), split into
//! partitions, holding a known signature, or free. As Cockpit's storage
//! page and `lsblk -f` show it; the console offers "add as spare" only on
//! free ones, and the server checks again when asked (`may_use`).
//!
//! Not listed: devices of size 0, RAM disks, zram, and block devices that
//! are built on others (dm, md, ublk, nbd): they are not drives.

use std::fs;
use std::path::PathBuf;

use serde::Serialize;
use uraid_core::control::array::{self, ArrayStatus, Examination};
use uraid_core::io::identity::{identity_of_sys, read_trim, Identity};

use super::health::Health;

/// One block device as the drives panel shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Drive {
    /// `/dev/NAME`.
    pub device: String,
    /// `disk`, `partition` or `loop`.
    pub kind: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Who the disk (or the partition's disk) is; `None` for loop devices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// The last health reading, for members of this array that are polled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// What it is used for, for people (`role 2 of this array`, `mounted
    /// at /boot`, `free`).
    pub usage: String,
    /// Nothing uses it: it may be given to this array (add, replace, grow).
    pub free: bool,
    /// For a loop device, the file behind it (what tells one loop device
    /// from another).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backing: Option<String>,
}

/// `maj:min` -> first mount point, from /proc/self/mountinfo.
fn mounts() -> Vec<(String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        Some((f.get(2)?.to_string(), f.get(4)?.to_string()))
    }).collect()
}

/// Kernel names of the active swap devices.
fn swaps() -> Vec<String> {
    let text = fs::read_to_string("/proc/swaps").unwrap_or_default();
    text.lines().skip(1).filter_map(|l| l.split_whitespace().next()).filter_map(|d| fs::canonicalize(d).ok()).map(|p| p.display().to_string()).collect()
}

/// What this array's status says each of its devices is, by the device's
/// real path: `role 2 of this array (active)`, `spare of this array`, ...
fn in_this_array(st: &ArrayStatus) -> Vec<(PathBuf, String)> {
    st.members
        .iter()
        .filter_map(|m| {
            let dev = fs::canonicalize(m.device.as_deref()?).ok()?;
            let what = match (m.role, m.former_role) {
                (Some(r), _) => format!("role {r} of this array ({})", m.state),
                (None, Some(r)) => format!("faulty in this array (was role {r}): pull it, then remove it"),
                (None, None) => "spare of this array".to_string(),
            };
            Some((dev, what))
        })
        .collect()
}

/// Every drive of the machine (see the module docs), in kernel name
/// order, for the console of array `st` with the drives' last health
/// readings `health`. Reads sysfs, /proc and each free-looking device's
/// first sectors (for a superblock or signature); never writes.
pub(crate) fn list(st: &ArrayStatus, health: &[Health]) -> Vec<Drive> {
    let Ok(dir) = fs::read_dir("/sys/class/block") else { return vec![] };
    let mut names: Vec<String> = dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort_by(|a, b| natural(a).cmp(&natural(b)));
    let mounts = mounts();
    let swaps = swaps();
    let ours = in_this_array(st);
    let health: Vec<(PathBuf, &Health)> = health.iter().filter_map(|h| Some((fs::canonicalize(&h.device).ok()?, h))).collect();
    let mut out = Vec::new();
    for name in names {
        if ["ram", "zram", "dm-", "md", "ublkb", "ublkc", "nbd", "sr", "fd"].iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let Ok(sys) = fs::canonicalize(format!("/sys/class/block/{name}")) else { continue };
        let size = read_trim(sys.join("size")).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) * 512;
        // Hidden NVMe multipath paths (nvme0c0n1) have no /dev node.
        let dev = PathBuf::from(format!("/dev/{name}"));
        if size == 0 || !dev.exists() {
            continue;
        }
        let partition = sys.join("partition").exists();
        let kind = if name.starts_with("loop") { "loop" } else if partition { "partition" } else { "disk" };
        let identity = if kind == "loop" { None } else { identity_of_sys(&sys) };
        let real = fs::canonicalize(&dev).unwrap_or(dev.clone());
        let devno = read_trim(sys.join("dev")).unwrap_or_default();
        let holders: Vec<String> = fs::read_dir(sys.join("holders")).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        let parts = !partition && fs::read_dir(&sys).is_ok_and(|d| d.flatten().any(|e| e.path().join("partition").exists()));
        let usage = if let Some((_, u)) = ours.iter().find(|(d, _)| *d == real) {
            u.clone()
        } else if let Some((_, at)) = mounts.iter().find(|(d, _)| *d == devno) {
            format!("mounted at {at}")
        } else if swaps.contains(&real.display().to_string()) {
            "swap".to_string()
        } else if !holders.is_empty() {
            format!("held by {}", holders.join(", "))
        } else if parts {
            "has partitions".to_string()
        } else {
            match array::examine(&uraid_core::MemberSpec::Path(dev.clone())) {
                Ok(Examination::Member(sb)) => format!("member of array '{}'", sb.name),
                Ok(Examination::Corrupt(_)) => "damaged uraid superblock".to_string(),
                Ok(Examination::Foreign(sig)) => format!("holds {sig}"),
                Ok(Examination::Empty) => "free".to_string(),
                Err(e) => format!("cannot be read ({e})"),
            }
        };
        let free = usage == "free";
        let health = health.iter().find(|(d, _)| *d == real).map(|(_, h)| (*h).clone());
        let backing = if kind == "loop" { read_trim(sys.join("loop/backing_file")) } else { None };
        out.push(Drive { device: dev.display().to_string(), kind, size, identity, health, usage, free, backing });
    }
    out
}

/// `nvme10n1` after `nvme2n1`: the name split into text and numbers.
fn natural(s: &str) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    let mut text = String::new();
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
        } else {
            if !num.is_empty() {
                v.push((std::mem::take(&mut text), num.parse().unwrap_or(u64::MAX)));
                num.clear();
            }
            text.push(c);
        }
    }
    v.push((text, num.parse().unwrap_or(0)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_their_numbers() {
        let mut v = vec!["nvme10n1", "nvme2n1", "loop10", "loop2", "sda", "nvme2n1p1"];
        v.sort_by(|a, b| natural(a).cmp(&natural(b)));
        assert_eq!(v, ["loop2", "loop10", "nvme2n1", "nvme2n1p1", "nvme10n1", "sda"]);
    }
}
