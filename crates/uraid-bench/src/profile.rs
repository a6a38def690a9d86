//! Benchmark profiles, named as CrystalDiskMark 8 names them.
//!
//! `SEQ1M Q8T1` = sequential, 1 MiB blocks, queue depth 8, 1 thread;
//! `RND4K Q32T1` = random 4 KiB blocks at QD32, 1 thread. Source:
//! CrystalDiskMark 8 default and NVMe SSD settings.

use serde::Serialize;

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Consecutive blocks, wrapping at the end of the test area.
    Seq,
    /// Uniformly random block-aligned offsets in the test area.
    Rand,
}

/// Direction of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Dir {
    /// Reads only.
    Read,
    /// Writes only.
    Write,
}

impl std::fmt::Display for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dir::Read => "read",
            Dir::Write => "write",
        })
    }
}

/// A load shape: block size, queue depth per thread, threads, pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// CrystalDiskMark-style name, e.g. `SEQ1M Q8T1`.
    pub name: &'static str,
    /// Block (transfer) size in bytes.
    pub block: usize,
    /// Requests in flight per thread.
    pub qd: usize,
    /// Threads, each with its own queue.
    pub threads: usize,
    /// Access pattern.
    pub pattern: Pattern,
}

impl Profile {
    /// True for sequential profiles, whose headline figure is MB/s (random
    /// ones are read in IOPS, as reviews of NVMe arrays do).
    pub fn is_seq(&self) -> bool {
        self.pattern == Pattern::Seq
    }
}

/// SEQ1M Q8T1: CrystalDiskMark 8 default, first row.
pub const SEQ1M_Q8T1: Profile = Profile { name: "SEQ1M Q8T1", block: 1 << 20, qd: 8, threads: 1, pattern: Pattern::Seq };
/// SEQ1M Q1T1: CrystalDiskMark 8 default, second row.
pub const SEQ1M_Q1T1: Profile = Profile { name: "SEQ1M Q1T1", block: 1 << 20, qd: 1, threads: 1, pattern: Pattern::Seq };
/// RND4K Q32T1: CrystalDiskMark 8 default, third row.
pub const RND4K_Q32T1: Profile = Profile { name: "RND4K Q32T1", block: 4096, qd: 32, threads: 1, pattern: Pattern::Rand };
/// RND4K Q1T1: CrystalDiskMark 8 default, fourth row.
pub const RND4K_Q1T1: Profile = Profile { name: "RND4K Q1T1", block: 4096, qd: 1, threads: 1, pattern: Pattern::Rand };

/// CrystalDiskMark 8's default set, in its order.
pub const CDM_DEFAULT: [Profile; 4] = [SEQ1M_Q8T1, SEQ1M_Q1T1, RND4K_Q32T1, RND4K_Q1T1];

/// One test: a profile in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Test {
    /// The load shape.
    pub profile: Profile,
    /// Read or write.
    pub dir: Dir,
}

impl std::fmt::Display for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.profile.name, self.dir)
    }
}

/// Looks a profile up by name, ignoring case and spaces (`seq1mq8t1`).
pub fn by_name(name: &str) -> Option<Profile> {
    let norm = |s: &str| s.chars().filter(|c| !c.is_whitespace() && *c != '-' && *c != '_').collect::<String>().to_ascii_uppercase();
    CDM_DEFAULT.iter().copied().find(|p| norm(p.name) == norm(name))
}

/// The default test list: every CDM default profile, read then write.
pub fn default_tests() -> Vec<Test> {
    let mut v = Vec::new();
    for p in CDM_DEFAULT {
        v.push(Test { profile: p, dir: Dir::Read });
        v.push(Test { profile: p, dir: Dir::Write });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_parameters() {
        // CrystalDiskMark 8 default settings, checked against its names.
        let table = [
            ("SEQ1M Q8T1", 1 << 20, 8, 1, Pattern::Seq),
            ("SEQ1M Q1T1", 1 << 20, 1, 1, Pattern::Seq),
            ("RND4K Q32T1", 4096, 32, 1, Pattern::Rand),
            ("RND4K Q1T1", 4096, 1, 1, Pattern::Rand),
        ];
        for (name, block, qd, threads, pattern) in table {
            let p = by_name(name).unwrap();
            assert_eq!((p.block, p.qd, p.threads, p.pattern), (block, qd, threads, pattern), "{name}");
        }
        assert_eq!(by_name("rnd4k-q32t1").unwrap().name, "RND4K Q32T1");
        assert!(by_name("SEQ9M").is_none());
    }
}
