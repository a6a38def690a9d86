//! Who a disk is: model, serial number, firmware, world-wide names,
//! capacity, sector sizes, its `/dev/disk/by-id` name and, for a PCIe
//! device, its link and the upstream port it hangs from. This is what an
//! administrator needs to find the drive to pull ("which drive do I pull?").
//!
//! Sources, in order, and nothing guessed: the kernel's sysfs attributes
//! (`/sys/block/X/device/{model,serial,firmware_rev}`, `/sys/block/X/
//! {wwid,eui,nguid,uuid}`, `queue/*_block_size`, and the PCI function's
//! `current_link_speed`/`current_link_width`, documented in the kernel's
//! Documentation/ABI/testing/sysfs-block, sysfs-class-nvme and
//! sysfs-bus-pci), then udev's database record of the device
//! (`/run/udev/data/bMAJ:MIN`, its `E:ID_*` properties and `S:` links,
//! written by udevd from the same ata_id/scsi_id/nvme rules that make
//! `/dev/disk/by-id`). A field no source states is `None`.
//!
//! NVMe with native multipath (Debian's default) puts the namespace
//! under `/sys/devices/virtual/nvme-subsystem/nvme-subsysN`; the
//! controllers under it (`nvmeM`) lead to the PCI function.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The identity of one block device (a whole disk, or the disk under a
/// partition). Every field is what the kernel or udev states.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identity {
    /// Kernel name of the disk (`nvme0n1`, `sda`, `vdb`).
    pub disk: String,
    /// Model as the device reports it, trimmed (`Samsung SSD 990 PRO 2TB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Serial number, trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Firmware revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// The kernel's world-wide identifier (`wwid`): `eui.…`, `nvme.…`,
    /// `uuid.…` for NVMe, `naa.…`/`t10.…` for SCSI and SATA, or udev's
    /// `ID_WWN` (`0x5002…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwid: Option<String>,
    /// NVMe namespace IEEE EUI-64 (hex with dashes or colons, as sysfs has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eui64: Option<String>,
    /// NVMe namespace globally unique identifier (NGUID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nguid: Option<String>,
    /// NVMe namespace UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_uuid: Option<String>,
    /// Capacity in bytes (`size` x 512).
    pub capacity: u64,
    /// Logical sector size in bytes (what I/O must be aligned to).
    pub logical_block_size: u32,
    /// Physical sector size in bytes (what writes should be aligned to).
    pub physical_block_size: u32,
    /// How the disk is attached: `nvme` (PCIe), `nvme-loop`, `nvme-tcp`,
    /// `nvme-rdma`, `nvme-fc`, `ata`, `scsi`, `virtio`, `usb`, or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// `/dev/disk/by-id/…`: the stable name of the disk (udev's), the one
    /// to write into configurations; `None` without udev's links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_id: Option<String>,
    /// The PCIe link, for a disk on PCIe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<PciLink>,
}

/// A PCIe function's link and the port above it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct PciLink {
    /// The function's PCI address (`0000:01:00.0`).
    pub address: String,
    /// Negotiated link speed as sysfs states it (`16.0 GT/s PCIe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<String>,
    /// Negotiated link width in lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// The fastest speed the device supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_speed: Option<String>,
    /// The widest link the device supports, in lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u32>,
    /// The upstream port or bridge the function hangs from (a root port,
    /// a switch's downstream port, the chipset's port): members with the
    /// same upstream chain share its bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

impl Identity {
    /// [`summary`](Self::summary) and, when udev made one, the by-id name:
    /// what `status` and `scan` print under a member.
    pub fn summary_and_name(&self) -> String {
        match &self.by_id {
            Some(b) => format!("{}, {b}", self.summary()),
            None => self.summary(),
        }
    }

    /// One line for people: `Samsung SSD 990 PRO, serial S6Z..., firmware
    /// 4B2QJXD7, PCIe 16.0 GT/s x4` (the parts that are known).
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        parts.push(self.model.clone().unwrap_or_else(|| format!("{} (model unknown)", self.disk)));
        if let Some(s) = &self.serial {
            parts.push(format!("serial {s}"));
        }
        if let Some(f) = &self.firmware {
            parts.push(format!("firmware {f}"));
        }
        let link = self.link.as_ref().and_then(|l| {
            l.speed.as_ref().map(|s| match l.width {
                Some(w) => format!("PCIe {s} x{w}"),
                None => format!("PCIe {s}"),
            })
        });
        if let Some(l) = link.or_else(|| self.transport.clone()) {
            parts.push(l);
        }
        parts.join(", ")
    }
}

/// The trimmed contents of file `p` (a sysfs or procfs attribute); `None`
/// when unreadable or empty.
pub fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Whether `s` is a PCI address, `0000:01:00.0`.
pub(crate) fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.' && s.chars().filter(|c| c.is_ascii_hexdigit()).count() == 9
}

/// The (major, minor) numbers of device number `rdev` (`st_rdev`).
pub(crate) fn dev_major_minor(rdev: u64) -> (u64, u64) {
    (libc::major(rdev) as u64, libc::minor(rdev) as u64)
}

/// The sysfs directory of block device `maj:min`.
pub(crate) fn sys_block(maj: u64, min: u64) -> Option<PathBuf> {
    fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()
}

/// The device number of `path` when it is a block device.
fn block_rdev(path: &Path) -> Option<u64> {
    let md = fs::metadata(path).ok()?;
    md.file_type().is_block_device().then(|| md.rdev())
}

/// `E:KEY=VALUE` properties and `S:LINK` links of udev's record of block
/// device `maj:min`.
fn udev_record(maj: u64, min: u64) -> (Vec<(String, String)>, Vec<String>) {
    let Some(text) = read_trim(format!("/run/udev/data/b{maj}:{min}")) else { return (vec![], vec![]) };
    let mut props = Vec::new();
    let mut links = Vec::new();
    for l in text.lines() {
        if let Some(p) = l.strip_prefix("E:") {
            if let Some((k, v)) = p.split_once('=') {
                props.push((k.to_string(), v.to_string()));
            }
        } else if let Some(s) = l.strip_prefix("S:") {
            links.push(s.to_string());
        }
    }
    (props, links)
}

/// How good a `/dev/disk/by-id` name is for a configuration file: udev's
/// model_serial names first (what `ls /dev/disk/by-id` users type), then
/// world-wide names; lower is better.
fn by_id_rank(name: &str) -> u8 {
    if name.starts_with("nvme-eui.") || name.starts_with("nvme-nvme.") || name.starts_with("nvme-uuid.") {
        3
    } else if name.starts_with("wwn-") {
        2
    } else if name.starts_with("nvme-") || name.starts_with("ata-") || name.starts_with("scsi-") || name.starts_with("virtio-") || name.starts_with("usb-") {
        // udev also makes `nvme-MODEL_SERIAL_NSID`: the shorter one first.
        1
    } else {
        4
    }
}

/// The best `/dev/disk/by-id` link that resolves to `/dev/NAME`: from
/// udev's record (`S:` lines) when present, else from the directory.
pub fn by_id_of(name: &str, udev_links: &[String]) -> Option<String> {
    let target = fs::canonicalize(format!("/dev/{name}")).ok()?;
    let mut found: Vec<String> = udev_links
        .iter()
        .filter_map(|s| s.strip_prefix("disk/by-id/"))
        .map(|s| s.to_string())
        .filter(|s| fs::canonicalize(format!("/dev/disk/by-id/{s}")).ok().as_ref() == Some(&target))
        .collect();
    if found.is_empty() {
        found = fs::read_dir("/dev/disk/by-id")
            .map(|d| {
                d.flatten()
                    .filter(|e| fs::canonicalize(e.path()).ok().as_ref() == Some(&target))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
    }
    found.sort_by(|a, b| by_id_rank(a).cmp(&by_id_rank(b)).then(a.len().cmp(&b.len())).then(a.cmp(b)));
    found.first().map(|s| format!("/dev/disk/by-id/{s}"))
}

/// The `/dev/disk/by-id` path of the block device (a disk or a
/// partition) at `path`, when udev made one: what a configuration file
/// should name, since `/dev/nvme0n1` may be another drive after a reboot.
/// `None` for files and for devices udev names no by-id link for (loop).
pub fn stable_path(path: &Path) -> Option<String> {
    let (maj, min) = dev_major_minor(block_rdev(path)?);
    let sys = sys_block(maj, min)?;
    let name = sys.file_name()?.to_string_lossy().into_owned();
    by_id_of(&name, &udev_record(maj, min).1)
}

/// The PCI addresses from the root complex down to disk `sys`'s PCI
/// function (empty when it is not on PCI), found through the NVMe
/// controller when the namespace sits under a multipath subsystem.
pub fn pci_path(sys: &Path) -> Vec<String> {
    pci_function(sys)
        .map(|f| {
            f.components()
                .filter_map(|c| {
                    let s = c.as_os_str().to_string_lossy();
                    is_pci_addr(&s).then(|| s.into_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The PCI function of disk `sys` (its sysfs directory): the canonical
/// path of `device` when that is on PCI, else (NVMe multipath: `device`
/// is the subsystem) the first controller's device.
fn pci_function(sys: &Path) -> Option<PathBuf> {
    let dev = fs::canonicalize(sys.join("device")).ok()?;
    let on_pci = |p: &Path| p.file_name().is_some_and(|n| is_pci_addr(&n.to_string_lossy()));
    let function_of = |p: &Path| p.ancestors().find(|a| on_pci(a)).map(Path::to_path_buf);
    if let Some(f) = function_of(&dev) {
        return Some(f);
    }
    // An NVMe subsystem: its controllers are `nvmeN` entries.
    let mut ctrls: Vec<PathBuf> = fs::read_dir(&dev)
        .ok()?
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("nvme") && n[4..].chars().all(|c| c.is_ascii_digit()) && n.len() > 4
        })
        .map(|e| e.path())
        .collect();
    ctrls.sort();
    ctrls.iter().find_map(|c| fs::canonicalize(c.join("device")).ok().and_then(|p| function_of(&p)))
}

fn link_of(f: &Path) -> PciLink {
    let num = |n: &str| read_trim(f.join(n)).and_then(|s| s.parse().ok());
    let upstream = f.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).filter(|n| is_pci_addr(n));
    PciLink {
        address: f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        speed: read_trim(f.join("current_link_speed")).filter(|s| !s.starts_with("Unknown")),
        width: num("current_link_width").filter(|&w: &u32| w > 0),
        max_speed: read_trim(f.join("max_link_speed")).filter(|s| !s.starts_with("Unknown")),
        max_width: num("max_link_width").filter(|&w: &u32| w > 0),
        upstream,
    }
}

/// The transport of NVMe controller directory `ctrl` (`pcie`, `loop`,
/// `tcp`, ...), as `nvme`, `nvme-loop`, `nvme-tcp`.
fn nvme_transport(dev: &Path) -> Option<String> {
    let t = read_trim(dev.join("transport")).or_else(|| {
        let mut ctrls: Vec<PathBuf> = fs::read_dir(dev).ok()?.flatten().map(|e| e.path()).filter(|p| p.join("transport").exists()).collect();
        ctrls.sort();
        ctrls.first().and_then(|c| read_trim(c.join("transport")))
    })?;
    Some(if t == "pcie" { "nvme".to_string() } else { format!("nvme-{t}") })
}

/// The identity of the whole disk at sysfs directory `sys` (a partition's
/// is its disk's). `None` when `sys` is not a block device directory.
pub fn identity_of_sys(sys: &Path) -> Option<Identity> {
    let sys = if sys.join("partition").exists() { sys.parent()?.to_path_buf() } else { sys.to_path_buf() };
    let disk = sys.file_name()?.to_string_lossy().into_owned();
    let devno = read_trim(sys.join("dev"))?;
    let (maj, min) = devno.split_once(':').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))?;
    let (props, links) = udev_record(maj, min);
    let prop = |k: &str| props.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.replace('_', " ").trim().to_string()).filter(|v| !v.is_empty());
    let dev = sys.join("device");
    let vendor = read_trim(dev.join("vendor")).filter(|v| !v.starts_with("0x"));
    let model = read_trim(dev.join("model"))
        .map(|m| match &vendor {
            Some(v) if !m.starts_with(v.as_str()) && v != "ATA" => format!("{v} {m}"),
            _ => m,
        })
        .or_else(|| prop("ID_MODEL"));
    let serial = read_trim(dev.join("serial")).or_else(|| read_trim(sys.join("serial"))).or_else(|| {
        props.iter().find(|(k, _)| k == "ID_SERIAL_SHORT").map(|(_, v)| v.clone())
    });
    let firmware = read_trim(dev.join("firmware_rev")).or_else(|| read_trim(dev.join("rev"))).or_else(|| prop("ID_REVISION"));
    let wwid = read_trim(sys.join("wwid")).or_else(|| read_trim(dev.join("wwid"))).or_else(|| props.iter().find(|(k, _)| k == "ID_WWN").map(|(_, v)| v.clone()));
    let transport = if disk.starts_with("nvme") {
        nvme_transport(&fs::canonicalize(&dev).unwrap_or(dev.clone()))
    } else if disk.starts_with("vd") {
        Some("virtio".into())
    } else {
        props.iter().find(|(k, _)| k == "ID_BUS").map(|(_, v)| v.clone())
    };
    let link = pci_function(&sys).map(|f| link_of(&f)).filter(|_| transport.as_deref().map_or(true, |t| t == "nvme" || !t.starts_with("nvme")));
    let num = |p: &str| read_trim(sys.join(p)).and_then(|s| s.parse::<u64>().ok());
    Some(Identity {
        by_id: by_id_of(&disk, &links),
        disk,
        model,
        serial,
        firmware,
        wwid,
        eui64: read_trim(sys.join("eui")),
        nguid: read_trim(sys.join("nguid")),
        ns_uuid: read_trim(sys.join("uuid")),
        capacity: num("size").unwrap_or(0) * 512,
        logical_block_size: num("queue/logical_block_size").unwrap_or(0) as u32,
        physical_block_size: num("queue/physical_block_size").unwrap_or(0) as u32,
        transport,
        link,
    })
}

/// The identity of the disk block device `path` is (or is a partition
/// of). `None` for files, `mem:` members, and stacked or virtual devices
/// that are no disk: loop, device-mapper, md, RAM disks, null_blk, ublk.
pub fn identity_of_path(path: &Path) -> Option<Identity> {
    identity_of_rdev(block_rdev(path)?)
}

/// [`identity_of_path`] of the block device whose device number is
/// `rdev` (`st_rdev`).
pub fn identity_of_rdev(rdev: u64) -> Option<Identity> {
    let (maj, min) = dev_major_minor(rdev);
    let sys = sys_block(maj, min)?;
    let whole = if sys.join("partition").exists() { sys.parent()?.to_path_buf() } else { sys };
    let name = whole.file_name()?.to_string_lossy().into_owned();
    let virtual_dev = ["loop", "dm-", "md", "ram", "zram", "nullb", "ublkb", "nbd", "pmem"].iter().any(|p| name.starts_with(p));
    if virtual_dev || whole.join("slaves").read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return None;
    }
    identity_of_sys(&whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_id_names_rank_model_serial_first() {
        let mut v = vec!["nvme-eui.0025385b71b0b6a5", "wwn-0x5002538e40a0b6a5", "nvme-Samsung_SSD_980_S6_1", "nvme-Samsung_SSD_980_S6", "lvm-pv-uuid-x"];
        v.sort_by(|a, b| by_id_rank(a).cmp(&by_id_rank(b)).then(a.len().cmp(&b.len())));
        assert_eq!(v, ["nvme-Samsung_SSD_980_S6", "nvme-Samsung_SSD_980_S6_1", "wwn-0x5002538e40a0b6a5", "nvme-eui.0025385b71b0b6a5", "lvm-pv-uuid-x"]);
    }

    #[test]
    fn no_identity_for_files_and_virtual_devices() {
        let f = std::env::temp_dir().join(format!("uraid-identity-{}", std::process::id()));
        fs::write(&f, b"x").unwrap();
        assert_eq!(identity_of_path(&f), None);
        fs::remove_file(&f).unwrap();
        assert_eq!(identity_of_path(Path::new("/nonexistent/disk")), None);
    }

    #[test]
    fn this_machines_disks_read_without_guessing() {
        // Every whole disk this machine has: the identity is read, its
        // sizes agree with the kernel's, and a summary is printable.
        let Ok(d) = fs::read_dir("/sys/block") else { return };
        for e in d.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if ["loop", "ram", "zram", "dm-", "md", "nbd"].iter().any(|p| name.starts_with(p)) {
                continue;
            }
            let Some(id) = identity_of_sys(&e.path()) else { continue };
            assert_eq!(id.disk, name);
            let size: u64 = read_trim(e.path().join("size")).unwrap().parse().unwrap();
            assert_eq!(id.capacity, size * 512);
            assert!(id.logical_block_size >= 512 && id.physical_block_size >= id.logical_block_size, "{id:?}");
            println!("{name}: {} ({id:?})", id.summary());
        }
    }
}
