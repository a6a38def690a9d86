//! The machine a report was made on. What each member is and sits on,
//! and the warning for members that share a device or a bus, live in
//! `uraid_core::io::facts` (the service shows them too); they are
//! re-exported here for the bench's reports.
//!
//! Everything comes from /proc and /sys; what cannot be read is left
//! empty rather than guessed.

use std::fs;

use serde::Serialize;
use uraid_core::io::identity::read_trim;

/// The computer and operating system.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Machine {
    /// CPU model name (/proc/cpuinfo).
    pub cpu: String,
    /// Online CPUs (logical).
    pub cpus: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Operating system (PRETTY_NAME of /etc/os-release).
    pub os: String,
    /// Memory in bytes (MemTotal).
    pub memory: u64,
    /// Host name.
    pub hostname: String,
}

/// Reads the machine's description.
pub fn machine() -> Machine {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "model name" | "Model" | "cpu model" | "Processor").then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let memory = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()))
        .unwrap_or(0)
        * 1024;
    let os = fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string()))
        .unwrap_or_default();
    Machine {
        cpu,
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        os,
        memory,
        hostname: read_trim("/proc/sys/kernel/hostname").unwrap_or_default(),
    }
}

pub use uraid_core::io::facts::{member_info, shared_warnings, Disk, MemberInfo};

/// How busy the machine was while a target ran, from /proc: the load
/// average (/proc/loadavg) before and after, and over the run the share of
/// every CPU's time that the hypervisor took (steal) and that other
/// processes used (the machine's busy time, /proc/stat, less this
/// process's, /proc/self/stat). A figure measured while the machine was
/// busy may be low; [`Busy::warning`] says so.
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct Busy {
    /// 1-minute load average when the target started.
    pub load_start: f64,
    /// 1-minute load average when it ended.
    pub load_end: f64,
    /// Steal time over the run, % of all CPUs' time.
    pub steal_pct: f64,
    /// CPU time of other processes over the run, % of all CPUs' time.
    pub others_pct: f64,
}

/// Over this share of all CPUs' time used by other processes, a run is
/// called busy (%).
pub const BUSY_OTHERS_PCT: f64 = 10.0;
/// Over this steal, a run is called busy (%).
pub const BUSY_STEAL_PCT: f64 = 2.0;

impl Busy {
    /// Why the figures of a run this busy may be low, or None when the
    /// machine was quiet: other processes over [`BUSY_OTHERS_PCT`] of the
    /// CPUs, steal over [`BUSY_STEAL_PCT`], or a load average at the start
    /// over half the CPUs (`cpus`).
    pub fn warning(&self, cpus: usize) -> Option<String> {
        let loaded = self.load_start > cpus as f64 / 2.0;
        if self.others_pct <= BUSY_OTHERS_PCT && self.steal_pct <= BUSY_STEAL_PCT && !loaded {
            return None;
        }
        Some(format!(
            "the machine was busy during this run ({}): its figures may be low; rerun on a quiet machine to trust them",
            self.describe()
        ))
    }

    /// One line: "load average 0.4 -> 2.1, other processes 35% of the CPUs, steal 0.0%".
    pub fn describe(&self) -> String {
        format!(
            "load average {:.1} -> {:.1}, other processes {:.0}% of the CPUs, steal {:.1}%",
            self.load_start, self.load_end, self.others_pct, self.steal_pct
        )
    }
}

/// CPU clock ticks from /proc: (all CPUs' total, their busy part, steal),
/// and this process's user + system ticks.
#[derive(Debug, Clone, Copy, Default)]
struct Ticks {
    total: u64,
    busy: u64,
    steal: u64,
    own: u64,
}

impl Ticks {
    fn now() -> Ticks {
        let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
        let own = fs::read_to_string("/proc/self/stat").unwrap_or_default();
        Ticks::parse(&stat, &own)
    }

    /// From /proc/stat's `cpu` line (user nice system idle iowait irq
    /// softirq steal ...; guest time is already inside user) and
    /// /proc/self/stat (fields 14 and 15, utime and stime, counted after
    /// the command name's closing parenthesis). What does not parse
    /// counts as 0.
    fn parse(stat: &str, own: &str) -> Ticks {
        let cpu: Vec<u64> = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .map(|l| l.split_whitespace().skip(1).take(8).map(|v| v.parse().unwrap_or(0)).collect())
            .unwrap_or_default();
        let f = |i: usize| cpu.get(i).copied().unwrap_or(0);
        let total: u64 = (0..8).map(f).sum();
        let steal = f(7);
        let busy = total.saturating_sub(f(3) + f(4) + steal);
        let after = own.rfind(')').map(|i| &own[i + 1..]).unwrap_or("");
        let fields: Vec<u64> = after.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
        // After ")", field 3 (state) is index 0, so utime (14) is index 11.
        let own = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
        Ticks { total, busy, steal, own }
    }
}

/// A [`Busy`] measurement under way: [`BusyProbe::start`] before a run,
/// [`BusyProbe::finish`] after it.
#[derive(Debug, Clone, Copy)]
pub struct BusyProbe {
    load: f64,
    ticks: Ticks,
}

fn load1() -> f64 {
    fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0.0)
}

impl BusyProbe {
    /// Takes the first sample.
    pub fn start() -> BusyProbe {
        BusyProbe { load: load1(), ticks: Ticks::now() }
    }

    /// Takes the second sample and returns what happened in between.
    pub fn finish(&self) -> Busy {
        Busy::between(self.load, load1(), self.ticks, Ticks::now())
    }
}

impl Busy {
    fn between(load_start: f64, load_end: f64, a: Ticks, b: Ticks) -> Busy {
        let total = b.total.saturating_sub(a.total);
        if total == 0 {
            return Busy { load_start, load_end, ..Busy::default() };
        }
        let pct = |x: u64| x as f64 * 100.0 / total as f64;
        let others = b.busy.saturating_sub(a.busy).saturating_sub(b.own.saturating_sub(a.own));
        Busy { load_start, load_end, steal_pct: pct(b.steal.saturating_sub(a.steal)), others_pct: pct(others) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_described() {
        let m = machine();
        assert!(!m.kernel.is_empty() && m.cpus >= 1 && m.memory > 0, "{m:?}");
    }

    #[test]
    fn busy_is_other_processes_and_steal_over_the_run() {
        // 2 CPUs; over the run 1000 ticks pass: 600 busy, of which this
        // process used 200; 50 stolen.
        let a = Ticks::parse("cpu  100 0 100 1000 0 0 0 10 0 0\ncpu0 1 2 3\n", "42 (a b) c) R 1 1 1 0 -1 0 0 0 0 0 50 50 0 0");
        let b = Ticks::parse("cpu  500 0 300 1300 50 0 0 60 0 0\n", "42 (a b) c) R 1 1 1 0 -1 0 0 0 0 0 150 150 0 0");
        assert_eq!((a.total, a.busy, a.steal, a.own), (1210, 200, 10, 100));
        let busy = Busy::between(0.5, 3.0, a, b);
        assert_eq!(busy.steal_pct, 5.0);
        assert_eq!(busy.others_pct, 40.0, "{busy:?}");
        let w = busy.warning(2).expect("busy");
        assert!(w.contains("other processes 40% of the CPUs") && w.contains("steal 5.0%") && w.contains("0.5 -> 3.0"), "{w}");
        let quiet = Busy { load_start: 0.2, load_end: 1.9, steal_pct: 0.0, others_pct: 3.0 };
        assert_eq!(quiet.warning(2), None);
        assert!(Busy { load_start: 1.5, ..quiet }.warning(2).is_some(), "a loaded start is busy");
        let now = BusyProbe::start().finish();
        assert!(now.others_pct >= 0.0 && now.steal_pct >= 0.0, "{now:?}");
    }
}
