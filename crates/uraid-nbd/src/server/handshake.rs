//! The fixed newstyle handshake (NBD spec, "Fixed newstyle negotiation"):
//! the greeting, the options (NBD_OPT_GO, INFO, LIST, STARTTLS,
//! STRUCTURED_REPLY, ABORT) with their limits, and what the client and the
//! server agreed for the transmission phase.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Live, ServerOptions, Tls, MAX_OPTIONS};
use crate::proto::{
    option_reply, parse_info_request, parse_option_header, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, FLAG_FIXED_NEWSTYLE,
    FLAG_NO_ZEROES, IHAVEOPT, INFO_BLOCK_SIZE, INFO_DESCRIPTION, INFO_EXPORT, INFO_NAME, MAX_OPTION_LEN, MAX_OPTION_SKIP,
    MAX_PAYLOAD, NBDMAGIC, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO, OPT_INFO, OPT_LIST, OPT_STARTTLS, OPT_STRUCTURED_REPLY, REP_ACK, REP_ERR_INVALID,
    REP_ERR_POLICY, REP_ERR_SHUTDOWN, REP_ERR_TLS_REQD, REP_ERR_TOO_BIG, REP_ERR_UNKNOWN, REP_ERR_UNSUP, REP_INFO,
    REP_SERVER, TF_CAN_MULTI_CONN, TF_HAS_FLAGS, TF_READ_ONLY, TF_SEND_FAST_ZERO, TF_SEND_FLUSH, TF_SEND_FUA,
    TF_SEND_TRIM, TF_SEND_WRITE_ZEROES,
};
use crate::wire::Wire;

pub(super) fn read_u32<R: Read>(s: &mut R) -> io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// Transmission flags of an export.
pub fn transmission_flags(read_only: bool) -> u16 {
    let mut f = TF_HAS_FLAGS
        | TF_SEND_FLUSH
        | TF_SEND_FUA
        | TF_SEND_TRIM
        | TF_SEND_WRITE_ZEROES
        | TF_SEND_FAST_ZERO
        | TF_CAN_MULTI_CONN;
    if read_only {
        f |= TF_READ_ONLY;
    }
    f
}

pub(super) fn find<'a>(exports: &'a [Live], name: &str) -> Option<&'a Live> {
    if name.is_empty() {
        return exports.first();
    }
    exports.iter().find(|e| e.name == name)
}

pub(super) fn info_replies(option: u32, e: &Live, items: &[u16], read_only: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let mut export = Vec::with_capacity(12);
    export.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    export.extend_from_slice(&e.capacity.load(std::sync::atomic::Ordering::Acquire).to_be_bytes());
    export.extend_from_slice(&transmission_flags(read_only).to_be_bytes());
    v.extend(option_reply(option, REP_INFO, &export));
    // The spec lets a server send block sizes unasked; clients that honour
    // them (qemu, libnbd) then never send misaligned requests.
    let min = e.block_size;
    let mut bs = Vec::with_capacity(14);
    bs.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    bs.extend_from_slice(&min.to_be_bytes());
    bs.extend_from_slice(&min.max(4096).to_be_bytes());
    bs.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
    v.extend(option_reply(option, REP_INFO, &bs));
    if items.contains(&INFO_NAME) {
        let mut n = INFO_NAME.to_be_bytes().to_vec();
        n.extend_from_slice(e.name.as_bytes());
        v.extend(option_reply(option, REP_INFO, &n));
    }
    if items.contains(&INFO_DESCRIPTION) {
        let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
        d.extend_from_slice(e.description.as_bytes());
        v.extend(option_reply(option, REP_INFO, &d));
    }
    v.extend(option_reply(option, REP_ACK, &[]));
    v
}

/// The outcome of a successful handshake: which export, and whether
/// structured replies were negotiated.
pub(super) struct Negotiated<'a> {
    pub(super) export: &'a Live,
    pub(super) structured: bool,
}

/// Fixed newstyle negotiation. `Ok(None)` ends the connection (abort, a
/// client that does not speak fixed newstyle, an unknown export named with
/// EXPORT_NAME, a bad option magic).
pub(super) fn handshake<'a>(
    s: &mut Wire,
    exports: &'a [Live],
    opts: &ServerOptions,
    shutdown: &AtomicBool,
) -> io::Result<Option<Negotiated<'a>>> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let cflags = read_u32(s)?;
    if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Ok(None); // unknown client flags: the spec says to close
    }
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let mut structured = false;
    let mut options = 0u32;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let Some(opt) = parse_option_header(&h) else { return Ok(None) };
        options += 1;
        if options > MAX_OPTIONS {
            // A client that keeps negotiating holds a thread: end it.
            let msg = format!("more than {MAX_OPTIONS} options in one handshake");
            let _ = s.write_all(&option_reply(opt.option, REP_ERR_POLICY, msg.as_bytes()));
            return Ok(None);
        }
        if opt.len > MAX_OPTION_LEN {
            if opt.len > MAX_OPTION_SKIP {
                return Ok(None);
            }
            io::copy(&mut Read::by_ref(s).take(opt.len as u64), &mut io::sink())?;
            s.write_all(&option_reply(opt.option, REP_ERR_TOO_BIG, b"option data too large"))?;
            continue;
        }
        let mut data = vec![0u8; opt.len as usize];
        s.read_exact(&mut data)?;
        if shutdown.load(Ordering::Relaxed) && opt.option != OPT_ABORT {
            s.write_all(&option_reply(opt.option, REP_ERR_SHUTDOWN, b"server is shutting down"))?;
            continue;
        }
        if opts.tls.is_some() && !s.is_tls() && !matches!(opt.option, OPT_STARTTLS | OPT_ABORT) {
            if opt.option == OPT_EXPORT_NAME {
                return Ok(None); // cannot be refused politely: the spec says to close
            }
            s.write_all(&option_reply(opt.option, REP_ERR_TLS_REQD, b"this server requires TLS: send STARTTLS first"))?;
            continue;
        }
        match answer(s, opt.option, &data, exports, opts, &mut structured, no_zeroes)? {
            Next::More => {}
            Next::End(n) => return Ok(n),
        }
    }
}

/// What the handshake does after an option: read the next one, or end
/// (with the export negotiated, or `None`: close the connection).
enum Next<'a> {
    More,
    End(Option<Negotiated<'a>>),
}

/// Answers one option (`option` with its `data`), once the checks every
/// option passes (size, shutdown, TLS first) are done. `structured` is set
/// by STRUCTURED_REPLY; `no_zeroes`: the client's NO_ZEROES flag (for
/// EXPORT_NAME's reply).
fn answer<'a>(
    s: &mut Wire,
    option: u32,
    data: &[u8],
    exports: &'a [Live],
    opts: &ServerOptions,
    structured: &mut bool,
    no_zeroes: bool,
) -> io::Result<Next<'a>> {
    match option {
        OPT_EXPORT_NAME => {
            let Ok(name) = std::str::from_utf8(&data) else { return Ok(Next::End(None)) };
            let Some(e) = find(exports, name) else { return Ok(Next::End(None)) };
            let mut r = Vec::with_capacity(134);
            r.extend_from_slice(&e.capacity.load(std::sync::atomic::Ordering::Acquire).to_be_bytes());
            r.extend_from_slice(&transmission_flags(opts.read_only).to_be_bytes());
            if !no_zeroes {
                r.extend_from_slice(&[0u8; 124]);
            }
            s.write_all(&r)?;
            return Ok(Next::End(Some(Negotiated { export: e, structured: *structured })));
        }
        OPT_ABORT => {
            let _ = s.write_all(&option_reply(option, REP_ACK, &[]));
            return Ok(Next::End(None));
        }
        OPT_LIST => {
            if !data.is_empty() {
                s.write_all(&option_reply(option, REP_ERR_INVALID, b"LIST takes no data"))?;
                return Ok(Next::More);
            }
            let mut r = Vec::new();
            for e in exports {
                let mut d = (e.name.len() as u32).to_be_bytes().to_vec();
                d.extend_from_slice(e.name.as_bytes());
                d.extend_from_slice(e.description.as_bytes());
                r.extend(option_reply(option, REP_SERVER, &d));
            }
            r.extend(option_reply(option, REP_ACK, &[]));
            s.write_all(&r)?;
        }
        OPT_STARTTLS => match &opts.tls {
            None => s.write_all(&option_reply(
                option,
                REP_ERR_POLICY,
                b"TLS is not configured on this server (start it with --tls-psk, or --tls-cert and --tls-key)",
            ))?,
            Some(_) if s.is_tls() || !data.is_empty() => {
                s.write_all(&option_reply(option, REP_ERR_INVALID, b"TLS is already up, or STARTTLS had data"))?
            }
            Some(cfg) => {
                s.write_all(&option_reply(option, REP_ACK, &[]))?;
                match cfg {
                    Tls::Certificate(c) => s.start_tls(c.clone())?,
                    Tls::Psk(p) => s.start_psk(p)?,
                }
            }
        },
        OPT_STRUCTURED_REPLY => {
            if !data.is_empty() {
                s.write_all(&option_reply(option, REP_ERR_INVALID, b"STRUCTURED_REPLY takes no data"))?;
                return Ok(Next::More);
            }
            *structured = true;
            s.write_all(&option_reply(option, REP_ACK, &[]))?;
        }
        OPT_INFO | OPT_GO => {
            let Some(req) = parse_info_request(&data) else {
                s.write_all(&option_reply(option, REP_ERR_INVALID, b"malformed INFO/GO request"))?;
                return Ok(Next::More);
            };
            let Some(e) = find(exports, &req.name) else {
                let known: Vec<&str> = exports.iter().map(|e| e.name.as_str()).collect();
                let msg = format!("no export named '{}'; exports: {}", req.name, known.join(", "));
                s.write_all(&option_reply(option, REP_ERR_UNKNOWN, msg.as_bytes()))?;
                return Ok(Next::More);
            };
            s.write_all(&info_replies(option, e, &req.items, opts.read_only))?;
            if option == OPT_GO {
                return Ok(Next::End(Some(Negotiated { export: e, structured: *structured })));
            }
        }
        _ => {
            s.write_all(&option_reply(option, REP_ERR_UNSUP, b"option not supported"))?;
        }
    }
    Ok(Next::More)
}
