//! Fuzzes the NBD connection state machine: the bytes are one client's
//! whole stream, written into a unix socket pair whose other end a real
//! server connection serves (`Server::serve_stream`, handshake and
//! transmission, over a RAID 5 volume on `mem:` members); the client then
//! shuts its write side and reads what comes back. The server must return
//! (libFuzzer's -timeout catches a hang) and never panic. The body is
//! `serve_bytes` in crates/uraid-nbd/tests/harness/mod.rs, which
//! tests/conn.rs runs too.
#![no_main]

#[path = "../../crates/uraid-nbd/tests/harness/mod.rs"]
mod harness;

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;

static SERVER: LazyLock<uraid_nbd::Server> = LazyLock::new(|| {
    // libFuzzer's main does not set SIGPIPE aside as Rust's does: a write
    // to a socket the server closed must give EPIPE, not kill the run.
    // SAFETY: setting a signal's disposition to SIG_IGN.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    harness::test_server()
});

fuzz_target!(|data: &[u8]| {
    let _ = harness::serve_bytes(&SERVER, data);
});
