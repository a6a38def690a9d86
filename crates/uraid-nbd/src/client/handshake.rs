//! The client's half of the fixed newstyle handshake (doc/proto.md, "Fixed
//! newstyle negotiation", "Block size constraints"): `NBD_OPT_GO` asking
//! for block sizes, `NBD_OPT_EXPORT_NAME` for a server without GO, and
//! what the server told ([`ExportInfo`]).

use std::io::{self, Read, Write};
use std::time::Duration;

use uraid_core::{Error, ErrorKind, Result};

use super::{NbdUri, Stream};
use crate::proto::*;

/// Longest the handshake may take before the connection is given up.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest option reply payload the client reads (bytes); a server sending
/// more is not followed.
const MAX_OPTION_REPLY: u32 = 64 << 10;

/// What the server told about the export in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportInfo {
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags (`TF_*`).
    pub flags: u16,
    /// Minimum block size in bytes (512 when the server gave none, as the
    /// spec asks of a client for interoperability).
    pub min_block: u32,
    /// Preferred block size in bytes (4096 when not given).
    pub preferred_block: u32,
    /// Largest READ or WRITE payload in bytes (32 MiB when not given).
    pub max_payload: u32,
}

impl ExportInfo {
    /// The server takes no writes.
    pub fn read_only(&self) -> bool {
        self.flags & TF_READ_ONLY != 0
    }
    /// What the export can do, as its transmission flags and block sizes
    /// say (see [`Caps`](uraid_core::io::request::Caps)): no chunk, the
    /// preferred block as the stripe.
    pub fn caps(&self) -> uraid_core::io::request::Caps {
        uraid_core::io::request::Caps {
            capacity: self.size,
            block_size: self.min_block,
            discard: self.has(TF_SEND_TRIM),
            write_zeroes: self.has(TF_SEND_WRITE_ZEROES),
            fua: self.has(TF_SEND_FUA),
            flush: self.has(TF_SEND_FLUSH),
            max_request: self.max_payload as usize,
            chunk: 0,
            stripe_width: self.preferred_block as u64,
        }
    }
    pub(super) fn has(&self, f: u16) -> bool {
        self.flags & TF_HAS_FLAGS != 0 && self.flags & f != 0
    }
}

fn handshake_err(uri: &NbdUri, what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("NBD handshake with {uri} failed: {what}"))
}

/// Opens a connection and negotiates the export (fixed newstyle; `NBD_OPT_GO`
/// asking for block sizes, or `NBD_OPT_EXPORT_NAME` from a server that
/// does not know GO). The socket is left blocking with no timeout.
pub(super) fn connect(uri: &NbdUri) -> Result<(Stream, ExportInfo)> {
    let mut s = Stream::connect(uri)?;
    let io_err = |e: io::Error| {
        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            handshake_err(uri, format!("the server did not answer within {} s", HANDSHAKE_TIMEOUT.as_secs()))
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            handshake_err(uri, "the server closed the connection")
        } else {
            handshake_err(uri, e)
        }
    };
    s.set_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io_err)?;
    let mut greet = [0u8; 18];
    s.read_exact(&mut greet).map_err(io_err)?;
    if u64::from_be_bytes(greet[0..8].try_into().expect("8 bytes")) != NBDMAGIC {
        return Err(handshake_err(uri, "the peer is not an NBD server (no NBDMAGIC)"));
    }
    if u64::from_be_bytes(greet[8..16].try_into().expect("8 bytes")) != IHAVEOPT {
        return Err(handshake_err(uri, "the server speaks the oldstyle protocol; this client needs fixed newstyle"));
    }
    let sflags = u16::from_be_bytes([greet[16], greet[17]]);
    if sflags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(handshake_err(uri, "the server does not offer fixed newstyle negotiation"));
    }
    let no_zeroes = sflags & FLAG_NO_ZEROES != 0;
    let cflags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
    s.write_all(&cflags.to_be_bytes()).map_err(io_err)?;
    // NBD_OPT_GO: the name, and one information request (block sizes).
    let name = uri.name.as_bytes();
    let mut data = Vec::with_capacity(8 + name.len());
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name);
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    s.write_all(&option_request(OPT_GO, &data)).map_err(io_err)?;
    let mut export: Option<(u64, u16)> = None;
    let mut blocks: Option<(u32, u32, u32)> = None;
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).map_err(io_err)?;
        if u64::from_be_bytes(h[0..8].try_into().expect("8 bytes")) != OPT_REPLY_MAGIC {
            return Err(handshake_err(uri, "an option reply has a bad magic"));
        }
        let option = u32::from_be_bytes(h[8..12].try_into().expect("4 bytes"));
        let reply = u32::from_be_bytes(h[12..16].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(h[16..20].try_into().expect("4 bytes"));
        if option != OPT_GO {
            return Err(handshake_err(uri, format!("the server answered option {option}, not the NBD_OPT_GO asked")));
        }
        if len > MAX_OPTION_REPLY {
            return Err(handshake_err(uri, format!("an option reply of {len} bytes (at most {MAX_OPTION_REPLY} are read)")));
        }
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d).map_err(io_err)?;
        match reply {
            REP_ACK => break,
            REP_INFO if d.len() >= 2 => match u16::from_be_bytes([d[0], d[1]]) {
                INFO_EXPORT if d.len() == 12 => {
                    export = Some((u64::from_be_bytes(d[2..10].try_into().expect("8 bytes")), u16::from_be_bytes([d[10], d[11]])));
                }
                INFO_BLOCK_SIZE if d.len() == 14 => {
                    let g = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().expect("4 bytes"));
                    blocks = Some((g(2), g(6), g(10)));
                }
                // Other items (a name, a description) are not needed.
                _ => {}
            },
            REP_ERR_UNSUP => {
                // A server from before NBD_OPT_GO: the old way, which ends
                // the negotiation at once.
                let e = option_export_name(&mut s, uri, no_zeroes).map_err(io_err)?;
                return finish(s, uri, e, None);
            }
            r if r & 0x8000_0000 != 0 => {
                let msg = String::from_utf8_lossy(&d).into_owned();
                let why = match r {
                    REP_ERR_UNKNOWN => format!("the server has no export named '{}'", uri.name),
                    REP_ERR_TLS_REQD => "the server requires TLS, which this client does not speak".to_string(),
                    REP_ERR_POLICY => "the server refused the export by policy".to_string(),
                    REP_ERR_SHUTDOWN => "the server is shutting down".to_string(),
                    _ => format!("the server refused NBD_OPT_GO (reply 0x{r:08x})"),
                };
                return Err(handshake_err(uri, if msg.is_empty() { why } else { format!("{why}: {msg}") }));
            }
            r => return Err(handshake_err(uri, format!("an unexpected option reply 0x{r:08x}"))),
        }
    }
    let Some(export) = export else {
        return Err(handshake_err(uri, "the server acknowledged NBD_OPT_GO without telling the export's size"));
    };
    finish(s, uri, export, blocks)
}

/// Checks and completes what the handshake learnt.
fn finish(s: Stream, uri: &NbdUri, (size, flags): (u64, u16), blocks: Option<(u32, u32, u32)>) -> Result<(Stream, ExportInfo)> {
    let (min_block, preferred_block, max_payload) = match blocks {
        Some((min, pref, max)) => {
            if !min.is_power_of_two() || min > 65536 || !pref.is_power_of_two() || pref < min || max < pref {
                return Err(handshake_err(uri, format!("block size constraints min {min}, preferred {pref}, max {max} break the spec's rules")));
            }
            (min.max(512), pref.max(min.max(512)), max.min(MAX_PAYLOAD).max(pref))
        }
        None => (512, 4096, MAX_PAYLOAD),
    };
    s.set_timeout(None).map_err(|e| handshake_err(uri, e))?;
    Ok((s, ExportInfo { size, flags, min_block, preferred_block, max_payload }))
}

/// `NBD_OPT_EXPORT_NAME`: the server answers with the size and flags (and
/// 124 zero bytes unless both sides agreed NO_ZEROES), or closes.
fn option_export_name(s: &mut Stream, uri: &NbdUri, no_zeroes: bool) -> io::Result<(u64, u16)> {
    s.write_all(&option_request(OPT_EXPORT_NAME, uri.name.as_bytes()))?;
    let mut b = [0u8; 10];
    s.read_exact(&mut b)?;
    if !no_zeroes {
        let mut z = [0u8; 124];
        s.read_exact(&mut z)?;
    }
    Ok((u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")), u16::from_be_bytes([b[8], b[9]])))
}

fn option_request(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + data.len());
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}
