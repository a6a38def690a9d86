//! The NBD wire format: constants, and parsers and encoders that are pure
//! functions over bytes (so they can be fuzzed without a socket).
//!
//! Source: the NBD protocol, repository NetworkBlockDevice/nbd, file
//! doc/proto.md (fixed newstyle negotiation, structured replies). All
//! integers are big-endian ("network byte order").

/// `NBDMAGIC`, first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, and the magic of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
/// Handshake flag: no 124 zero bytes after NBD_OPT_EXPORT_NAME.
pub const FLAG_NO_ZEROES: u16 = 2;
/// Client flag: fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1;
/// Client flag: no zeroes.
pub const FLAG_C_NO_ZEROES: u32 = 2;

/// Option: enter transmission on the named export (no error possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: end negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list exports.
pub const OPT_LIST: u32 = 3;
/// Option: upgrade to TLS.
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies.
pub const OPT_STRUCTURED_REPLY: u32 = 8;

/// Option reply: done.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of a list.
pub const REP_SERVER: u32 = 2;
/// Option reply: one item of export information.
pub const REP_INFO: u32 = 3;
/// Option error: unknown option.
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
/// Option error: refused by policy.
pub const REP_ERR_POLICY: u32 = 0x8000_0002;
/// Option error: malformed option.
pub const REP_ERR_INVALID: u32 = 0x8000_0003;
/// Option error: TLS required first.
pub const REP_ERR_TLS_REQD: u32 = 0x8000_0005;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
/// Option error: server shutting down.
pub const REP_ERR_SHUTDOWN: u32 = 0x8000_0007;
/// Option error: option data too large.
pub const REP_ERR_TOO_BIG: u32 = 0x8000_0009;

/// Info item: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Info item: canonical name.
pub const INFO_NAME: u16 = 1;
/// Info item: description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Info item: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flag: flags field is valid.
pub const TF_HAS_FLAGS: u16 = 1;
/// Transmission flag: read-only export.
pub const TF_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: FLUSH is supported.
pub const TF_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: FUA is supported.
pub const TF_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: TRIM is supported.
pub const TF_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: WRITE_ZEROES is supported.
pub const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: several connections see one consistent export.
pub const TF_CAN_MULTI_CONN: u16 = 1 << 8;
/// Transmission flag: FAST_ZERO is supported.
pub const TF_SEND_FAST_ZERO: u16 = 1 << 11;

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write.
pub const CMD_WRITE: u16 = 1;
/// Command: disconnect.
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1;
/// Command flag: WRITE_ZEROES must not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag: fail WRITE_ZEROES fast rather than write zeroes slowly.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply flag: last chunk of this reply.
pub const REPLY_FLAG_DONE: u16 = 1;
/// Structured reply type: no payload.
pub const REPLY_TYPE_NONE: u16 = 0;
/// Structured reply type: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Structured reply type: error with a message.
pub const REPLY_TYPE_ERROR: u16 = 0x8001;

/// NBD errno: operation not permitted.
pub const EPERM: u32 = 1;
/// NBD errno: I/O error.
pub const EIO: u32 = 5;
/// NBD errno: out of memory.
pub const ENOMEM: u32 = 12;
/// NBD errno: invalid argument.
pub const EINVAL: u32 = 22;
/// NBD errno: no space left (write past the end).
pub const ENOSPC: u32 = 28;
/// NBD errno: value too large.
pub const EOVERFLOW: u32 = 75;
/// NBD errno: not supported.
pub const ENOTSUP: u32 = 95;
/// NBD errno: server shutting down.
pub const ESHUTDOWN: u32 = 108;

/// Largest option payload accepted, in bytes; longer options are refused
/// with `NBD_REP_ERR_TOO_BIG` after their data is skipped, up to
/// [`MAX_OPTION_SKIP`].
pub const MAX_OPTION_LEN: u32 = 16 << 10;
/// Longest option payload skipped before the connection is dropped.
pub const MAX_OPTION_SKIP: u32 = 1 << 20;
/// Largest READ or WRITE payload, in bytes (32 MiB, the size the spec says
/// servers should accept).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// Length of a transmission request header in bytes.
pub const REQUEST_LEN: usize = 28;

/// Maps an OS errno to the NBD error numbers the spec allows.
pub fn nbd_errno(errno: i32) -> u32 {
    match errno {
        libc::EPERM | libc::EROFS => EPERM,
        libc::ENOMEM => ENOMEM,
        libc::EINVAL => EINVAL,
        libc::ENOSPC | libc::EFBIG => ENOSPC,
        libc::EOVERFLOW => EOVERFLOW,
        libc::EOPNOTSUPP => ENOTSUP,
        libc::ESHUTDOWN => ESHUTDOWN,
        _ => EIO,
    }
}

/// The OS errno an NBD error number stands for, the inverse of
/// [`nbd_errno`] (the spec's numbers are Linux's); an unknown one is EIO.
pub fn errno_of_nbd(e: u32) -> i32 {
    match e {
        EPERM => libc::EPERM,
        EIO => libc::EIO,
        ENOMEM => libc::ENOMEM,
        EINVAL => libc::EINVAL,
        ENOSPC => libc::ENOSPC,
        EOVERFLOW => libc::EOVERFLOW,
        ENOTSUP => libc::EOPNOTSUPP,
        ESHUTDOWN => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}

/// An option request header (after its `IHAVEOPT` magic was checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option number.
    pub option: u32,
    /// Bytes of data that follow.
    pub len: u32,
}

/// Parses the 16-byte option header. `None` when the magic is wrong (the
/// client is not speaking NBD: the connection must be dropped).
pub fn parse_option_header(b: &[u8; 16]) -> Option<OptionHeader> {
    let magic = u64::from_be_bytes(b[0..8].try_into().ok()?);
    if magic != IHAVEOPT {
        return None;
    }
    Some(OptionHeader {
        option: u32::from_be_bytes(b[8..12].try_into().ok()?),
        len: u32::from_be_bytes(b[12..16].try_into().ok()?),
    })
}

/// The payload of `NBD_OPT_INFO` / `NBD_OPT_GO`: export name and the
/// information items requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name (may be empty: the default export).
    pub name: String,
    /// Information items requested.
    pub items: Vec<u16>,
}

/// Parses the data of `NBD_OPT_INFO` / `NBD_OPT_GO`. `None` when it is
/// malformed (lengths that do not add up, a name that is not UTF-8).
pub fn parse_info_request(d: &[u8]) -> Option<InfoRequest> {
    let nlen = u32::from_be_bytes(d.get(0..4)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(d.get(4..4usize.checked_add(nlen)?)?).ok()?.to_string();
    let rest = d.get(4 + nlen..)?;
    let n = u16::from_be_bytes(rest.get(0..2)?.try_into().ok()?) as usize;
    if rest.len() != 2 + 2 * n {
        return None;
    }
    let items = (0..n).map(|i| u16::from_be_bytes([rest[2 + 2 * i], rest[3 + 2 * i]])).collect();
    Some(InfoRequest { name, items })
}

/// Encodes an option reply.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + data.len());
    v.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&reply.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub cmd: u16,
    /// The client's handle (cookie), echoed in the reply.
    pub handle: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub len: u32,
}

/// Parses a 28-byte request header. `None` when the magic is wrong (the
/// stream is out of sync: the connection must be dropped).
pub fn parse_request(b: &[u8; REQUEST_LEN]) -> Option<RequestHeader> {
    if u32::from_be_bytes(b[0..4].try_into().ok()?) != REQUEST_MAGIC {
        return None;
    }
    Some(RequestHeader {
        flags: u16::from_be_bytes(b[4..6].try_into().ok()?),
        cmd: u16::from_be_bytes(b[6..8].try_into().ok()?),
        handle: u64::from_be_bytes(b[8..16].try_into().ok()?),
        offset: u64::from_be_bytes(b[16..24].try_into().ok()?),
        len: u32::from_be_bytes(b[24..28].try_into().ok()?),
    })
}

/// Encodes a 28-byte request header (the client side of [`parse_request`]).
pub fn encode_request(h: &RequestHeader) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&h.flags.to_be_bytes());
    b[6..8].copy_from_slice(&h.cmd.to_be_bytes());
    b[8..16].copy_from_slice(&h.handle.to_be_bytes());
    b[16..24].copy_from_slice(&h.offset.to_be_bytes());
    b[24..28].copy_from_slice(&h.len.to_be_bytes());
    b
}

/// Parses a 16-byte simple reply header into (handle, NBD error; 0 is
/// success). `None` when the magic is not the simple reply's (the stream
/// is out of step, or the server sent a structured reply).
pub fn parse_simple_reply(b: &[u8; 16]) -> Option<(u64, u32)> {
    if u32::from_be_bytes(b[0..4].try_into().ok()?) != SIMPLE_REPLY_MAGIC {
        return None;
    }
    Some((u64::from_be_bytes(b[8..16].try_into().ok()?), u32::from_be_bytes(b[4..8].try_into().ok()?)))
}

/// Encodes a simple reply header (16 bytes); READ data follows it.
pub fn simple_reply(handle: u64, error: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b
}

/// Encodes a structured reply chunk header (20 bytes) for a payload of
/// `len` bytes that follows it.
pub fn structured_header(handle: u64, flags: u16, typ: u16, len: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&typ.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// Encodes a structured error chunk (header and payload).
pub fn structured_error(handle: u64, error: u32, msg: &str) -> Vec<u8> {
    let msg = &msg.as_bytes()[..msg.len().min(4096)];
    let mut v = Vec::with_capacity(26 + msg.len());
    v.extend_from_slice(&structured_header(handle, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 6 + msg.len() as u32));
    v.extend_from_slice(&error.to_be_bytes());
    v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_roundtrip_and_bad_magic() {
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&CMD_FLAG_FUA.to_be_bytes());
        b[6..8].copy_from_slice(&CMD_WRITE.to_be_bytes());
        b[8..16].copy_from_slice(&42u64.to_be_bytes());
        b[16..24].copy_from_slice(&4096u64.to_be_bytes());
        b[24..28].copy_from_slice(&512u32.to_be_bytes());
        assert_eq!(
            parse_request(&b),
            Some(RequestHeader { flags: CMD_FLAG_FUA, cmd: CMD_WRITE, handle: 42, offset: 4096, len: 512 })
        );
        b[0] ^= 1;
        assert_eq!(parse_request(&b), None);
    }

    #[test]
    fn info_request() {
        let mut d = Vec::new();
        d.extend_from_slice(&4u32.to_be_bytes());
        d.extend_from_slice(b"fast");
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        assert_eq!(parse_info_request(&d), Some(InfoRequest { name: "fast".into(), items: vec![INFO_BLOCK_SIZE] }));
        assert_eq!(parse_info_request(&d[..d.len() - 1]), None);
        let mut bad = d.clone();
        bad[3] = 200; // name longer than the data
        assert_eq!(parse_info_request(&bad), None);
        assert_eq!(parse_info_request(&[]), None);
        let mut huge = d.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_info_request(&huge), None);
    }
}
