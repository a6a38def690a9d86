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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_described() {
        let m = machine();
        assert!(!m.kernel.is_empty() && m.cpus >= 1 && m.memory > 0, "{m:?}");
    }
}
