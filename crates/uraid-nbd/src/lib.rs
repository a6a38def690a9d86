//! uraid-nbd: exports uraid volumes over the NBD protocol, so that any
//! Linux tool (qemu, nbdfuse + losetup, nbdcopy, fio's nbd engine,
//! nbd-client where the kernel has nbd) can use them as block devices.
//!
//! - [`proto`]: the wire format, as pure parsers and encoders.
//! - [`client`]: the client side, an export as a [`uraid_core::BlockDevice`]
//!   (what `uraid bench nbd+unix://...` measures).
//! - [`server`]: listening, the fixed newstyle handshake, and the
//!   transmission phase, one thread and one engine queue per connection.
//! - [`stats`]: live I/O statistics of each export ([`Server::stats`]),
//!   shared with every kind of export (`uraid_core::export::stats`).
//! - [`wire`] and [`psk`]: a connection's byte stream, plain or TLS (with
//!   certificates through rustls, with pre-shared keys through OpenSSL).
//!
//! Source: NetworkBlockDevice/nbd, doc/proto.md.

pub mod client;
pub mod proto;
pub mod psk;
pub mod server;
pub mod sock;
pub mod wire;

pub use psk::psk_config;
pub use server::{Export, Listener, NbdExport, Server, ServerOptions, Tls};
pub use uraid_core::export::stats::{self, LatencyHistogram, StatsSnapshot, LATENCY_BOUNDS_US};
pub use wire::tls_config;
