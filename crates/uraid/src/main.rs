//! The `uraid` command: parses arguments, calls the engine and the
//! benchmark libraries, prints. No RAID logic lives here.

mod array_cmds;
mod bench_cmds;
mod cli;
mod common;
mod conf;
mod demo;
mod devlinks;
mod grow_cmd;
mod iostat;
mod live_cmds;
mod manage;
mod monitor;
mod runstate;
mod scan;
mod serve;
mod service;
mod sock;
mod suite_cmds;
mod ublk_export;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Behave like other command-line tools when the reader of our output
    // goes away (`uraid examine ... | head`): end quietly on SIGPIPE.
    // SAFETY: setting a signal disposition to the default before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uraid: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
