//! Exports: how a volume reaches its users. An export serves one volume
//! to clients (an NBD server's export, a ublk block device `/dev/ublkbN`)
//! and lets the control path swap that volume under it.
//!
//! Every kind of export implements [`Export`], so the service (the
//! manager of a served array, the control socket, metrics, the console)
//! works with whichever exports an array has, several at once: ublk for
//! the host, NBD over TLS for remote clients. The data path of each kind
//! lives in its own crate (`uraid-nbd`, `uraid-ublk`); this module holds
//! only what they share: the interface and the I/O statistics ([`stats`]).

use std::sync::Arc;

use crate::volume::Volume;

pub mod stats;

pub use stats::{LatencyHistogram, StatsSnapshot, LATENCY_BOUNDS_US};

/// One served volume, as the control path drives it. Shared between the
/// thread that serves it and the manager (`Send + Sync`); every method
/// returns at once.
///
/// Swapping the volume (a spare took over a role, a reshape grew the
/// volume, the cache mode changed) goes: [`pause`](Self::pause), wait for
/// [`is_quiet`](Self::is_quiet), [`replace_volume`](Self::replace_volume),
/// [`resume`](Self::resume); or, where the old volume may finish its
/// requests in flight, [`replace_volume`](Self::replace_volume) alone
/// (the caller tells when nothing runs on the old volume by its `Arc`
/// count).
pub trait Export: Send + Sync {
    /// The kind, as metrics label it: `"nbd"` or `"ublk"`.
    fn kind(&self) -> &'static str;

    /// Where clients find it, as `serve` prints it: an NBD URI
    /// (`nbd+unix:///NAME?socket=PATH`, `nbds://HOST:PORT/NAME`) or a
    /// block device (`/dev/ublkb0`).
    fn address(&self) -> String;

    /// The volume it serves now.
    fn volume(&self) -> Arc<Volume>;

    /// Its I/O statistics since it started, over every volume it has
    /// served. Take two and [`delta`](StatsSnapshot::delta) them for rates.
    fn stats(&self) -> StatsSnapshot;

    /// Serve `vol` from now on (see the trait's doc). Errors: `vol` has
    /// another block size, or is smaller than the capacity clients were
    /// told.
    fn replace_volume(&self, vol: Arc<Volume>) -> Result<(), String>;

    /// Quiesce: answer the requests in flight and take no more until
    /// [`resume`](Self::resume) (clients wait; nothing is refused).
    fn pause(&self);

    /// Whether a paused export is quiet: nothing in flight, nothing taken.
    /// False when it is not paused.
    fn is_quiet(&self) -> bool;

    /// End a [`pause`](Self::pause): requests go to the current volume.
    fn resume(&self);
}
