//! A discard on block-device members (issue 29): a client's TRIM reaches a
//! block device as a discard (the loop device's discard counters in
//! /sys/block/loopN/stat move, its backing file's blocks are freed), not as
//! a zeroing (fallocate's PUNCH_HOLE on a block device is a WRITE_ZEROES,
//! which drives with discard but no write-zeroes refuse); RAID 5 keeps
//! zeroing whole stripes (its parity holds only over data that reads back
//! the same); a member whose queue does not discard turns TRIM off.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rand::RngCore;
use uraid_core::control::array;
use uraid_core::{Level, Op};

use crate::util::*;

const CHUNK: u64 = 64 << 10;
const MEMBER: u64 = 48 << 20;

/// Discard requests and sectors a block device has completed (fields 12
/// and 14 of /sys/block/NAME/stat).
fn discard_stat(dev: &Path) -> (u64, u64) {
    let name = dev.file_name().and_then(|n| n.to_str()).expect("device name");
    let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).expect("read /sys/block/NAME/stat");
    let f: Vec<u64> = stat.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    assert!(f.len() >= 15, "{name}: /sys/block/{name}/stat has no discard fields (kernel before 4.19?): {stat}");
    (f[11], f[13])
}

/// 512-byte blocks a file occupies.
fn blocks(p: &Path) -> u64 {
    std::fs::metadata(p).expect("stat backing file").blocks()
}

/// Writes `size` random bytes at the start of `vol` and flushes them; the
/// data, the discard counters of `devs` and the blocks of `files` then.
#[allow(clippy::type_complexity)]
fn fill(vol: &std::sync::Arc<uraid_core::Volume>, rng: &mut impl RngCore, size: usize, devs: &[PathBuf], files: &[PathBuf]) -> (Vec<u8>, Vec<(u64, u64)>, Vec<u64>) {
    let mut data = vec![0u8; size];
    rng.fill_bytes(&mut data);
    vol.write_at(0, &data).expect("write");
    range_op(vol, Op::Flush, 0, 0);
    (data, devs.iter().map(|d| discard_stat(d)).collect(), files.iter().map(|f| blocks(f)).collect())
}

/// Loop devices over fresh sparse files of [`MEMBER`] bytes in `dir`.
fn loops(dir: &Path, n: usize) -> (Vec<LoopDev>, Vec<PathBuf>) {
    let files = sparse_files(dir, "m", n, MEMBER);
    let loops: Vec<LoopDev> = files.iter().map(|f| LoopDev::attach(f)).collect();
    (loops, files)
}

/// RAID 0, 1 and 10 on loop devices: a discard reaches every member as a
/// discard (the devices count it, with the bytes each was sent), the
/// backing files' blocks are freed, the range reads back as zeros (a loop
/// device punches its file) and the data around it is intact.
#[test]
fn block_members_get_real_discards() {
    let _g = shared();
    let mut rng = rng("block_members_get_real_discards");
    for (level, n, copies) in [(Level::Raid0, 2, 1u64), (Level::Raid1, 2, 2), (Level::Raid10, 4, 2)] {
        let dir = tmpdir();
        let (loops, files) = loops(dir.path(), n);
        let devs: Vec<PathBuf> = loops.iter().map(|l| l.dev.clone()).collect();
        let members = array::open_members(&specs(&devs), true, true).expect("open loop members");
        for (m, d) in members.iter().zip(&devs) {
            let l = m.queue_limits().unwrap_or_else(|| panic!("{}: no queue limits read from sysfs", d.display()));
            assert!(l.discard_max > 0 && l.discard_granularity > 0, "{}: {l:?}", d.display());
        }
        let (vol, _) = array::temporary_at(members, level, CHUNK).expect("volume");
        assert!(vol.discards(), "{level}: a volume of loop devices says it does not discard");
        let size = 16usize << 20;
        let (data, before, used) = fill(&vol, &mut rng, size, &devs, &files);

        let (off, len) = (4u64 << 20, 8usize << 20);
        range_op(&vol, Op::Discard, off, len);

        let after: Vec<(u64, u64)> = devs.iter().map(|d| discard_stat(d)).collect();
        let freed: Vec<u64> = files.iter().zip(&used).map(|(f, &u)| u.saturating_sub(blocks(f))).collect();
        let sectors: u64 = after.iter().zip(&before).map(|(a, b)| a.1 - b.1).sum();
        eprintln!(
            "{level}: discard of {len} bytes: member discard requests {:?}, sectors {sectors} (of {}), 512-byte blocks freed per backing file {freed:?}",
            after.iter().zip(&before).map(|(a, b)| a.0 - b.0).collect::<Vec<_>>(),
            copies * len as u64 / 512
        );
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            assert!(a.0 > b.0, "{level}: member {} got no discard (fallocate's zeroing instead?)", devs[i].display());
        }
        assert_eq!(sectors, copies * len as u64 / 512, "{level}: the members were sent other than the discarded bytes");
        let freed_total: u64 = freed.iter().sum();
        assert!(freed_total >= copies * len as u64 / 512, "{level}: only {freed_total} blocks freed in the backing files");
        let back = vol.read_at(0, size).expect("read back");
        assert!(back[off as usize..off as usize + len].iter().all(|&b| b == 0), "{level}: the discarded range of a loop device is not zeros");
        assert!(back[..off as usize] == data[..off as usize] && back[off as usize + len..] == data[off as usize + len..], "{level}: data around the discard changed");
        drop(vol);
        drop(loops);
    }
}

/// RAID 5 on loop devices: a discard of whole stripes is a zeroing of
/// every member (data and parity), never a discard: a discarded chunk may
/// read back anything, and parity holds only over data that reads back
/// the same. The members are sent no discard, their files' blocks are
/// freed all the same (a zeroing that may unmap), every member reads zeros
/// there, and a partial stripe at the edge reads as zeros too.
#[test]
fn raid5_discard_zeroes_whole_stripes() {
    let _g = shared();
    let mut rng = rng("raid5_discard_zeroes_whole_stripes");
    let dir = tmpdir();
    let (loops, files) = loops(dir.path(), 3);
    let devs: Vec<PathBuf> = loops.iter().map(|l| l.dev.clone()).collect();
    let members = array::open_members(&specs(&devs), true, true).expect("open loop members");
    let (vol, _) = array::temporary_at(members, Level::Raid5, CHUNK).expect("volume");
    assert!(vol.discards(), "a RAID 5 of loop devices (which have WRITE_ZEROES) says it does not discard");
    let size = 16usize << 20;
    let (data, before, used) = fill(&vol, &mut rng, size, &devs, &files);
    // A stripe holds 2 data chunks: from mid-stripe 1 to the end of stripe 40.
    let width = 2 * CHUNK;
    let (off, len) = (width + CHUNK, (40 * width - CHUNK) as usize);
    range_op(&vol, Op::Discard, off, len);
    let after: Vec<(u64, u64)> = devs.iter().map(|d| discard_stat(d)).collect();
    let freed: Vec<u64> = files.iter().zip(&used).map(|(f, &u)| u.saturating_sub(blocks(f))).collect();
    eprintln!("RAID 5: discard of {len} bytes: member discard requests {:?}, 512-byte blocks freed per backing file {freed:?}", after.iter().zip(&before).map(|(a, b)| a.0 - b.0).collect::<Vec<_>>());
    assert_eq!(after, before, "RAID 5 sent a discard to its members: its parity would no longer hold");
    // The 39 whole stripes: one chunk of each on every member (less a
    // block or so the backing filesystem keeps at an edge).
    for (f, d) in freed.iter().zip(&devs) {
        assert!(*f >= 38 * CHUNK / 512, "{}: only {f} blocks freed", d.display());
    }
    let back = vol.read_at(0, size).expect("read back");
    assert!(back[off as usize..off as usize + len].iter().all(|&b| b == 0), "the discarded range does not read back as zeros");
    assert!(back[..off as usize] == data[..off as usize] && back[off as usize + len..] == data[off as usize + len..], "data around the discard changed");
    // Every member (data and parity) reads zeros over the whole stripes.
    for d in &devs {
        let raw = std::fs::read(d).expect("read member");
        let (a, b) = ((DATA_OFFSET + 2 * CHUNK) as usize, (DATA_OFFSET + 41 * CHUNK) as usize);
        assert!(raw[a..b].iter().all(|&x| x == 0), "{}: not zeros under the discarded stripes", d.display());
    }
    drop(vol);
    drop(loops);
}

/// Loop device `loopN`, detached then recreated when dropped: a loop
/// device keeps a `discard_max_bytes` of 0 written to it across attaches,
/// and sysfs takes no other value back (its granularity is 0 then), so
/// only a new device (LOOP_CTL_REMOVE, LOOP_CTL_ADD) discards again.
struct RecreatedLoop(Option<LoopDev>, i64);

impl Drop for RecreatedLoop {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        const LOOP_CTL_ADD: libc::c_ulong = 0x4C80;
        const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;
        drop(self.0.take());
        let Ok(ctl) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/loop-control") else { return };
        for _ in 0..100 {
            // SAFETY: loop-control ioctls take the device number as an integer.
            if unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_REMOVE, self.1) } == 0 {
                // SAFETY: as above.
                unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_ADD, self.1) };
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        eprintln!("warning: /dev/loop{} keeps discard_max_bytes 0: remove and add it again (LOOP_CTL_REMOVE, LOOP_CTL_ADD)", self.1);
    }
}

/// A member whose queue does not discard (`discard_max_bytes` set to 0):
/// the volume says it does not discard (exports then answer TRIM without
/// passing it on), and a discard sent anyway is dropped, not written as
/// zeros nor failed: nothing reaches the members, the data stays.
#[test]
fn a_member_without_discard_turns_discard_off() {
    let _g = shared();
    let mut rng = rng("a_member_without_discard_turns_discard_off");
    let dir = tmpdir();
    let (mut loops, _files) = loops(dir.path(), 2);
    let devs: Vec<PathBuf> = loops.iter().map(|l| l.dev.clone()).collect();
    let name = devs[1].file_name().and_then(|n| n.to_str()).expect("name").to_string();
    let number = name.trim_start_matches("loop").parse().expect("loop device number");
    let recreated = RecreatedLoop(loops.pop(), number);
    std::fs::write(format!("/sys/block/{name}/queue/discard_max_bytes"), "0").expect("turn the loop device's discard off");
    let members = array::open_members(&specs(&devs), true, true).expect("open loop members");
    assert_eq!(members[1].queue_limits().map(|l| l.discard_max), Some(0));
    assert!(!members[1].discards() && members[0].discards());
    let (vol, _) = array::temporary_at(members, Level::Raid0, CHUNK).expect("volume");
    assert!(!vol.discards(), "a volume with a member that cannot discard says it discards");
    let mut data = vec![0u8; 4 << 20];
    rng.fill_bytes(&mut data);
    vol.write_at(0, &data).expect("write");
    let before: Vec<(u64, u64)> = devs.iter().map(|d| discard_stat(d)).collect();
    range_op(&vol, Op::Discard, 0, 4 << 20);
    let after: Vec<(u64, u64)> = devs.iter().map(|d| discard_stat(d)).collect();
    assert_eq!(after[1], before[1], "a discard reached the member that does not discard");
    // The member that discards got its half; the other kept its data.
    let back = vol.read_at(0, 4 << 20).expect("read back");
    for c in 0..(4 << 20) / CHUNK as usize {
        let r = c * CHUNK as usize..(c + 1) * CHUNK as usize;
        if c % 2 == 1 {
            assert!(back[r.clone()] == data[r], "chunk {c} on the member without discard changed");
        }
    }
    drop(vol);
    drop(loops);
    drop(recreated);
}
