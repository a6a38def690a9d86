//! Member spec parsing: how a member is named on the command line (a path,
//! or `mem:SIZE[,bw=..][,iops=..][,rbw=..][,wbw=..][,riops=..][,wiops=..][,lat=..]`),
//! its emulated ceilings, and
//! the identity of what a spec names, to refuse one drive named twice.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::units::{parse_rate, parse_size};
use crate::{bail, Error, ErrorKind, Result};

/// How a member was named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSpec {
    /// A regular file or a block device.
    Path(PathBuf),
    /// An emulated drive in RAM.
    Mem(MemSpec),
    /// A null drive of this many bytes (`null:SIZE`): reads return zeros,
    /// writes are dropped (see [`crate::io::member`]'s `null.rs`).
    Null(u64),
}

/// Parameters of an emulated `mem:` drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemSpec {
    /// Capacity in bytes.
    pub size: u64,
    /// Ceilings and latency; all zero means memory speed.
    pub limits: Limits,
}

/// Ceilings of an emulated drive (zero = no ceiling of that kind).
/// `bw` and `iops` are one budget shared by reads and writes, as a real
/// drive has; `rbw`/`riops` and `wbw`/`wiops` are budgets of one direction
/// each (as cgroup v1 blkio throttles, which cannot share one budget
/// between reads and writes). Set both kinds and an I/O waits for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Bandwidth in bytes per second, reads and writes together.
    pub bw: u64,
    /// I/O operations per second, reads and writes together.
    pub iops: u64,
    /// Read bandwidth in bytes per second.
    pub rbw: u64,
    /// Write bandwidth in bytes per second.
    pub wbw: u64,
    /// Read operations per second.
    pub riops: u64,
    /// Write operations per second.
    pub wiops: u64,
    /// Fixed latency added to every I/O, in µs (pipelined: it does not
    /// consume drive time, as on a real SSD with many dies).
    pub lat_us: u64,
}

impl Limits {
    /// True when no ceiling is set.
    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }
}

impl std::str::FromStr for MemberSpec {
    type Err = Error;

    /// Parses `PATH` or `mem:SIZE[,bw=BYTES_PER_S][,iops=N][,lat=US]`
    /// with `rbw=`/`wbw=`/`riops=`/`wiops=` for one direction's budget
    /// (see [`Limits`]; SIZE in powers of 1024, rates in powers of 1000).
    fn from_str(s: &str) -> Result<MemberSpec> {
        if let Some(rest) = s.strip_prefix("null:") {
            return super::null::parse(rest, s);
        }
        let Some(rest) = s.strip_prefix("mem:") else {
            if s.is_empty() {
                bail!(InvalidInput, "empty member name; give a file, a block device or mem:SIZE");
            }
            return Ok(MemberSpec::Path(PathBuf::from(s)));
        };
        let mut parts = rest.split(',');
        let size = parse_size(parts.next().unwrap_or(""), "mem: drive size")?;
        if size < 2 << 20 {
            bail!(InvalidInput, "mem: drive of {size} bytes is too small; give at least 2M, e.g. mem:1G");
        }
        let mut limits = Limits::default();
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                bail!(InvalidInput, "'{p}' in '{s}' is not KEY=VALUE; use bw=250M, iops=25000, riops=, wiops=, rbw=, wbw= or lat=20");
            };
            match k {
                "bw" => limits.bw = parse_rate(v, "bw")?,
                "iops" => limits.iops = parse_rate(v, "iops")?,
                "lat" => limits.lat_us = parse_rate(v, "lat")?,
                "rbw" => limits.rbw = parse_rate(v, "rbw")?,
                "wbw" => limits.wbw = parse_rate(v, "wbw")?,
                "riops" => limits.riops = parse_rate(v, "riops")?,
                "wiops" => limits.wiops = parse_rate(v, "wiops")?,
                _ => bail!(
                    InvalidInput,
                    "unknown mem: option '{k}' in '{s}'; known: bw, iops (reads and writes share them), rbw, wbw, riops, wiops (one direction each), lat"
                ),
            }
        }
        Ok(MemberSpec::Mem(MemSpec { size, limits }))
    }
}

impl std::fmt::Display for MemberSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberSpec::Path(p) => write!(f, "{}", p.display()),
            MemberSpec::Null(size) => write!(f, "null:{}", crate::units::fmt_size(*size)),
            MemberSpec::Mem(m) => {
                write!(f, "mem:{}", crate::units::fmt_size(m.size))?;
                if m.limits.bw > 0 {
                    write!(f, ",bw={}", m.limits.bw)?;
                }
                if m.limits.iops > 0 {
                    write!(f, ",iops={}", m.limits.iops)?;
                }
                for (k, v) in [("rbw", m.limits.rbw), ("wbw", m.limits.wbw), ("riops", m.limits.riops), ("wiops", m.limits.wiops)] {
                    if v > 0 {
                        write!(f, ",{k}={v}")?;
                    }
                }
                if m.limits.lat_us > 0 {
                    write!(f, ",lat={}", m.limits.lat_us)?;
                }
                Ok(())
            }
        }
    }
}

/// Identity of the object behind a path, to catch one drive named twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A file: (st_dev, st_ino).
    File(u64, u64),
    /// A block device: st_rdev.
    Device(u64),
    /// An emulated (`mem:`) or null drive: unique per process.
    Mem(u64),
}

impl MemberSpec {
    /// What this spec names, without opening it. Errors: `Io` when the path
    /// does not exist or cannot be inspected.
    pub fn identity(&self) -> Result<Identity> {
        match self {
            MemberSpec::Path(p) => {
                let md = std::fs::metadata(p).map_err(|e| Error::io("cannot open member", p, e))?;
                if md.file_type().is_block_device() {
                    Ok(Identity::Device(md.rdev()))
                } else {
                    Ok(Identity::File(md.dev(), md.ino()))
                }
            }
            MemberSpec::Mem(_) | MemberSpec::Null(_) => {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                Ok(Identity::Mem(NEXT.fetch_add(1, Ordering::Relaxed)))
            }
        }
    }
}

/// Checks that no drive is named twice in `specs`.
///
/// Errors: `InvalidInput` naming both spellings of the duplicate.
pub fn check_distinct(specs: &[MemberSpec]) -> Result<Vec<Identity>> {
    let mut ids: Vec<Identity> = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        let id = s.identity()?;
        if let Some(j) = ids.iter().position(|x| *x == id) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("member {} is given twice (also as {}); name each drive once", s, specs[j]),
            ));
        }
        ids.push(id);
        let _ = i;
    }
    Ok(ids)
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_mem_spec() {
        let s: MemberSpec = "mem:1G,bw=250M,iops=25000,lat=20".parse().unwrap();
        assert_eq!(
            s,
            MemberSpec::Mem(MemSpec { size: 1 << 30, limits: Limits { bw: 250_000_000, iops: 25_000, lat_us: 20, ..Limits::default() } })
        );
        let d: MemberSpec = "mem:1G,riops=1000,wiops=2K,rbw=1M,wbw=2M".parse().unwrap();
        assert_eq!(
            d,
            MemberSpec::Mem(MemSpec {
                size: 1 << 30,
                limits: Limits { riops: 1000, wiops: 2000, rbw: 1_000_000, wbw: 2_000_000, ..Limits::default() }
            })
        );
        assert_eq!(d.to_string(), "mem:1G,rbw=1000000,wbw=2000000,riops=1000,wiops=2000");
        assert_eq!(d.to_string().parse::<MemberSpec>().unwrap(), d);
        assert_eq!(s.to_string(), "mem:1G,bw=250000000,iops=25000,lat=20");
        assert!("mem:1G,foo=1".parse::<MemberSpec>().unwrap_err().to_string().contains("unknown mem: option 'foo'"));
        assert!("mem:1K".parse::<MemberSpec>().is_err());
        assert!("mem:".parse::<MemberSpec>().is_err());
        assert!("".parse::<MemberSpec>().is_err());
    }
}
