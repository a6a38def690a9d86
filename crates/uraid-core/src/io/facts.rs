//! What each member really is and what it sits on (model, size, the
//! chain down to its disks and their PCI paths), and the warning for
//! members that share one underlying device or one bus (an array over them
//! cannot scale). Read by the service (the console's and `status`'s member
//! details) and by the benchmark's reports.
//!
//! Everything comes from /proc and /sys; what cannot be read is left
//! empty rather than guessed. A member is traced down to the devices it
//! sits on: a partition to its disk, a loop device to the file behind it
//! and on to that file's filesystem, a device-mapper or md device to its
//! slaves, a regular file to its filesystem's device (every device of a
//! btrfs filesystem). Each physical disk's PCI path gives its bus.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::io::identity::{dev_major_minor, is_pci_addr, read_trim, sys_block};
use crate::io::member::{Member, MemberKind};

/// A physical (or the last traceable) device under a member.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Disk {
    /// Kernel name (`nvme0n1`, `vda`), or `RAM` for memory-backed storage.
    pub name: String,
    /// Model (or vendor and device id) as the kernel reports it.
    pub model: String,
    /// True for a spinning disk (queue/rotational); None when unknown.
    pub rotational: Option<bool>,
    /// PCI addresses from the root complex down to the device.
    pub pci: Vec<String>,
}

/// What one member is and what it sits on.
#[derive(Debug, Clone, Serialize)]
pub struct MemberInfo {
    /// Name as given.
    pub name: String,
    /// File, block device or emulated drive.
    pub kind: String,
    /// Model of the device (for a block device or its disk).
    pub model: String,
    /// Size in bytes.
    pub size: u64,
    /// Rotational flag of the device it sits on (None when unknown).
    pub rotational: Option<bool>,
    /// How it reaches the hardware, top to bottom (`loop0 -> file
    /// /dev/shm/x.img -> tmpfs (RAM)`).
    pub sits_on: Vec<String>,
    /// The devices at the bottom of that chain.
    pub disks: Vec<Disk>,
    /// O_DIRECT (false: buffered, the page cache is in the figures).
    pub direct: bool,
    /// Who the disk is, when the member is a disk or a partition of one
    /// (model, serial, firmware, by-id name, PCIe link); `None` for files,
    /// `mem:` and stacked devices (loop, dm, md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::io::identity::Identity>,
}

/// Mount information for a filesystem whose st_dev is `maj:min`:
/// (fstype, source).
fn mount_of(maj: u64, min: u64) -> Option<(String, String)> {
    let mi = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = format!("{maj}:{min}");
    mi.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        if f.get(2) != Some(&want.as_str()) {
            return None;
        }
        let sep = f.iter().position(|x| *x == "-")?;
        Some((f.get(sep + 1)?.to_string(), f.get(sep + 2)?.to_string()))
    })
}

struct Tracer {
    chain: Vec<String>,
    disks: BTreeSet<Disk>,
    depth: usize,
}

impl Tracer {
    /// Follows block device `sys` (its sysfs directory).
    fn block(&mut self, sys: &Path) {
        self.depth += 1;
        if self.depth > 16 {
            return;
        }
        let name = sys.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if sys.join("partition").exists() {
            if let Some(parent) = sys.parent() {
                let pname = parent.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                self.chain.push(format!("partition {name} of {pname}"));
                return self.block(parent);
            }
        }
        if let Some(backing) = read_trim(sys.join("loop/backing_file")) {
            self.chain.push(format!("{name} (loop device) over file {backing}"));
            return self.file(Path::new(&backing));
        }
        let slaves: Vec<PathBuf> = fs::read_dir(sys.join("slaves"))
            .map(|d| d.flatten().filter_map(|e| fs::canonicalize(e.path()).ok()).collect())
            .unwrap_or_default();
        if !slaves.is_empty() {
            let kind = read_trim(sys.join("md/level")).map(|l| format!("md {l}")).or_else(|| read_trim(sys.join("dm/name")).map(|n| format!("device-mapper {n}")));
            let names: Vec<String> = slaves.iter().filter_map(|s| s.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
            self.chain.push(format!("{name} ({}) over {}", kind.unwrap_or_else(|| "stacked device".into()), names.join(", ")));
            for s in slaves {
                self.block(&s);
            }
            return;
        }
        if name.starts_with("zram") || name.starts_with("ram") || name.starts_with("pmem") || name.starts_with("nullb") {
            self.chain.push(format!("{name} (memory-backed block device)"));
            self.disks.insert(Disk { name: "RAM".into(), model: format!("{name} (RAM)"), rotational: Some(false), pci: vec![] });
            return;
        }
        self.disk(sys, &name);
    }

    fn disk(&mut self, sys: &Path, name: &str) {
        let dev = sys.join("device");
        let model = read_trim(dev.join("model"))
            .map(|m| match read_trim(dev.join("vendor")).filter(|v| !v.starts_with("0x")) {
                Some(v) if !m.starts_with(&v) => format!("{v} {m}"),
                _ => m,
            })
            .or_else(|| {
                // virtio and others: name the PCI function.
                let pci = fs::canonicalize(&dev).ok()?;
                let f = pci.ancestors().find(|a| a.file_name().is_some_and(|n| is_pci_addr(&n.to_string_lossy())))?;
                let v = read_trim(f.join("vendor"))?;
                let d = read_trim(f.join("device"))?;
                let drv = if name.starts_with("vd") { "virtio block device" } else { "PCI device" };
                Some(format!("{drv} {v}:{d}"))
            })
            .unwrap_or_else(|| "unknown model".into());
        let rotational = read_trim(sys.join("queue/rotational")).map(|r| r == "1");
        // The PCI path down to the function (through the NVMe controller
        // when the namespace sits under a multipath subsystem).
        let pci = crate::io::identity::pci_path(sys);
        self.chain.push(format!("{name}: {model}"));
        self.disks.insert(Disk { name: name.to_string(), model, rotational, pci });
    }

    /// Follows a regular file to its filesystem's devices.
    fn file(&mut self, p: &Path) {
        let Ok(md) = fs::metadata(p) else {
            self.chain.push(format!("{} (cannot be inspected)", p.display()));
            return;
        };
        let (maj, min) = dev_major_minor(md.dev());
        let mount = mount_of(maj, min);
        match mount {
            Some((fstype, _)) if matches!(fstype.as_str(), "tmpfs" | "ramfs" | "hugetlbfs") => {
                self.chain.push(format!("{fstype} (RAM)"));
                self.disks.insert(Disk { name: "RAM".into(), model: format!("{fstype} (RAM)"), rotational: Some(false), pci: vec![] });
            }
            Some((fstype, source)) if fstype == "btrfs" => {
                let devs = btrfs_devices(&source);
                self.chain.push(format!("btrfs over {}", if devs.is_empty() { source.clone() } else { devs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ") }));
                for d in devs {
                    if let Some(sys) = fs::metadata(&d).ok().filter(|m| m.file_type().is_block_device()).and_then(|m| {
                        let (a, b) = dev_major_minor(m.rdev());
                        sys_block(a, b)
                    }) {
                        self.block(&sys);
                    }
                }
            }
            other => {
                if let Some(sys) = (maj != 0).then(|| sys_block(maj, min)).flatten() {
                    if let Some((fstype, _)) = &other {
                        self.chain.push(format!("{fstype} filesystem"));
                    }
                    self.block(&sys);
                } else {
                    let what = other.map(|(t, s)| format!("{t} on {s}")).unwrap_or_else(|| format!("device {maj}:{min}"));
                    self.chain.push(what);
                }
            }
        }
    }
}

/// The devices of the btrfs filesystem that `source` (one of its devices) is part of.
fn btrfs_devices(source: &str) -> Vec<PathBuf> {
    let src = fs::canonicalize(source).unwrap_or_else(|_| PathBuf::from(source));
    let src_name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Ok(fsids) = fs::read_dir("/sys/fs/btrfs") else { return vec![] };
    for f in fsids.flatten() {
        let Ok(devs) = fs::read_dir(f.path().join("devices")) else { continue };
        let names: Vec<String> = devs.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        if names.contains(&src_name) {
            let mut v: Vec<PathBuf> = names.iter().map(|n| PathBuf::from(format!("/dev/{n}"))).collect();
            v.sort();
            return v;
        }
    }
    vec![src]
}

/// Describes member `m`.
pub fn member_info(m: &Member) -> MemberInfo {
    let mut t = Tracer { chain: Vec::new(), disks: BTreeSet::new(), depth: 0 };
    let mut identity = None;
    let kind = match m.kind() {
        MemberKind::Mem => {
            t.chain.push("emulated drive in RAM (uraid's mem: member, its own ceilings)".into());
            return MemberInfo {
                name: m.name().to_string(),
                kind: "emulated drive".into(),
                model: "uraid mem: (RAM, throttled by uraid)".into(),
                size: m.size(),
                rotational: Some(false),
                sits_on: t.chain,
                disks: vec![],
                direct: true,
                identity: None,
            };
        }
        MemberKind::Null => {
            return MemberInfo {
                name: m.name().to_string(),
                kind: "null drive".into(),
                model: "uraid null: (reads zeros, drops writes)".into(),
                size: m.size(),
                rotational: Some(false),
                sits_on: vec!["null drive (uraid's null: member: no data kept)".into()],
                disks: vec![],
                direct: true,
                identity: None,
            };
        }
        MemberKind::BlockDevice => {
            if let Ok(md) = m.file().metadata() {
                let (a, b) = dev_major_minor(md.rdev());
                if let Some(sys) = sys_block(a, b) {
                    t.block(&sys);
                }
                identity = crate::io::identity::identity_of_rdev(md.rdev());
            }
            "block device"
        }
        MemberKind::File => {
            t.chain.push(format!("file {}", m.name()));
            t.file(Path::new(m.name()));
            "file"
        }
    };
    let disks: Vec<Disk> = t.disks.into_iter().collect();
    let model = disks.iter().map(|d| d.model.clone()).collect::<Vec<_>>().join(", ");
    let rotational = if disks.is_empty() { None } else if disks.iter().any(|d| d.rotational == Some(true)) { Some(true) } else if disks.iter().all(|d| d.rotational == Some(false)) { Some(false) } else { None };
    MemberInfo { name: m.name().to_string(), kind: kind.into(), model, size: m.size(), rotational, sits_on: t.chain, disks, direct: m.direct(), identity }
}

/// An Intel PCH (chipset) root port: bus 00, device 0x1b..=0x1d, vendor 0x8086.
/// Everything behind the chipset shares its one DMI link to the CPU.
fn behind_intel_chipset(pci: &[String]) -> bool {
    let Some(root) = pci.first() else { return false };
    let dev = u8::from_str_radix(&root[8..10], 16).unwrap_or(0);
    root[5..7] == *"00"
        && (0x1b..=0x1d).contains(&dev)
        && read_trim(format!("/sys/bus/pci/devices/{root}/vendor")).as_deref() == Some("0x8086")
}

/// Warnings for members that share an underlying device or a bus, so the
/// array cannot scale with the number of members: one line per shared
/// device or link, naming every member behind it (six loop devices over
/// one disk are one warning, not fifteen). Memory-backed members (tmpfs,
/// zram, `mem:`) share RAM, which is far faster than the ceilings such
/// test drives get, and are only noted when nothing else is wrong.
pub fn shared_warnings(members: &[MemberInfo]) -> Vec<String> {
    // What is shared (its line without the members), and who shares it.
    let mut sets: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |what: String, a: String, b: String| {
        let i = match sets.iter().position(|(w, _)| *w == what) {
            Some(i) => i,
            None => {
                sets.push((what, Vec::new()));
                sets.len() - 1
            }
        };
        for m in [a, b] {
            if !sets[i].1.contains(&m) {
                sets[i].1.push(m);
            }
        }
    };
    for i in 0..members.len() {
        for j in i + 1..members.len() {
            let (a, b) = (&members[i], &members[j]);
            let shared: Vec<&Disk> = a.disks.iter().filter(|d| d.name != "RAM" && b.disks.iter().any(|e| e.name == d.name)).collect();
            if let Some(d) = shared.first() {
                add(
                    format!("sit on the same device ({}, {}): they share its bandwidth and IOPS, so an array over them cannot scale", d.name, d.model),
                    a.name.clone(),
                    b.name.clone(),
                );
                continue;
            }
            // Different devices: do they share a link on the way to the CPU?
            'pairs: for da in &a.disks {
                for db in &b.disks {
                    if da.pci.is_empty() || db.pci.is_empty() || da.name == db.name {
                        continue;
                    }
                    let (ma, mb) = (format!("{} ({})", a.name, da.name), format!("{} ({})", b.name, db.name));
                    let common = da.pci.iter().zip(&db.pci).take_while(|(x, y)| x == y).count();
                    // The device itself is last in each path; a shared
                    // ancestor below the root complex is a shared link
                    // (a PCIe switch, a bridge, a shared root port).
                    if common >= 1 && common < da.pci.len() && common < db.pci.len() {
                        add(
                            format!(
                                "are behind the same PCIe link at {}: a switch or shared port caps them together, so the \
                                 array cannot scale past that link",
                                da.pci[common - 1]
                            ),
                            ma,
                            mb,
                        );
                        break 'pairs;
                    }
                    if common == 0 && behind_intel_chipset(&da.pci) && behind_intel_chipset(&db.pci) {
                        add(
                            "are behind the chipset: they share its link to the CPU (Intel DMI 3.0 stops near 3.5 GB/s)".to_string(),
                            ma,
                            mb,
                        );
                        break 'pairs;
                    }
                    if da.pci == db.pci {
                        add(format!("are the same PCI device ({})", da.pci.join("/")), a.name.clone(), b.name.clone());
                        break 'pairs;
                    }
                }
            }
        }
    }
    sets.into_iter().map(|(what, names)| format!("members {} {what}", and_list(&names))).collect()
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, disks: Vec<Disk>) -> MemberInfo {
        MemberInfo { name: name.into(), kind: "block device".into(), model: String::new(), size: 0, rotational: None, sits_on: vec![], disks, direct: true, identity: None }
    }
    fn disk(name: &str, pci: &[&str]) -> Disk {
        Disk { name: name.into(), model: "m".into(), rotational: Some(false), pci: pci.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn shared_device_and_link_are_warned() {
        // Two loop devices over files on one disk.
        let a = info("/dev/loop0", vec![disk("sda", &["0000:00:17.0"])]);
        let b = info("/dev/loop1", vec![disk("sda", &["0000:00:17.0"])]);
        let w = shared_warnings(&[a, b]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("same device (sda"), "{w:?}");
        // Six loop devices over one disk: one line naming all six.
        let six: Vec<MemberInfo> = (0..6).map(|i| info(&format!("/dev/loop{i}"), vec![disk("sda", &["0000:00:17.0"])])).collect();
        let w = shared_warnings(&six);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("members /dev/loop0, /dev/loop1, /dev/loop2, /dev/loop3, /dev/loop4 and /dev/loop5 sit on the same device (sda"), "{w:?}");
        // Two NVMe drives behind one switch.
        let a = info("/dev/nvme0n1", vec![disk("nvme0n1", &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"])]);
        let b = info("/dev/nvme1n1", vec![disk("nvme1n1", &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"])]);
        let w = shared_warnings(&[a, b]);
        assert!(w.len() == 1 && w[0].contains("same PCIe link at 0000:01:00.0"), "{w:?}");
        // Two NVMe drives on their own CPU root ports: independent.
        let a = info("/dev/nvme0n1", vec![disk("nvme0n1", &["0000:00:01.1", "0000:01:00.0"])]);
        let b = info("/dev/nvme1n1", vec![disk("nvme1n1", &["0000:00:01.2", "0000:02:00.0"])]);
        assert!(shared_warnings(&[a, b]).is_empty());
        // RAM-backed members are not warned about.
        let a = info("/dev/loop0", vec![Disk { name: "RAM".into(), model: "tmpfs (RAM)".into(), rotational: Some(false), pci: vec![] }]);
        let b = a.clone();
        assert!(shared_warnings(&[a, b]).is_empty());
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_addr("0000:00:02.0"));
        assert!(!is_pci_addr("virtio1"));
        assert!(!is_pci_addr("pci0000:00"));
    }
}
