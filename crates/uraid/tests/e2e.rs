//! End-to-end tests: the engine at every level, the control path
//! (create, examine, assemble) and the `uraid` command, on every kind of
//! member (emulated `mem:` drives, regular files, loop block devices), with
//! real clients (fio, mkfs.ext4, losetup) where the test needs them.
//!
//! Tests that need an external tool fail with a message naming it when it is
//! missing (CI installs fio, e2fsprogs and util-linux); none is skipped.
//! Random workloads print their seed; set `URAID_E2E_SEED` to replay one.

#[path = "e2e/util.rs"]
mod util;

#[path = "e2e/data.rs"]
mod data;

#[path = "e2e/errors.rs"]
mod errors;

#[path = "e2e/examine.rs"]
mod examine;

#[path = "e2e/bench.rs"]
mod bench;

#[path = "e2e/nbd.rs"]
mod nbd;

#[path = "e2e/suite.rs"]
mod suite;

// Crash recovery: SIGKILL at random moments, assemble, verify, check.
#[path = "e2e/crash.rs"]
mod crash;

// Redundant arrays: create at every level, Matrix volumes, assemble rules,
// fail / remove / add / replace, rebuild, check and repair, status.
#[path = "e2e/manage.rs"]
mod manage;

// uraid scan, the configuration file, arrays named in place of members.
#[path = "e2e/scan.rs"]
mod scan;

// The always-on service: control socket, events, metrics, systemd.
#[path = "e2e/service.rs"]
mod service;

#[path = "e2e/hostile.rs"]
mod hostile;

// uraid grow: restripe onto more members; interrupted reshapes resume.
#[path = "e2e/grow.rs"]
mod grow;

// The README's walkthrough, extracted from its code blocks and run in order.
#[path = "e2e/readme.rs"]
mod readme;
