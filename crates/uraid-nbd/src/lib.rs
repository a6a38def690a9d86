//! uraid-nbd: exports uraid volumes over the NBD protocol, so that any
//! Linux tool (qemu, nbdfuse + losetup, nbdcopy, fio's nbd engine,
//! nbd-client where the kernel has nbd) can use them as block devices.
//!
//! - [`proto`]: the wire format, as pure parsers and encoders.
//! - [`client`]: the client side, an export as a [`uraid_core::BlockDevice`]
//!   (what `uraid bench nbd+unix://...` measures).
//! - [`server`]: listening, the fixed newstyle handshake, and the
//!   transmission phase, one thread and one engine queue per connection.
//! - [`stats`]: live I/O statistics of each export ([`Server::stats`]).
//!
//! Source: NetworkBlockDevice/nbd, doc/proto.md.

pub mod client;
pub mod proto;
pub mod server;
pub mod stats;
pub mod wire;

pub use server::{Export, Listener, Server, ServerOptions};
pub use stats::{LatencyHistogram, StatsSnapshot, LATENCY_BOUNDS_US};
pub use wire::tls_config;
