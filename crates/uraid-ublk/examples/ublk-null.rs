//! `ublk-null [--queues N] [--depth D] [--size-mib M] [--two-rings]`: a
//! ublk device answering every request at once, no engine behind it
//! (see `uraid_ublk::null`): the floor bench/export.py measures the ublk
//! export against. Prints `/dev/ublkbN` once it serves; SIGINT or SIGTERM
//! stops and deletes it. Defaults: the export's queues (CPUs, at most 4)
//! and depth (64), 256 MiB, one ring.

use uraid_ublk::null::{run, NullOptions, Wait};

fn main() {
    let mut opts = NullOptions {
        queues: std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) as u16,
        depth: uraid_ublk::DEFAULT_DEPTH,
        size: 256 << 20,
        wait: Wait::OneRing,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            match args.next().and_then(|v| v.parse().ok()) {
                Some(n) if n > 0 => n,
                _ => {
                    eprintln!("ublk-null: {what} needs a positive number");
                    std::process::exit(2);
                }
            }
        };
        match a.as_str() {
            "--queues" => opts.queues = num("--queues").min(64) as u16,
            "--depth" => opts.depth = num("--depth").min(4096) as u16,
            "--size-mib" => opts.size = num("--size-mib").min(1 << 30) << 20,
            "--two-rings" => opts.wait = Wait::TwoRings,
            _ => {
                eprintln!("usage: ublk-null [--queues N] [--depth D] [--size-mib M] [--two-rings]");
                std::process::exit(2);
            }
        }
    }
    if let Err(e) = run(&opts) {
        eprintln!("ublk-null: {e}");
        std::process::exit(1);
    }
}
