//! Recognises what already lives on a drive, so that `create` and the
//! benchmark's write tests never destroy a filesystem or an array silently.
//!
//! Magic numbers and offsets are those libblkid checks (util-linux,
//! libblkid/src/superblocks/*.c and partitions/*.c).

/// The first bytes of a member that [`detect`] needs.
pub const PROBE_LEN: usize = 72 << 10;

/// What [`detect`] names a uraid journal device (see [`crate::cache::journal`]):
/// not a member, but a device an array with a journaled cache is assembled with.
pub const JOURNAL: &str = "a uraid journal";

/// Names what `head` (the first bytes of a device, ideally [`PROBE_LEN`])
/// holds, or `None` when no known signature is there.
pub fn detect(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.len() >= off + magic.len() && &head[off..off + magic.len()] == magic;
    if at(0, crate::control::superblock::MAGIC) {
        return Some("a uraid superblock");
    }
    if at(0, crate::cache::journal::MAGIC) {
        return Some(JOURNAL);
    }
    if at(1080, &[0x53, 0xEF]) {
        return Some("an ext2/ext3/ext4 filesystem");
    }
    if at(0, b"XFSB") {
        return Some("an XFS filesystem");
    }
    if at(0x10040, b"_BHRfS_M") {
        return Some("a btrfs filesystem");
    }
    if at(4086, b"SWAPSPACE2") || at(4086, b"SWAP-SPACE") {
        return Some("Linux swap");
    }
    // LVM2's physical volume label: in one of the first four sectors.
    if (0..4).any(|s| at(s * 512, b"LABELONE") && at(s * 512 + 24, b"LVM2 001")) {
        return Some("an LVM physical volume");
    }
    if at(0x1000, &[0xFC, 0x4E, 0x2B, 0xA9]) {
        return Some("a Linux md RAID superblock (1.1/1.2)");
    }
    if at(3, b"NTFS    ") {
        return Some("an NTFS filesystem");
    }
    if at(82, b"FAT32   ") || at(54, b"FAT16   ") || at(54, b"FAT12   ") {
        return Some("a FAT filesystem");
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume");
    }
    if at(512, b"EFI PART") {
        return Some("a GPT partition table");
    }
    if at(510, &[0x55, 0xAA]) && head.len() >= 512 && head[446..510].iter().any(|&b| b != 0) {
        return Some("an MBR partition table");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_known_signatures() {
        let mut h = vec![0u8; PROBE_LEN];
        assert_eq!(detect(&h), None);
        h[1080] = 0x53;
        h[1081] = 0xEF;
        assert_eq!(detect(&h), Some("an ext2/ext3/ext4 filesystem"));
        let mut h = vec![0u8; PROBE_LEN];
        h[0x10040..0x10048].copy_from_slice(b"_BHRfS_M");
        assert_eq!(detect(&h), Some("a btrfs filesystem"));
        assert_eq!(detect(&h[..100]), None, "a short head is not misread");
        let mut h = vec![0u8; PROBE_LEN];
        h[512..520].copy_from_slice(b"LABELONE");
        h[536..544].copy_from_slice(b"LVM2 001");
        assert_eq!(detect(&h), Some("an LVM physical volume"));
        let mut h = vec![0u8; PROBE_LEN];
        h[4086..4096].copy_from_slice(b"SWAPSPACE2");
        assert_eq!(detect(&h), Some("Linux swap"));
    }
}
