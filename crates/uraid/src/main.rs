//! The `uraid` command: parses arguments, calls the engine and the
//! benchmark libraries, prints. No RAID logic lives here.

mod cli;
mod demo;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uraid: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
