//! The `null:` kind: a drive that holds nothing, as SPDK's null bdev or
//! Linux's null_blk without memory backing. Reads return zeros, writes are
//! dropped, every I/O succeeds at once. It measures the engine's own cost
//! per I/O with no data copy and no drive behind it (`uraid bench --level 0
//! null:1G null:1G ...`).
//!
//! The engine still sends each of its I/Os through the member's io_uring,
//! as an `IORING_OP_NOP` with the piece's user data (a read's buffer is
//! zeroed in user space first: `raid/engine/piece.rs`), so submission,
//! completion and reaping cost what they cost on a real drive. The control
//! path's blocking helpers use the descriptor, `/dev/zero`, which reads
//! zeros and drops writes too; a superblock written to a null member is
//! therefore lost, and an array over null members cannot be assembled
//! again: it is for benchmarks and temporary arrays only.

use std::fs::OpenOptions;
use std::path::Path;

use super::{Member, MemberKind, MemberSpec};
use crate::units::parse_size;
use crate::{bail, Error, Result};

/// The smallest null drive, in bytes (as for `mem:`: room for the
/// superblock and bitmap area and some data).
const MIN_SIZE: u64 = 2 << 20;

/// Parses the part of `null:SIZE` after the prefix (`rest`; `whole` is
/// the spec as given, for messages). SIZE is in powers of 1024.
///
/// Errors: `InvalidInput` for a missing or malformed size, one under 2
/// MiB, or any option (a null drive takes none).
pub(super) fn parse(rest: &str, whole: &str) -> Result<MemberSpec> {
    if let Some((_, opts)) = rest.split_once(',') {
        bail!(InvalidInput, "'{opts}' in '{whole}': a null: drive takes no options (no ceilings); write null:SIZE, e.g. null:1G");
    }
    let size = parse_size(rest, "null: drive size")?;
    if size < MIN_SIZE {
        bail!(InvalidInput, "null: drive of {size} bytes is too small; give at least 2M, e.g. null:1G");
    }
    Ok(MemberSpec::Null(size))
}

impl Member {
    /// Opens a null drive of `size` bytes over `/dev/zero`.
    ///
    /// Errors: `Io` when `/dev/zero` cannot be opened for reading and
    /// writing.
    pub(super) fn open_null(size: u64) -> Result<Member> {
        let name = MemberSpec::Null(size).to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .map_err(|e| Error::io(&format!("cannot open /dev/zero for null drive {name}"), Path::new("/dev/zero"), e))?;
        Ok(Member {
            name,
            file,
            kind: MemberKind::Null,
            size,
            direct: false,
            block_size: 512,
            throttle: None,
            filters: Vec::new(),
            no_fallocate: Default::default(),
            limits: None,
            no_discard: Default::default(),
            held: None,
        })
    }

    /// True for a `null:` drive: its I/Os complete at once, reads with
    /// zeros, writes dropped.
    #[inline(always)]
    pub fn is_null(&self) -> bool {
        self.kind == MemberKind::Null
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::member::OpenMode;

    #[test]
    fn parse_null_spec() {
        let s: MemberSpec = "null:1G".parse().unwrap();
        assert_eq!(s, MemberSpec::Null(1 << 30));
        assert_eq!(s.to_string(), "null:1G");
        assert_eq!("null:64M".parse::<MemberSpec>().unwrap(), MemberSpec::Null(64 << 20));
        let e = |t: &str| t.parse::<MemberSpec>().unwrap_err().to_string();
        assert!(e("null:1G,iops=1000").contains("takes no options"), "{}", e("null:1G,iops=1000"));
        assert!(e("null:1K").contains("too small"), "{}", e("null:1K"));
        assert!("null:".parse::<MemberSpec>().is_err());
        assert!("null:abc".parse::<MemberSpec>().is_err());
    }

    /// The blocking helpers on a null drive: a write succeeds (and is
    /// durable: nothing to keep), a read returns zeros whatever was
    /// written; its size is the one given.
    #[test]
    fn blocking_write_then_read_returns_zeros() {
        let m = Member::open(&"null:8M".parse().unwrap(), OpenMode { write: true, exclusive: true }).unwrap();
        assert_eq!(m.size(), 8 << 20);
        assert_eq!(m.kind(), MemberKind::Null);
        assert!(m.is_null());
        let data = vec![0xa5u8; 4096];
        m.write_all_at(&data, 1 << 20).unwrap();
        m.write_dsync_at(&data, 2 << 20).unwrap();
        let mut back = vec![0xffu8; 4096];
        m.read_exact_at(&mut back, 1 << 20).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        // Two null drives are two drives.
        let specs: Vec<MemberSpec> = vec!["null:8M".parse().unwrap(), "null:8M".parse().unwrap()];
        crate::io::member::check_distinct(&specs).unwrap();
    }
}
