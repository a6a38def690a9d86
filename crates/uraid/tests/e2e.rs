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

// NBD clients whose WRITE payloads stop arriving (issue 28, item 1).
#[path = "e2e/nbd_stall.rs"]
mod nbd_stall;

#[path = "e2e/http_limits.rs"]
mod http_limits;

// The live-data map: rebuild and check skip regions never written.
#[path = "e2e/live_map.rs"]
mod live_map;

// The run directory (symbolic links, permissions, squatters, slow control
// clients) and the bounds of inputs (cache size, event counter, escaped
// device paths, duplicate keys, the configuration file's size).
#[path = "e2e/rundir_bounds.rs"]
mod rundir_bounds;

// Boot without systemd (scan --assemble with the config's settings) and
// the monitor of the configured arrays (monitor --scan, --oneshot).
#[path = "e2e/boot_monitor.rs"]
mod boot_monitor;

// Who may connect over TCP: TLS-PSK, client certificates, the refusal of
// unauthenticated non-loopback serving, the loopback warning.
#[path = "e2e/nbd_auth.rs"]
mod nbd_auth;

// A Matrix array served: every volume an export of its own (NBD here,
// ublk in tests/vm/ublk_matrix.sh), kept apart through a rebuild.
#[path = "e2e/matrix_serve.rs"]
mod matrix_serve;

// What the web console may write; names, spares, warnings and times.
#[path = "e2e/console_acts.rs"]
mod console_acts;

// What the administrator sees of a served array: faulty members kept
// listed, the live view during a rebuild, what serve's assemble did.
#[path = "e2e/admin_view.rs"]
mod admin_view;

// The README's walkthrough, extracted from its code blocks and run in order.
#[path = "e2e/readme.rs"]
mod readme;

// Discards on block-device members: real discards, RAID 5's zeroing, TRIM
// turned off by a member that cannot discard (issue 29).
#[path = "e2e/discard.rs"]
mod discard;

// The systemd units: an fstab mount of /dev/uraid/NAME after its serve.
#[path = "e2e/boot_units.rs"]
mod boot_units;

// `serve --ublk` on this machine's kernel (no ublk_drv: a clear error, and
// nothing served); the device itself is tested in the VM (tests/vm/ublk_*.sh).
#[path = "e2e/ublk.rs"]
mod ublk;

// serve --ublk --takeover: its refusals (the takeover itself: tests/vm/ublk_takeover.sh).
#[path = "e2e/takeover.rs"]
mod takeover;

// An idle `uraid serve` sleeps (no periodic wake-ups of its own); SIGTERM
// still stops it at once (issue 29).
#[path = "e2e/idle.rs"]
mod idle;

// `uraid replace` on a served array: the core's one replace, refusals.
#[path = "e2e/served_replace.rs"]
mod served_replace;

// `null:` members (reads of zeros, writes dropped): `uraid bench` over them.
#[path = "e2e/null_member.rs"]
mod null_member;

// Per-member I/O counters: uraid iostat, status, metrics (issue 32, item 3).
#[path = "e2e/iostat.rs"]
mod iostat;
// Read errors repaired from redundancy through `uraid serve` (issue 32
// item 4): counted in status, evented, and --max-read-errors.
#[path = "e2e/read_repair.rs"]
mod read_repair;

// Declustered parity (draid5, draid6): create, degraded reads, rebuild.
#[path = "e2e/draid.rs"]
mod draid;
