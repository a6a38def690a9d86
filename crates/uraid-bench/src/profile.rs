//! Benchmark profiles and the named sets the reviews use.
//!
//! Profiles are named as CrystalDiskMark 8 names them: `SEQ1M Q8T1` =
//! sequential, 1 MiB blocks, queue depth 8, 1 thread; `RND4K Q32T16` =
//! random 4 KiB blocks, 16 threads with 32 requests in flight each. Any such
//! name parses (`SEQ256K Q4T2`), so custom loads need no code.
//!
//! Sets (`--sets`), with their sources. CrystalDiskMark 8 keeps nine test
//! slots (`m_BenchType/Size/Queues/Threads[0..9]` in its source,
//! `DiskMarkDlg.cpp` and `DiskBench.cpp`): the default profile runs slots
//! 0-3, "Peak Performance" slots 4-5 and "Real World Performance" slots
//! 6-7. The "NVMe SSD" settings change slots 1, 2 and 5, so Peak differs
//! between the two settings and Real World does not.
//!
//! | set | tests |
//! |---|---|
//! | `cdm` | CrystalDiskMark 8 default: SEQ1M Q8T1, SEQ1M Q1T1, RND4K Q32T1, RND4K Q1T1; read and write |
//! | `nvme` | CrystalDiskMark 8 "NVMe SSD" settings: SEQ1M Q8T1, SEQ128K Q32T1, RND4K Q32T16, RND4K Q1T1 |
//! | `peak` | CrystalDiskMark 8 "Peak Performance" (default settings): SEQ1M Q8T1, RND4K Q32T1 |
//! | `peak-nvme` | CrystalDiskMark 8 "Peak Performance" under the NVMe SSD settings: SEQ1M Q8T1, RND4K Q32T16 |
//! | `realworld` | CrystalDiskMark 8 "Real World Performance" (either settings): SEQ1M Q1T1, RND4K Q1T1 |
//! | `mix` | CrystalDiskMark 8 "+Mix": the default profiles as mixed read/write (70% read by default) |
//! | `iometer` | Iometer's 4 KiB random 50% read / 50% write at QD32 |
//! | `asssd` | AS SSD: Seq (16 MiB, QD1), 4K (QD1), 4K-64Thrd (64 threads, QD1 each), access time (512 B, QD1); score |
//! | `atto` | ATTO Disk Benchmark: 512 B to 64 MiB in powers of two, QD4, 256 MiB, write then read (see [`crate::sweep`]) |
//! | `linear` | AIDA64 linear read: the whole device in 1 MiB blocks at QD1, MB/s against position |

use std::collections::HashSet;
use std::sync::Mutex;

use serde::Serialize;
use uraid_core::units::fmt_size;

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
    /// Each request is a read with this probability in percent (1..=99),
    /// else a write (CrystalDiskMark's Mix, Iometer's read/write ratio).
    Mix(u8),
}

impl std::fmt::Display for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dir::Read => f.write_str("read"),
            Dir::Write => f.write_str("write"),
            Dir::Mix(r) => write!(f, "mix R{r}/W{}", 100 - r),
        }
    }
}

impl Dir {
    /// True when the test writes.
    pub fn writes(&self) -> bool {
        !matches!(self, Dir::Read)
    }
    /// True when the test reads.
    pub fn reads(&self) -> bool {
        !matches!(self, Dir::Write)
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
    /// Threads, each with its own queue (its own io_uring).
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

/// Most threads a profile may have (AS SSD's 64 is the largest in use).
pub const MAX_THREADS: usize = 256;
/// Most requests in flight per thread.
pub const MAX_QD: usize = 1024;

/// SEQ1M Q8T1: CrystalDiskMark 8 default, first row.
pub const SEQ1M_Q8T1: Profile = Profile { name: "SEQ1M Q8T1", block: 1 << 20, qd: 8, threads: 1, pattern: Pattern::Seq };
/// SEQ1M Q1T1: CrystalDiskMark 8 default, second row.
pub const SEQ1M_Q1T1: Profile = Profile { name: "SEQ1M Q1T1", block: 1 << 20, qd: 1, threads: 1, pattern: Pattern::Seq };
/// SEQ128K Q32T1: CrystalDiskMark 8 NVMe SSD settings, second row.
pub const SEQ128K_Q32T1: Profile =
    Profile { name: "SEQ128K Q32T1", block: 128 << 10, qd: 32, threads: 1, pattern: Pattern::Seq };
/// RND4K Q32T1: CrystalDiskMark 8 default, third row.
pub const RND4K_Q32T1: Profile = Profile { name: "RND4K Q32T1", block: 4096, qd: 32, threads: 1, pattern: Pattern::Rand };
/// RND4K Q32T16: CrystalDiskMark 8 NVMe SSD settings, third row (16
/// threads, 32 requests in flight each).
pub const RND4K_Q32T16: Profile =
    Profile { name: "RND4K Q32T16", block: 4096, qd: 32, threads: 16, pattern: Pattern::Rand };
/// RND4K Q1T1: CrystalDiskMark 8 default, fourth row.
pub const RND4K_Q1T1: Profile = Profile { name: "RND4K Q1T1", block: 4096, qd: 1, threads: 1, pattern: Pattern::Rand };

/// Iometer's classic 4 KiB random load at QD32 (run as 50% read / 50% write).
pub const IOMETER_4K_Q32: Profile =
    Profile { name: "Iometer 4K Q32T1", block: 4096, qd: 32, threads: 1, pattern: Pattern::Rand };
/// AS SSD "Seq": 16 MiB sequential blocks at QD1.
pub const ASSSD_SEQ: Profile = Profile { name: "AS SSD Seq", block: 16 << 20, qd: 1, threads: 1, pattern: Pattern::Seq };
/// AS SSD "4K": 4 KiB random at QD1.
pub const ASSSD_4K: Profile = Profile { name: "AS SSD 4K", block: 4096, qd: 1, threads: 1, pattern: Pattern::Rand };
/// AS SSD "4K-64Thrd": 4 KiB random, 64 threads with one request each.
pub const ASSSD_4K_64: Profile = Profile { name: "AS SSD 4K-64Thrd", block: 4096, qd: 1, threads: 64, pattern: Pattern::Rand };
/// AS SSD "Acc.time": 512 B random at QD1; its figure is the mean latency.
pub const ASSSD_ACCESS: Profile = Profile { name: "AS SSD Acc.time", block: 512, qd: 1, threads: 1, pattern: Pattern::Rand };

/// CrystalDiskMark 8's default set, in its order.
pub const CDM_DEFAULT: [Profile; 4] = [SEQ1M_Q8T1, SEQ1M_Q1T1, RND4K_Q32T1, RND4K_Q1T1];
/// CrystalDiskMark 8's NVMe SSD set, in its order.
pub const CDM_NVME: [Profile; 4] = [SEQ1M_Q8T1, SEQ128K_Q32T1, RND4K_Q32T16, RND4K_Q1T1];
/// CrystalDiskMark 8's Peak Performance profile under its default
/// settings (its test slots 4 and 5).
pub const CDM_PEAK: [Profile; 2] = [SEQ1M_Q8T1, RND4K_Q32T1];
/// CrystalDiskMark 8's Peak Performance profile under its NVMe SSD
/// settings, which make slot 5 RND4K Q32T16.
pub const CDM_PEAK_NVME: [Profile; 2] = [SEQ1M_Q8T1, RND4K_Q32T16];
/// CrystalDiskMark 8's Real World Performance profile (slots 6 and 7, the
/// same under both settings).
pub const CDM_REAL_WORLD: [Profile; 2] = [SEQ1M_Q1T1, RND4K_Q1T1];
/// AS SSD's tests, in its order.
pub const ASSSD: [Profile; 4] = [ASSSD_SEQ, ASSSD_4K, ASSSD_4K_64, ASSSD_ACCESS];
/// Every named profile (the ones [`by_name`] knows besides the generic form).
pub const NAMED: [Profile; 11] = [
    SEQ1M_Q8T1,
    SEQ1M_Q1T1,
    SEQ128K_Q32T1,
    RND4K_Q32T1,
    RND4K_Q32T16,
    RND4K_Q1T1,
    IOMETER_4K_Q32,
    ASSSD_SEQ,
    ASSSD_4K,
    ASSSD_4K_64,
    ASSSD_ACCESS,
];

/// CrystalDiskMark's default read share of its Mix test, in percent.
pub const CDM_MIX_READ_PCT: u8 = 70;
/// Iometer's read share, in percent.
pub const IOMETER_READ_PCT: u8 = 50;

/// One test: a profile in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Test {
    /// The load shape.
    pub profile: Profile,
    /// Read, write or mixed.
    pub dir: Dir,
}

impl std::fmt::Display for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.profile.name, self.dir)
    }
}

impl Test {
    /// True for the AS SSD access-time test, whose figure is a latency.
    pub fn is_access_time(&self) -> bool {
        self.profile == ASSSD_ACCESS
    }
}

fn norm(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace() && *c != '-' && *c != '_').collect::<String>().to_ascii_uppercase()
}

/// Interned names of parsed custom profiles: a profile stays `Copy` with a
/// `&'static str` name, and each distinct name is stored once.
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut g = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = g.get_or_insert_with(HashSet::new);
    if let Some(s) = set.get(name.as_str()) {
        return s;
    }
    let s: &'static str = Box::leak(name.into_boxed_str());
    set.insert(s);
    s
}

/// Parses a size like `4K`, `128K`, `1M`, `512` (bytes, powers of 1024).
fn parse_block(s: &str) -> Option<usize> {
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1usize << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'B' => (&s[..s.len() - 1], 1),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// Looks a profile up by name, ignoring case, spaces, `-` and `_`: a named
/// one (`seq1mq8t1`, `AS SSD 4K`) or the generic CrystalDiskMark form
/// `SEQ<size>Q<qd>T<threads>` / `RND<size>Q<qd>T<threads>` (size in bytes
/// with an optional K or M suffix, powers of 1024).
///
/// Returns `None` for anything else, and for a generic form outside the
/// limits (block 512 B to 64 MiB and a multiple of 512, 1 to
/// [`MAX_QD`] requests, 1 to [`MAX_THREADS`] threads).
pub fn by_name(name: &str) -> Option<Profile> {
    let n = norm(name);
    if let Some(p) = NAMED.iter().copied().find(|p| norm(p.name) == n) {
        return Some(p);
    }
    let (pattern, rest) = if let Some(r) = n.strip_prefix("SEQ") {
        (Pattern::Seq, r)
    } else if let Some(r) = n.strip_prefix("RND") {
        (Pattern::Rand, r)
    } else {
        return None;
    };
    let (size, rest) = rest.split_once('Q')?;
    let (qd, threads) = rest.split_once('T')?;
    let block = parse_block(size)?;
    let qd: usize = qd.parse().ok()?;
    let threads: usize = threads.parse().ok()?;
    if block < 512 || block % 512 != 0 || block > uraid_core::io::request::MAX_REQUEST {
        return None;
    }
    if !(1..=MAX_QD).contains(&qd) || !(1..=MAX_THREADS).contains(&threads) {
        return None;
    }
    let label = fmt_size(block as u64);
    let name = format!("{}{} Q{qd}T{threads}", if pattern == Pattern::Seq { "SEQ" } else { "RND" }, label);
    Some(Profile { name: intern(name), block, qd, threads, pattern })
}

/// A named group of tests, as the benchmarks the reviews use group them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Set {
    /// CrystalDiskMark 8 default.
    Cdm,
    /// CrystalDiskMark 8 NVMe SSD settings.
    Nvme,
    /// CrystalDiskMark 8 Peak Performance (default settings).
    Peak,
    /// CrystalDiskMark 8 Peak Performance under the NVMe SSD settings.
    PeakNvme,
    /// CrystalDiskMark 8 Real World Performance.
    RealWorld,
    /// CrystalDiskMark 8 default profiles as mixed read/write.
    Mix,
    /// Iometer 4 KiB random 50/50 at QD32.
    Iometer,
    /// AS SSD.
    AsSsd,
    /// ATTO Disk Benchmark transfer-size sweep.
    Atto,
    /// AIDA64-style linear surface read (and write, with a flag).
    Linear,
}

/// Every set, in the order they run.
pub const SETS: [Set; 10] = [Set::Cdm, Set::Nvme, Set::Peak, Set::PeakNvme, Set::RealWorld, Set::Mix, Set::Iometer, Set::AsSsd, Set::Atto, Set::Linear];

impl Set {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Set::Cdm => "cdm",
            Set::Nvme => "nvme",
            Set::Peak => "peak",
            Set::PeakNvme => "peak-nvme",
            Set::RealWorld => "realworld",
            Set::Mix => "mix",
            Set::Iometer => "iometer",
            Set::AsSsd => "asssd",
            Set::Atto => "atto",
            Set::Linear => "linear",
        }
    }

    /// What the set is, for `uraid profiles`.
    pub fn about(self) -> &'static str {
        match self {
            Set::Cdm => "CrystalDiskMark 8 default (1 GiB, 5 runs of 5 s); read and write",
            Set::Nvme => "CrystalDiskMark 8 NVMe SSD settings; read and write",
            Set::Peak => "CrystalDiskMark 8 Peak Performance (default settings); read and write",
            Set::PeakNvme => "CrystalDiskMark 8 Peak Performance under the NVMe SSD settings; read and write",
            Set::RealWorld => "CrystalDiskMark 8 Real World Performance; read and write",
            Set::Mix => "CrystalDiskMark 8 +Mix: default profiles, mixed (70% read by default)",
            Set::Iometer => "Iometer 4 KiB random, 50% read / 50% write, QD32",
            Set::AsSsd => "AS SSD: Seq 16 MiB QD1, 4K QD1, 4K-64Thrd, access time 512 B; score",
            Set::Atto => "ATTO: 512 B .. 64 MiB in powers of two, QD4, 256 MiB, write then read per size",
            Set::Linear => "AIDA64 linear: whole device, 1 MiB blocks, QD1, MB/s against position",
        }
    }

    /// Parses a set name (case-insensitive, ignoring `-`, `_` and spaces:
    /// `real-world`, `as-ssd`, `peaknvme` too).
    pub fn parse(s: &str) -> Option<Set> {
        let n = norm(s);
        SETS.iter().copied().find(|set| norm(set.name()) == n)
    }

    /// The timed tests of this set (ATTO and the linear surface are sweeps
    /// and have none). `mix_read` is the read share of the `mix` set in
    /// percent.
    pub fn tests(self, mix_read: u8) -> Vec<Test> {
        let rw = |ps: &[Profile]| -> Vec<Test> {
            ps.iter().flat_map(|&p| [Test { profile: p, dir: Dir::Read }, Test { profile: p, dir: Dir::Write }]).collect()
        };
        match self {
            Set::Cdm => rw(&CDM_DEFAULT),
            Set::Nvme => rw(&CDM_NVME),
            Set::Peak => rw(&CDM_PEAK),
            Set::PeakNvme => rw(&CDM_PEAK_NVME),
            Set::RealWorld => rw(&CDM_REAL_WORLD),
            Set::Mix => CDM_DEFAULT.iter().map(|&p| Test { profile: p, dir: Dir::Mix(mix_read) }).collect(),
            Set::Iometer => vec![Test { profile: IOMETER_4K_Q32, dir: Dir::Mix(IOMETER_READ_PCT) }],
            Set::AsSsd => rw(&ASSSD),
            Set::Atto | Set::Linear => Vec::new(),
        }
    }
}

/// The default test list: every CDM default profile, read then write.
pub fn default_tests() -> Vec<Test> {
    Set::Cdm.tests(CDM_MIX_READ_PCT)
}

/// The tests of `sets` in order, each test once (a test in two sets runs
/// once, where it first appears).
pub fn tests_of(sets: &[Set], mix_read: u8) -> Vec<Test> {
    let mut v: Vec<Test> = Vec::new();
    for s in sets {
        for t in s.tests(mix_read) {
            if !v.contains(&t) {
                v.push(t);
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, block, QD, threads, pattern): CrystalDiskMark 8, Iometer and
    /// AS SSD as DESIGN.md's profile table gives them.
    const TABLE: [(&str, usize, usize, usize, Pattern); 11] = [
        ("SEQ1M Q8T1", 1 << 20, 8, 1, Pattern::Seq),
        ("SEQ1M Q1T1", 1 << 20, 1, 1, Pattern::Seq),
        ("SEQ128K Q32T1", 128 << 10, 32, 1, Pattern::Seq),
        ("RND4K Q32T1", 4096, 32, 1, Pattern::Rand),
        ("RND4K Q32T16", 4096, 32, 16, Pattern::Rand),
        ("RND4K Q1T1", 4096, 1, 1, Pattern::Rand),
        ("Iometer 4K Q32T1", 4096, 32, 1, Pattern::Rand),
        ("AS SSD Seq", 16 << 20, 1, 1, Pattern::Seq),
        ("AS SSD 4K", 4096, 1, 1, Pattern::Rand),
        ("AS SSD 4K-64Thrd", 4096, 1, 64, Pattern::Rand),
        ("AS SSD Acc.time", 512, 1, 1, Pattern::Rand),
    ];

    #[test]
    fn names_match_parameters() {
        for (name, block, qd, threads, pattern) in TABLE {
            let p = by_name(name).unwrap();
            assert_eq!((p.name, p.block, p.qd, p.threads, p.pattern), (name, block, qd, threads, pattern), "{name}");
        }
        assert_eq!(by_name("rnd4k-q32t1").unwrap().name, "RND4K Q32T1");
        assert!(by_name("SEQ9Q").is_none());
        assert!(by_name("foo").is_none());
    }

    #[test]
    fn generic_names_parse() {
        let p = by_name("seq256k-q4t2").unwrap();
        assert_eq!((p.name, p.block, p.qd, p.threads, p.pattern), ("SEQ256K Q4T2", 256 << 10, 4, 2, Pattern::Seq));
        let p = by_name("RND512Q1T1").unwrap();
        assert_eq!((p.block, p.pattern), (512, Pattern::Rand));
        // The same custom name is interned once.
        assert!(std::ptr::eq(by_name("SEQ256K Q4T2").unwrap().name, by_name("seq256kq4t2").unwrap().name));
        for bad in ["SEQ100Q1T1", "SEQ128MQ1T1", "RND4KQ0T1", "RND4KQ1T0", "RND4KQ1T9999", "RND4KQ1", "RNDQ1T1", "SEQxQ1T1"] {
            assert!(by_name(bad).is_none(), "{bad} parsed");
        }
    }

    #[test]
    fn sets_hold_the_documented_tests() {
        let names = |s: Set| s.tests(70).iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(Set::Cdm),
            [
                "SEQ1M Q8T1 read", "SEQ1M Q8T1 write", "SEQ1M Q1T1 read", "SEQ1M Q1T1 write", "RND4K Q32T1 read",
                "RND4K Q32T1 write", "RND4K Q1T1 read", "RND4K Q1T1 write"
            ]
        );
        assert_eq!(
            names(Set::Nvme),
            [
                "SEQ1M Q8T1 read", "SEQ1M Q8T1 write", "SEQ128K Q32T1 read", "SEQ128K Q32T1 write", "RND4K Q32T16 read",
                "RND4K Q32T16 write", "RND4K Q1T1 read", "RND4K Q1T1 write"
            ]
        );
        assert_eq!(names(Set::Peak), ["SEQ1M Q8T1 read", "SEQ1M Q8T1 write", "RND4K Q32T1 read", "RND4K Q32T1 write"]);
        assert_eq!(names(Set::PeakNvme), ["SEQ1M Q8T1 read", "SEQ1M Q8T1 write", "RND4K Q32T16 read", "RND4K Q32T16 write"]);
        assert_eq!(names(Set::RealWorld), ["SEQ1M Q1T1 read", "SEQ1M Q1T1 write", "RND4K Q1T1 read", "RND4K Q1T1 write"]);
        assert_eq!(
            names(Set::Mix),
            ["SEQ1M Q8T1 mix R70/W30", "SEQ1M Q1T1 mix R70/W30", "RND4K Q32T1 mix R70/W30", "RND4K Q1T1 mix R70/W30"]
        );
        assert_eq!(names(Set::Iometer), ["Iometer 4K Q32T1 mix R50/W50"]);
        assert_eq!(names(Set::AsSsd).len(), 8);
        assert!(Set::Atto.tests(70).is_empty() && Set::Linear.tests(70).is_empty());
        // Overlapping sets run a shared test once.
        assert_eq!(tests_of(&[Set::Cdm, Set::Peak], 70).len(), 8);
        assert_eq!(tests_of(&[Set::Cdm, Set::PeakNvme], 70).len(), 10);
        assert_eq!(Set::parse("Real-World"), Some(Set::RealWorld));
        assert_eq!(Set::parse("AS-SSD"), Some(Set::AsSsd));
        assert_eq!(Set::parse("peak-nvme"), Some(Set::PeakNvme));
        assert_eq!(Set::parse("Peak"), Some(Set::Peak));
        assert_eq!(Set::parse("nope"), None);
    }
}
