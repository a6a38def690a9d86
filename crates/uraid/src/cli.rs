//! The command line: the subcommands and their arguments (clap), and the
//! dispatch to the module that implements each. Commands import nothing
//! from here.

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::array_cmds::{AssembleArgs, CreateArgs, ExamineArgs};
use crate::bench_cmds::{BenchArgs, CompareArgs};
use crate::demo::DemoArgs;
use crate::live_cmds;
use crate::service::client::Client;

/// uraid: software RAID for NVMe drives in user space, with the reviewers'
/// benchmark suite built in.
#[derive(Parser)]
#[command(
    name = "uraid",
    version,
    about,
    long_about = None,
    after_help = "An array is named by its members (any order), its NAME or its UUID (from /etc/uraid/uraid.conf or a \
                  scan). While `uraid serve NAME` runs, status, fail, remove, add, replace, rebuild, check, repair, \
                  config and stop act on the live array through its control socket (/run/uraid/NAME.ctl); rebuilds \
                  run in its background."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create an array: write a superblock on every member.
    Create(CreateArgs),
    /// Show the superblock (or other signature) on each member.
    Examine(ExamineArgs),
    /// List the arrays on the machine's block devices and in DIRs (like mdadm --examine --scan); --config records them by name.
    Scan(crate::scan::ScanArgs),
    /// Check that the members form an array, bring it up to date (resync after a crash), stop it cleanly.
    Assemble(AssembleArgs),
    /// Add members to an array, stopped or served: its volume is restriped onto them (RAID 0, 5, 6, 10; crash-safe, resumable) or a stopped RAID 1 gains copies; or grow its last volume into the room past it (--size).
    Grow(crate::grow_cmd::GrowArgs),
    /// Each volume's level, size, chunk and state, each member's role and state (like /proc/mdstat).
    Status(crate::manage::StatusArgs),
    /// Mark a member faulty (it is no longer read or written).
    Fail(crate::manage::FailArgs),
    /// Take a faulty member or a spare out of the array.
    Remove(crate::manage::RemoveArgs),
    /// Add a drive: it fills a missing role (and is rebuilt) or waits as a spare.
    Add(crate::manage::AddArgs),
    /// Put a new drive in place of a member and rebuild it.
    Replace(crate::manage::ReplaceArgs),
    /// Rebuild the members being rebuilt (resumes where it stopped).
    Rebuild(crate::manage::RebuildArgs),
    /// Change a volume's cache (off, writethrough, writeback) in the superblocks; used from the next assemble.
    Config(crate::manage::ConfigArgs),
    /// Stop a served array cleanly (as SIGTERM to its `uraid serve`).
    Stop(crate::live_cmds::StopArgs),
    /// Each member's I/O of a served array (r/s, w/s, MB/s, latencies, errors), every INTERVAL seconds, like zpool iostat -v.
    Iostat(crate::iostat::IostatArgs),
    /// Follow the events of served arrays (Fail, DegradedArray, RebuildFinished, ...), like mdadm --monitor.
    Monitor(crate::monitor::MonitorArgs),
    /// Scrub: read every stripe and count where copies or parity disagree.
    Check(crate::manage::CheckArgs),
    /// Scrub and rewrite copies or parity where they disagree.
    Repair(crate::manage::CheckArgs),
    /// Run the CrystalDiskMark profiles on a drive, a file or an array.
    Bench(BenchArgs),
    /// One drive alone against RAID 0 arrays of N such drives.
    Compare(CompareArgs),
    /// Compare 1, 2 and 4 emulated NVMe drives (no hardware needed).
    Demo(DemoArgs),
    /// Serve the array: NBD export, control socket, events and metrics, until `uraid stop`, SIGINT or SIGTERM.
    Serve(crate::serve::ServeArgs),
    /// The reviewers' suite (CrystalDiskMark, ATTO, Iometer, AS SSD, linear) on targets side by side; HTML report and charts.
    Suite(crate::suite_cmds::SuiteCmdArgs),
    /// Which chunk size? Runs the tests on arrays at every chunk size and recommends one.
    Tune(crate::suite_cmds::TuneArgs),
    /// List the test sets and their parameters.
    Profiles(crate::suite_cmds::ProfilesArgs),
    /// For the udev rule: the array name and UUID of a ublk device (URAID_NAME=, URAID_UUID=).
    #[command(hide = true)]
    UdevId(crate::devlinks::UdevIdArgs),
}


/// Entry point of the CLI.
pub fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Create(a) => crate::array_cmds::cmd_create(a),
        Cmd::Examine(a) => crate::array_cmds::cmd_examine(a),
        Cmd::Assemble(a) => crate::array_cmds::cmd_assemble(a),
        Cmd::Scan(a) => crate::scan::cmd_scan(a),
        Cmd::Grow(a) => crate::grow_cmd::cmd_grow(a),
        // On a served array the command goes to its process (crate::live_cmds).
        Cmd::Status(a) => match live(&a.array.members) {
            Some(c) => live_cmds::status(c, a.json),
            None => crate::manage::cmd_status(a),
        },
        Cmd::Fail(a) => match live(&a.array.members) {
            Some(c) => live_cmds::fail(c, &a.member, a.force),
            None => crate::manage::cmd_fail(a),
        },
        Cmd::Remove(a) => match live(&a.array.members) {
            Some(c) => live_cmds::remove(c, &a.member),
            None => crate::manage::cmd_remove(a),
        },
        Cmd::Add(a) => match live(&a.array.members) {
            Some(c) => live_cmds::add(c, &a.spare, a.force),
            None => crate::manage::cmd_add(a),
        },
        Cmd::Replace(a) => match live(&a.array.members) {
            Some(c) => live_cmds::replace(c, &a.old, &a.new, a.force),
            None => crate::manage::cmd_replace(a),
        },
        Cmd::Rebuild(a) => match live(&a.array.members) {
            Some(c) => live_cmds::rebuild(c, crate::manage::rate(&a.run.rate)?),
            None => crate::manage::cmd_rebuild(a),
        },
        Cmd::Config(a) => match live(&a.array.members) {
            Some(c) => live_cmds::config(c, &a),
            None => crate::manage::cmd_config(a),
        },
        Cmd::Check(a) => match live(&a.array.members) {
            Some(c) => live_cmds::check(c, &a, false),
            None => crate::manage::cmd_check(a, false),
        },
        Cmd::Repair(a) => match live(&a.array.members) {
            Some(c) => live_cmds::check(c, &a, true),
            None => crate::manage::cmd_check(a, true),
        },
        Cmd::Stop(a) => live_cmds::stop(a),
        Cmd::Monitor(a) => crate::monitor::monitor(a),
        Cmd::Iostat(a) => crate::iostat::cmd_iostat(a),
        Cmd::Bench(a) => crate::bench_cmds::cmd_bench(a),
        Cmd::Compare(a) => crate::bench_cmds::cmd_compare(a),
        Cmd::Demo(a) => crate::demo::run(a),
        Cmd::Serve(a) => crate::serve::run(a),
        Cmd::Suite(a) => crate::suite_cmds::run_suite_cmd(a),
        Cmd::Tune(a) => crate::suite_cmds::run_tune_cmd(a),
        Cmd::Profiles(a) => crate::suite_cmds::run_profiles_cmd(a),
        Cmd::UdevId(a) => crate::devlinks::udev_id(a),
    }
}

/// The control connection of the running process that serves the array
/// `members` names (a name, a UUID or member paths), if one does.
fn live(members: &[String]) -> Option<Client> {
    crate::service::client::find(members)
}
