//! Quick probe of the engine at one level over raw members (no superblock,
//! no bitmap): `level_probe LEVEL CHUNK_KIB SECS MEMBER...`. Prints MB/s and
//! IOPS for SEQ1M Q8T1 and RND4K Q32T1 read and write. A development aid;
//! the benchmark of record is bench/redundant.py.

use std::sync::Arc;
use std::time::Duration;

use uraid_bench::loadgen::{run, Fill};
use uraid_bench::profile::{by_name, Dir, Test};
use uraid_core::io::member::{Member, MemberSpec, OpenMode};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::{Geometry, Level, Volume};

fn main() -> uraid_core::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: level_probe LEVEL CHUNK_KIB SECS MEMBER...");
        std::process::exit(2);
    }
    let level = Level::from_number(a[1].parse().expect("level number"))?;
    let chunk: u64 = a[2].parse::<u64>().expect("chunk KiB") << 10;
    let secs: f64 = a[3].parse().expect("seconds");
    let ms: Vec<Member> = a[4..]
        .iter()
        .map(|p| Member::open(&p.parse::<MemberSpec>().unwrap(), OpenMode { write: true, exclusive: true }))
        .collect::<uraid_core::Result<_>>()?;
    let size = ms.iter().map(|m| m.size()).min().unwrap() - DATA_OFFSET;
    let n = ms.len();
    let g = Geometry::new(level, n, chunk, size)?;
    let vol = Volume::new(Arc::new(ms), g, DATA_OFFSET)?;
    let area = (1u64 << 30).min(vol.capacity());
    for (name, dir) in [("SEQ1M Q8T1", Dir::Write), ("SEQ1M Q8T1", Dir::Read), ("RND4K Q32T1", Dir::Write), ("RND4K Q32T1", Dir::Read)] {
        let t = Test { profile: by_name(name).expect("profile"), dir };
        let r = run(&vol, t, area, Duration::from_secs_f64(secs), Fill::Random, 1)?;
        println!("{level} x{n} {name} {dir:?}: {:.1} MB/s {:.0} IOPS cpu {:.2}", r.mbps, r.iops, r.cpu_per_sec);
    }
    Ok(())
}
