//! `uraid demo`: the comparison on emulated NVMe drives, in under two
//! minutes, with no hardware and nothing to set up.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use uraid_bench::compare::CompareOptions;
use uraid_bench::profile::default_tests;
use uraid_bench::{Fill, SuiteOptions};
use uraid_core::io::member::{Limits, Member, MemberSpec, OpenMode};
use uraid_core::units::fmt_size;

use clap::Args;

use crate::bench_cmds::{print_comparison, run_compare};

/// Arguments of `uraid demo`.
#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Use sparse files under this directory (real storage) instead of RAM.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
}


/// Each emulated drive: 250 MB/s, 25,000 IOPS, 50 µs access latency: a
/// modest NVMe drive scaled down to what two CPU cores can drive (the same
/// ceilings as the project's testbed).
pub const DRIVE: Limits = Limits { bw: 250_000_000, iops: 25_000, lat_us: 50, rbw: 0, wbw: 0, riops: 0, wiops: 0 };
const DRIVES: usize = 4;
const DRIVE_SIZE: u64 = 512 << 20;

pub fn run(a: DemoArgs) -> Result<()> {
    let started = Instant::now();
    let mut files = Vec::new();
    let members: Vec<Member> = match &a.dir {
        None => (0..DRIVES)
            .map(|_| {
                let spec = MemberSpec::Mem(uraid_core::io::member::MemSpec { size: DRIVE_SIZE, limits: DRIVE });
                Member::open(&spec, OpenMode { write: true, exclusive: true })
            })
            .collect::<Result<_, _>>()?,
        Some(dir) => (0..DRIVES)
            .map(|i| {
                let p = dir.join(format!("uraid-demo-drive{i}.img"));
                let f = std::fs::File::create(&p).with_context(|| format!("cannot create {}", p.display()))?;
                f.set_len(DRIVE_SIZE).with_context(|| format!("cannot size {}", p.display()))?;
                files.push(p.clone());
                let mut m = Member::open(&MemberSpec::Path(p), OpenMode { write: true, exclusive: true })?;
                m.set_limits(DRIVE);
                Ok(m)
            })
            .collect::<Result<_>>()?,
    };
    if !a.json {
        println!(
            "uraid demo: {DRIVES} EMULATED NVMe drives ({}), each capped at {} MB/s, {} IOPS and {} µs latency \
             (uraid's throttle, not real hardware).",
            match &a.dir {
                None => "in RAM".to_string(),
                Some(d) => format!("sparse files under {} on real storage", d.display()),
            },
            DRIVE.bw / 1_000_000,
            DRIVE.iops,
            DRIVE.lat_us
        );
        println!(
            "The physical limit of N drives is N x one drive. CrystalDiskMark 8 default profiles, \
             {} test area, RAID 0 with 128K chunks; short runs (1 warm-up + 1 timed run of 1.5 s).",
            fmt_size(256 << 20)
        );
    }
    let opts = CompareOptions {
        counts: vec![1, 2, 4],
        chunks: vec![128 << 10],
        suite: SuiteOptions {
            tests: default_tests(),
            area: 256 << 20,
            runs: 1,
            duration: Duration::from_millis(1500),
            warmup: Duration::from_millis(500),
            fill: Fill::Random,
            prepare: true,
        },
    };
    let result = run_compare(&members, &opts, a.quiet || a.json);
    drop(members);
    for f in &files {
        let _ = std::fs::remove_file(f);
    }
    let c = result?;
    print_comparison(&c, a.json)?;
    if !a.json {
        println!("demo took {:.0} s. Try: uraid bench --help, uraid compare --help.", started.elapsed().as_secs_f64());
    }
    Ok(())
}
