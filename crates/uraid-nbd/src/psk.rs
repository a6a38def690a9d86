//! TLS with pre-shared keys (TLS-PSK), the NBD ecosystem's other way for a
//! client to authenticate besides a certificate: nbdkit's `--tls-psk`,
//! qemu's `tls-creds-psk`, libnbd's `nbds://USER@HOST/NAME?tls-psk-file=FILE`.
//!
//! rustls has no external pre-shared keys, so these connections use
//! OpenSSL (the system's libssl). The key file has the format of GnuTLS's
//! `psktool` (what nbdkit and qemu read): one `USERNAME:HEXKEY` line per
//! client. A client that names no known user, or whose key differs, fails
//! the TLS handshake and never reaches the NBD options.
//!
//! The server offers TLS 1.3 (psk_dhe_ke and psk_ke, the PSK bound to
//! SHA-256 as GnuTLS binds it) and TLS 1.2 with PSK-only cipher suites
//! (ECDHE-PSK first, then plain PSK; no certificate is involved).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslMode, SslOptions, SslStream, SslVersion,
};

use crate::sock::{Recv, Sock};

/// Largest key file read, bytes (a line per user: far more than any site
/// needs, and a bound on what a wrong path costs).
const MAX_FILE: u64 = 1 << 20;
/// Shortest key accepted, bytes (128 bits: shorter keys can be guessed
/// offline from one recorded handshake).
pub const MIN_KEY: usize = 16;
/// Longest key accepted, bytes (OpenSSL's PSK_MAX_PSK_LEN is 512; psktool
/// makes 32 by default).
pub const MAX_KEY: usize = 256;
/// Longest user name accepted, bytes (below OpenSSL's PSK_MAX_IDENTITY_LEN).
pub const MAX_USER: usize = 128;
/// TLS 1.2 cipher suites offered: PSK key exchange only, AEAD or SHA-2.
const TLS12_SUITES: &str = "ECDHE-PSK-CHACHA20-POLY1305:ECDHE-PSK-AES256-CBC-SHA384:ECDHE-PSK-AES128-CBC-SHA256:\
PSK-AES256-GCM-SHA384:PSK-CHACHA20-POLY1305:PSK-AES128-GCM-SHA256";

/// The server side of TLS-PSK: an OpenSSL context that knows every user's
/// key. Cheap to share between connections.
pub struct PskConfig {
    ctx: SslContext,
    users: usize,
}

impl std::fmt::Debug for PskConfig {
    // Never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PskConfig").field("users", &self.users).finish_non_exhaustive()
    }
}

impl PskConfig {
    /// How many users the key file lists.
    pub fn users(&self) -> usize {
        self.users
    }
}

/// Reads a key file in psktool's format: one `USERNAME:HEXKEY` per line
/// (blank lines and lines starting with `#` are skipped). Returns each
/// user's key.
///
/// Errors (naming the file and the line, never a key): the file cannot be
/// read, is larger than 1 MiB, may be read by every user (it holds
/// secrets: `chmod 600`), a line has no `:`, an empty or too long user
/// name, a key that is not hexadecimal, shorter than 16 bytes or longer
/// than 256, a user listed twice, or no user at all.
pub fn read_psk_file(path: &Path) -> Result<HashMap<String, Vec<u8>>, String> {
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read the TLS-PSK key file {}: {e}", path.display()))?;
    let meta = f.metadata().map_err(|e| format!("cannot read the TLS-PSK key file {}: {e}", path.display()))?;
    if meta.mode() & 0o004 != 0 {
        return Err(format!(
            "the TLS-PSK key file {} can be read by every user of this machine, who could then read and write the array: \
             make it readable by its owner only (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    let mut text = String::new();
    f.take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the TLS-PSK key file {} as text: {e}", path.display()))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("the TLS-PSK key file {} is larger than {MAX_FILE} bytes: is it the right file?", path.display()));
    }
    let mut keys = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("{}, line {}", path.display(), i + 1);
        let hint = "write USERNAME:HEXKEY, e.g. made by `psktool -u alice -p FILE` or \
                    `echo alice:$(openssl rand -hex 32) >> FILE`";
        let Some((user, hex)) = line.split_once(':') else {
            return Err(format!("{at}: no ':' between a user name and a key; {hint}"));
        };
        if user.is_empty() || user.len() > MAX_USER {
            return Err(format!("{at}: the user name must have 1 to {MAX_USER} bytes; {hint}"));
        }
        let key = unhex(hex).ok_or_else(|| format!("{at}: the key of '{user}' is not hexadecimal digits; {hint}"))?;
        if !(MIN_KEY..=MAX_KEY).contains(&key.len()) {
            return Err(format!(
                "{at}: the key of '{user}' has {} bytes; give {MIN_KEY} to {MAX_KEY} ({} to {} hex digits); {hint}",
                key.len(),
                2 * MIN_KEY,
                2 * MAX_KEY
            ));
        }
        if keys.insert(user.to_string(), key).is_some() {
            return Err(format!("{at}: user '{user}' is listed twice; keep one key per user"));
        }
    }
    if keys.is_empty() {
        return Err(format!("the TLS-PSK key file {} lists no user; add lines USERNAME:HEXKEY", path.display()));
    }
    Ok(keys)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    s.as_bytes().chunks(2).map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8)).collect()
}

/// A TLS-PSK server configuration from the key file at `path` (see
/// [`read_psk_file`]).
///
/// Errors: those of [`read_psk_file`], or OpenSSL refused the settings
/// (a libssl without PSK suites).
pub fn psk_config(path: &Path) -> Result<Arc<PskConfig>, String> {
    let keys = read_psk_file(path)?;
    let users = keys.len();
    let fail = |e: openssl::error::ErrorStack| format!("TLS-PSK setup failed in OpenSSL: {e}");
    let mut b = SslContextBuilder::new(SslMethod::tls_server()).map_err(fail)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2)).map_err(fail)?;
    b.set_cipher_list(TLS12_SUITES).map_err(fail)?;
    // No resumption tickets (nothing to gain, and nothing sent after the
    // handshake), no renegotiation.
    b.set_num_tickets(0).map_err(fail)?;
    b.set_options(SslOptions::NO_TICKET | SslOptions::NO_RENEGOTIATION | SslOptions::CIPHER_SERVER_PREFERENCE);
    b.set_mode(SslMode::ENABLE_PARTIAL_WRITE | SslMode::ACCEPT_MOVING_WRITE_BUFFER | SslMode::AUTO_RETRY);
    // OpenSSL asks for the key of the user the client names; 0 bytes (an
    // unknown user, or a key that does not fit) fails the handshake.
    // Runs inside OpenSSL: must not panic.
    b.set_psk_server_callback(move |_ssl, identity, out| {
        let key = identity.and_then(|id| std::str::from_utf8(id).ok()).and_then(|u| keys.get(u));
        match key {
            Some(k) if k.len() <= out.len() => {
                out[..k.len()].copy_from_slice(k);
                Ok(k.len())
            }
            _ => Ok(0),
        }
    });
    Ok(Arc::new(PskConfig { ctx: b.build(), users }))
}

/// The TLS handshake of a TLS-PSK connection on `sock` (blocking, within
/// the socket's limits: the NBD handshake's deadline covers it).
///
/// Errors: an unknown user, a wrong key, a client without a PSK suite in
/// common, a peer that went away, a limit.
pub(crate) fn accept(cfg: &PskConfig, sock: Sock) -> io::Result<SslStream<Sock>> {
    let ssl = Ssl::new(&cfg.ctx).map_err(io::Error::other)?;
    let mut s = SslStream::new(ssl, sock).map_err(io::Error::other)?;
    s.accept().map_err(|e| {
        let why = match e.io_error() {
            Some(io) => io.to_string(),
            None => e.to_string(),
        };
        io::Error::new(io::ErrorKind::PermissionDenied, format!("TLS-PSK handshake failed: {why}"))
    })?;
    Ok(s)
}

/// Reads what is there without blocking: decrypted bytes, `Again` once
/// OpenSSL needs more from an empty socket (poll it), `Closed` when the
/// peer closed or the stream failed.
pub(crate) fn recv_nb(s: &mut SslStream<Sock>, buf: &mut [u8]) -> Recv {
    if buf.is_empty() {
        return Recv::Again;
    }
    s.get_mut().set_read_nowait(true);
    let r = s.ssl_read(buf);
    s.get_mut().set_read_nowait(false);
    match r {
        Ok(0) => Recv::Closed,
        Ok(n) => Recv::Got(n),
        Err(e) if e.code() == ErrorCode::WANT_READ => Recv::Again,
        Err(_) => Recv::Closed,
    }
}

/// Writes every byte of `parts` (small replies go as one TLS record),
/// blocking within the socket's limits.
pub(crate) fn send_all(s: &mut SslStream<Sock>, parts: &[io::IoSlice<'_>]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if parts.len() > 1 && total <= 16 << 10 {
        let one: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        return s.write_all(&one);
    }
    for p in parts {
        s.write_all(p)?;
    }
    Ok(())
}

/// Sends TLS's close_notify (best effort: the socket is closed next).
pub(crate) fn close_notify(s: &mut SslStream<Sock>) {
    let _ = s.shutdown();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A file holding `text` with permissions `mode`, removed on drop.
    fn file(text: &str, mode: u32) -> tempfile::TempPath {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        f.into_temp_path()
    }

    const KEY: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn key_file_in_psktool_format_is_read() {
        let f = file(&format!("# keys\nalice:{KEY}\n\nbob:{}\n", KEY.to_uppercase()), 0o600);
        let keys = read_psk_file(&f).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys["alice"], unhex(KEY).unwrap());
        assert_eq!(keys["bob"], keys["alice"]);
        assert_eq!(psk_config(&f).unwrap().users(), 2);
    }

    #[test]
    fn bad_key_files_are_refused_with_the_line_and_without_the_key() {
        let cases: &[(&str, u32, &str)] = &[
            ("alice:00112233\n", 0o600, "has 4 bytes"),
            ("alice 00112233445566778899aabbccddeeff\n", 0o600, "no ':'"),
            ("alice:0011223344556677889zaabbccddeeff\n", 0o600, "not hexadecimal"),
            (":00112233445566778899aabbccddeeff\n", 0o600, "user name"),
            ("a:00112233445566778899aabbccddeeff\na:00112233445566778899aabbccddeeff\n", 0o600, "listed twice"),
            ("# nobody\n", 0o600, "lists no user"),
            ("alice:00112233445566778899aabbccddeeff\n", 0o644, "chmod 600"),
        ];
        for (text, mode, needle) in cases {
            let f = file(text, *mode);
            let e = read_psk_file(&f).unwrap_err();
            assert!(e.contains(needle), "{text:?}: expected {needle:?} in: {e}");
            assert!(!e.contains("8899aabb"), "the error shows the key: {e}");
        }
        let f = file("x", 0o600);
        let missing = f.with_extension("none");
        assert!(read_psk_file(&missing).unwrap_err().contains("cannot read"));
    }
}
