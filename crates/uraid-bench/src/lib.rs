//! uraid-bench: the load generator behind `uraid bench`, `compare` and `demo`.
//!
//! - [`profile`]: the tests (CrystalDiskMark 8's default set).
//! - [`loadgen`]: runs one test on a volume with io_uring, one queue per
//!   thread, and measures MB/s (10^6 bytes/s), IOPS, latency and CPU.
//! - [`suite`]: warm-up, repeated runs, best / median / spread, test-area
//!   preparation.
//! - [`report`]: tables and JSON, single drive against arrays.

pub mod compare;
pub mod loadgen;
pub mod profile;
pub mod report;
pub mod suite;

pub use loadgen::{Fill, RunResult};
pub use profile::{Dir, Pattern, Profile, Test};
pub use suite::{SuiteOptions, TestResult};
