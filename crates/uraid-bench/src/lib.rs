//! uraid-bench: the reviewers' benchmark suite behind `uraid bench`,
//! `compare`, `suite`, `tune` and `demo`.
//!
//! - [`profile`]: the tests and named sets (CrystalDiskMark 8 default,
//!   NVMe, Peak, Real World, Mix; Iometer; AS SSD; ATTO; linear).
//! - [`loadgen`]: runs one timed test on a volume with io_uring, one queue
//!   per thread, and measures MB/s (10^6 bytes/s), IOPS, latency and CPU.
//! - [`sweep`]: the ATTO transfer-size sweep and the linear surface test.
//! - [`suite`]: warm-up, repeated runs, test-area preparation.
//! - [`stats`]: median, min, max, spread, and the "same" verdict.
//! - [`target`]: targets given by path, opened side by side.
//! - [`machine`]: CPU, kernel, what each member is and sits on, and the
//!   shared-device / shared-bus warnings.
//! - [`review`]: everything above on one target; the report's data.
//! - [`tune`]: which chunk size for a workload.
//! - [`chart`], [`html`], [`report`]: PNG/SVG charts, the HTML report,
//!   terminal tables.

pub mod chart;
pub mod compare;
pub mod html;
pub mod loadgen;
pub mod machine;
pub mod profile;
pub mod report;
pub mod review;
pub mod stats;
pub mod suite;
pub mod sweep;
pub mod target;
pub mod tune;

pub use loadgen::{Fill, RunResult};
pub use profile::{Dir, Pattern, Profile, Set, Test};
pub use stats::{Stat, Summary};
pub use suite::{SuiteOptions, TestResult};
