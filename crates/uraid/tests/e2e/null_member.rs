//! `null:SIZE` members: `uraid bench` runs over them at every level (reads
//! of zeros, writes dropped, each I/O a NOP through the engine's ring), and
//! a null drive named with options is refused with the reason.

use serde_json::Value;

use crate::util::*;

/// The I/Os of every result of a `uraid bench --json` run.
fn ios(json: &str) -> Vec<u64> {
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("bench --json printed no JSON ({e}):\n{json}"));
    v["results"].as_array().expect("results").iter().map(|r| r["best"]["ios"].as_u64().expect("best.ios")).collect()
}

#[test]
fn bench_runs_over_null_members_at_every_level() {
    for (level, n) in [("0", 4), ("1", 2), ("10", 4), ("5", 4), ("6", 4)] {
        let mut args = vec!["bench", "--json", "--quiet", "--overwrite", "--level", level, "--profile", "RND4K-Q32T1", "--runs", "1"];
        args.extend(["--time", "1", "--warmup", "0", "--size", "32M"]);
        args.extend(std::iter::repeat_n("null:64M", n));
        let o = uraid_ok(&args);
        let counts = ios(&o.stdout);
        println!("RAID {level} x{n} over null:64M, RND4K Q32T1 read and write: {counts:?} I/Os in 1 s each");
        assert_eq!(counts.len(), 2, "one read and one write result: {}", o.stdout);
        assert!(counts.iter().all(|&c| c > 0), "every test did I/O: {counts:?}");
    }
}

#[test]
fn null_member_with_options_is_refused() {
    let o = uraid(&["bench", "--quiet", "--overwrite", "--profile", "RND4K-Q32T1", "--time", "1", "null:64M,iops=1000", "null:64M"]);
    assert!(!o.status.success(), "`{}` succeeded", o.cmdline);
    assert!(o.stderr.contains("takes no options"), "{}", o.stderr);
}
