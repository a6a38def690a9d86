//! The client side of NBD: connects to an export (uraid's own, or any
//! other server: nbdkit, qemu-nbd, nbd-server), negotiates it with the
//! fixed newstyle handshake and `NBD_OPT_GO`, and drives it through the
//! engine's one I/O interface, [`BlockQueue`]. So the load generator
//! measures an export with the same tests and the same code as the
//! in-process engine (`uraid bench 'nbd+unix:///NAME?socket=PATH'`), as
//! SPDK's bdevperf runs on any bdev.
//!
//! - [`NbdUri`]: `nbd+unix:///NAME?socket=PATH` and `nbd://HOST[:PORT]/NAME`
//!   (the NBD URI format, without TLS).
//! - [`NbdDevice`]: an export as a [`BlockDevice`]: its size, flags and
//!   block size constraints; each [`NbdDevice::open_queue`] is a connection
//!   of its own (one per load thread, as fio's nbd engine per job).
//! - [`NbdQueue`]: one connection. Requests are encoded as they are pushed
//!   and sent without waiting, on a non-blocking socket: a send that would
//!   block leaves the rest for the next call, and a wait reads replies
//!   while it sends, so a client and a server can never both sit blocked
//!   in a send to each other. Replies may come in any order (matched by
//!   handle); READ data goes straight into the request's buffer.
//!
//! Simple replies only, as Linux's nbd client: the client does not ask for
//! structured replies, so a READ's data follows a 16-byte header. A server
//! that breaks the protocol (a bad magic, an unknown handle, a structured
//! reply not asked for, the connection closed with requests in flight) or
//! that sends nothing for [`REPLY_TIMEOUT`] while requests are in flight
//! fails every request in flight with an error that says so, and the queue
//! takes no more: nothing is guessed, and nothing waits for ever.
//!
//! Sources: NetworkBlockDevice/nbd, doc/proto.md ("Fixed newstyle
//! negotiation", "Transmission", "Block size constraints") and doc/uri.md.
//!
//! Files: `uri.rs` (the URI forms), `handshake.rs` (the negotiation and
//! [`ExportInfo`]), `queue.rs` ([`NbdQueue`]); this file holds the socket
//! and [`NbdDevice`].

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use uraid_core::{bail, BlockDevice, BlockQueue, Error, ErrorKind, Result};

use crate::proto::*;

mod handshake;
mod queue;
mod uri;

pub use handshake::{ExportInfo, HANDSHAKE_TIMEOUT};
pub use queue::NbdQueue;
pub use uri::{Endpoint, NbdUri, NBD_PORT};

use handshake::connect;

/// The connection's socket.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn connect(uri: &NbdUri) -> Result<Stream> {
        let fail = |e: io::Error| Error::new(ErrorKind::Io, format!("cannot connect to {uri}: {e}; is the server running?"));
        Ok(match &uri.endpoint {
            Endpoint::Unix(p) => Stream::Unix(UnixStream::connect(p).map_err(fail)?),
            Endpoint::Tcp(a) => {
                let t = TcpStream::connect(a.as_str()).map_err(fail)?;
                // Requests are small and latency-bound: no Nagle delay.
                t.set_nodelay(true).map_err(fail)?;
                Stream::Tcp(t)
            }
        })
    }
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t).and_then(|_| s.set_write_timeout(t)),
            Stream::Tcp(s) => s.set_read_timeout(t).and_then(|_| s.set_write_timeout(t)),
        }
    }
    fn set_nonblocking(&self, nb: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(nb),
            Stream::Tcp(s) => s.set_nonblocking(nb),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write_vectored(b),
            Stream::Tcp(s) => s.write_vectored(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// An NBD export as a block device: each queue opened on it is a
/// connection of its own.
#[derive(Debug, Clone)]
pub struct NbdDevice {
    uri: NbdUri,
    info: ExportInfo,
    /// See [`NbdDevice::set_reply_timeout`].
    reply_timeout: Duration,
}

/// How long a connection waits for any byte of a reply while requests are
/// in flight before it gives the server up (see
/// [`NbdDevice::set_reply_timeout`]).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

impl NbdDevice {
    /// Connects to `uri` once to learn the export (then disconnects).
    /// Errors: the server is not there or not NBD, the export is unknown
    /// or refused, or the handshake breaks the protocol (`Io`, with what
    /// happened).
    pub fn connect(uri: &NbdUri) -> Result<NbdDevice> {
        let (s, info) = connect(uri)?;
        let mut q = NbdQueue::over(s, info, 1, uri, REPLY_TIMEOUT)?;
        q.disconnect();
        Ok(NbdDevice { uri: uri.clone(), info, reply_timeout: REPLY_TIMEOUT })
    }

    /// How long the queues opened from now on wait for the server to send
    /// any byte while requests are in flight ([`REPLY_TIMEOUT`] unless
    /// set): then they fail every request in flight with an error that
    /// says so, as nbd-client's `-timeout` gives a dead server up.
    pub fn set_reply_timeout(&mut self, t: Duration) {
        self.reply_timeout = t.max(Duration::from_millis(1));
    }

    /// What the server told about the export.
    pub fn info(&self) -> ExportInfo {
        self.info
    }

    /// The export's URI.
    pub fn uri(&self) -> &NbdUri {
        &self.uri
    }

    /// One line for the reader: where, how large, what it takes.
    pub fn describe(&self) -> String {
        let i = &self.info;
        let mut can = Vec::new();
        for (f, n) in [(TF_SEND_FLUSH, "flush"), (TF_SEND_FUA, "FUA"), (TF_SEND_TRIM, "trim"), (TF_SEND_WRITE_ZEROES, "write zeroes")] {
            if i.has(f) {
                can.push(n);
            }
        }
        format!(
            "NBD export {} ({} bytes{}; blocks min {} preferred {} max {} bytes; {})",
            self.uri,
            i.size,
            if i.read_only() { ", read-only" } else { "" },
            i.min_block,
            i.preferred_block,
            i.max_payload,
            if can.is_empty() { "no flush, FUA, trim or zeroing".to_string() } else { can.join(", ") }
        )
    }
}

impl BlockDevice for NbdDevice {
    type Queue = NbdQueue;

    /// A new connection with room for `depth` requests in flight.
    fn open_queue(&self, depth: usize) -> Result<NbdQueue> {
        let (s, info) = connect(&self.uri)?;
        if info.size != self.info.size {
            bail!(Io, "the export {} changed size from {} to {} bytes between connections", self.uri, self.info.size, info.size);
        }
        NbdQueue::over(s, info, depth, &self.uri, self.reply_timeout)
    }

    fn capacity(&self) -> u64 {
        self.info.size
    }

    fn block_size(&self) -> u32 {
        self.info.min_block
    }

    fn caps(&self) -> uraid_core::io::request::Caps {
        self.info.caps()
    }

    /// NBD_CMD_FLUSH on a connection of its own; every connection's
    /// completed writes are covered when the server offers multi-conn
    /// (uraid serve does), as the spec says.
    fn flush(&self) -> Result<()> {
        BlockQueue::flush(&mut self.open_queue(1)?)
    }
}
