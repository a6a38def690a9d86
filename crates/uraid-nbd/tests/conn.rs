//! The NBD connection state machine takes untrusted input: whatever a
//! client sends (arbitrary bytes, a valid handshake then garbage, requests
//! with arbitrary fields, truncated payloads, absurd lengths), a real
//! server connection ([`uraid_nbd::Server::serve_stream`] over a RAID 5
//! volume on `mem:` members) returns within seconds once the client has
//! sent everything and shut its side, and never panics. The `nbd_conn`
//! fuzz target runs the same code (`tests/harness/mod.rs`) and its seed
//! corpus through it.
//!
//! `cargo test -p uraid-nbd --test conn -- --ignored write_seed_corpus`
//! writes the seed corpus again.

mod harness;

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use harness::*;
use proptest::prelude::*;
use uraid_nbd::proto::*;
use uraid_nbd::Server;

static SERVER: LazyLock<Server> = LazyLock::new(test_server);

/// Longest a connection may take once the client has sent everything.
const LIMIT: Duration = Duration::from_secs(10);

/// [`serve_bytes`] on the shared server, failing when it takes longer
/// than [`LIMIT`] (a hang) or panics.
fn serve(input: &[u8]) -> Vec<u8> {
    let (tx, rx) = std::sync::mpsc::channel();
    let data = input.to_vec();
    let t = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(serve_bytes(&SERVER, &data));
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let head: Vec<String> = input.iter().take(96).map(|b| format!("{b:02x}")).collect();
            panic!("the server did not return within {LIMIT:?} for a stream of {} bytes: {}", input.len(), head.join(""))
        }
        Err(_) => panic!("the connection panicked after {:?} (see above)", t.elapsed()),
    }
}

/// True when `out` holds a simple reply to `handle`; its error with it.
fn reply_to(out: &[u8], handle: u64) -> Option<u32> {
    let magic = SIMPLE_REPLY_MAGIC.to_be_bytes();
    let h = handle.to_be_bytes();
    out.windows(16).find(|w| w[..4] == magic && w[8..] == h).map(|w| u32::from_be_bytes(w[4..8].try_into().unwrap()))
}

fn seed(name: &str) -> Vec<u8> {
    nbd_seeds().into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no seed {name}")).1
}

/// Length of the greeting the server sends first.
const GREETING: usize = 18;

#[test]
fn whole_sessions_are_served() {
    let out = serve(&seed("go-read-disc"));
    assert_eq!(reply_to(&out, 1), Some(0), "no successful READ reply");
    let out = serve(&seed("list-info-export-name"));
    assert!(out.windows(3).any(|w| w == EXPORT.as_bytes()), "LIST did not name the export");
    assert_eq!(reply_to(&out, 1), Some(0), "no READ reply after EXPORT_NAME");
    // Structured replies: a chunk header per reply, none simple.
    let out = serve(&seed("structured-write-flush-trim-zeroes"));
    let magic = STRUCTURED_REPLY_MAGIC.to_be_bytes();
    let n = out.windows(4).filter(|w| *w == magic).count();
    assert!(n >= 5, "{n} structured replies to 5 requests");
}

#[test]
fn malformed_streams_end_the_connection() {
    // A GO whose length no option may have: closed after the greeting.
    let out = serve(&seed("go-absurd-length"));
    assert_eq!(out.len(), GREETING, "the server answered an option of 4 GiB");
    // A WRITE whose payload never comes whole: no reply to it.
    let out = serve(&seed("truncated-write"));
    assert_eq!(reply_to(&out, 1), None, "a truncated WRITE was answered");
    // Garbage after the handshake: the handshake's replies, then nothing.
    let hs = serve(&handshake());
    let out = serve(&seed("garbage-request"));
    assert_eq!(out.len(), hs.len(), "the server answered a garbage request");
    // Out-of-range requests and an unknown command get errors, and the
    // connection goes on.
    let out = serve(&seed("out-of-range"));
    for h in [1, 2, 3] {
        assert!(reply_to(&out, h).is_some_and(|e| e != 0), "request {h}: {:?}", reply_to(&out, h));
    }
    // Unknown client flags, a bad option magic, nothing at all.
    assert_eq!(serve(&0xffff_ffffu32.to_be_bytes()).len(), GREETING);
    let mut bad = client_flags();
    bad.extend_from_slice(&[0u8; 16]);
    assert_eq!(serve(&bad).len(), GREETING);
    assert_eq!(serve(&[]).len(), GREETING);
    // An option just over the limit is skipped and refused; the next one
    // is still answered.
    let mut big = client_flags();
    big.extend(option(OPT_INFO, &vec![0u8; MAX_OPTION_LEN as usize + 1]));
    big.extend(option(OPT_LIST, &[]));
    let out = serve(&big);
    assert!(out.windows(4).any(|w| w == REP_ERR_TOO_BIG.to_be_bytes()), "no TOO_BIG reply");
    assert!(out.windows(4).any(|w| w == REP_SERVER.to_be_bytes()), "LIST after a refused option was not answered");
}

#[test]
fn every_seed_of_the_fuzz_corpus_runs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nbd_conn");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        serve(&std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n > 0, "no seeds in {}", dir.display());
}

/// Writes the seed corpus from [`nbd_seeds`] (run by hand; the corpus is
/// committed).
#[test]
#[ignore]
fn write_seed_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nbd_conn");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, b) in nbd_seeds() {
        std::fs::write(dir.join(name), b).unwrap();
    }
}

/// A request with arbitrary fields (right magic) and a payload of
/// arbitrary length, as bytes.
fn any_request() -> impl Strategy<Value = Vec<u8>> {
    (prop_oneof![Just(0u16), Just(CMD_FLAG_FUA), Just(CMD_FLAG_NO_HOLE), any::<u16>()], prop_oneof![0u16..8, any::<u16>()], any::<u64>(), prop_oneof![0u64..(3 << 20), any::<u64>(), (u64::MAX - (1 << 20))..=u64::MAX], prop_oneof![0u32..70_000, any::<u32>(), (MAX_PAYLOAD - 4096)..=MAX_PAYLOAD + 4096], 0usize..9000)
        .prop_map(|(flags, cmd, handle, offset, len, payload)| {
            let mut v = request(flags, cmd, handle, offset, len);
            v.resize(v.len() + payload, 0xab);
            v
        })
}

/// The data of an INFO or GO option: a name, an item count (right or
/// not) and items, the name's length field right or not.
fn info_data() -> impl Strategy<Value = Vec<u8>> {
    ("[a-z]{0,4}", proptest::collection::vec(any::<u16>(), 0..4), prop::option::of(0u16..8), prop::option::of(0u32..8)).prop_map(
        |(name, items, count, nlen)| {
            let mut v = go_data(&name, &items);
            if let Some(n) = nlen {
                v[..4].copy_from_slice(&n.to_be_bytes());
            }
            if let Some(c) = count {
                let at = 4 + name.len();
                v[at..at + 2].copy_from_slice(&c.to_be_bytes());
            }
            v
        },
    )
}

/// An option with an arbitrary number, length field and data (raw bytes
/// or INFO/GO-shaped).
fn any_option() -> impl Strategy<Value = Vec<u8>> {
    let data = prop_oneof![proptest::collection::vec(any::<u8>(), 0..64), info_data()];
    (0u32..12, data, prop::option::of(any::<u32>())).prop_map(|(opt, data, len)| {
        let mut v = option(opt, &data);
        if let Some(l) = len {
            v[12..16].copy_from_slice(&l.to_be_bytes());
        }
        v
    })
}

/// A piece of a client stream: raw bytes, or a word the server looks for
/// (client flags, an option or request magic, a small number, the export
/// name), so that arbitrary streams get past the first checks.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..32),
        Just(client_flags()),
        Just(IHAVEOPT.to_be_bytes().to_vec()),
        Just(REQUEST_MAGIC.to_be_bytes().to_vec()),
        (0u32..16).prop_map(|n| n.to_be_bytes().to_vec()),
        (0u16..16).prop_map(|n| n.to_be_bytes().to_vec()),
        any::<u64>().prop_map(|n| n.to_be_bytes().to_vec()),
        Just(EXPORT.as_bytes().to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes from the first one on, and arbitrary sequences of
    /// the words the server looks for and raw bytes.
    #[test]
    fn arbitrary_streams(data in proptest::collection::vec(any::<u8>(), 0..4096),
                         tokens in proptest::collection::vec(token(), 0..48)) {
        serve(&data);
        serve(&tokens.concat());
    }

    /// A valid handshake, then arbitrary bytes.
    #[test]
    fn handshake_then_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut s = handshake();
        s.extend(data);
        serve(&s);
    }

    /// Options with arbitrary numbers, lengths and data, then maybe a GO
    /// and a READ.
    #[test]
    fn arbitrary_options(opts in proptest::collection::vec(any_option(), 0..8), go in any::<bool>()) {
        let mut s = client_flags();
        s.extend(opts.concat());
        if go {
            s.extend(option(OPT_GO, &go_data(EXPORT, &[])));
            s.extend(request(0, CMD_READ, 1, 0, 4096));
        }
        serve(&s);
    }

    /// A valid handshake, then requests with arbitrary fields (offsets and
    /// lengths near the edges too) and payloads of arbitrary length.
    #[test]
    fn arbitrary_requests(structured in any::<bool>(), reqs in proptest::collection::vec(any_request(), 0..12)) {
        let mut s = client_flags();
        if structured {
            s.extend(option(OPT_STRUCTURED_REPLY, &[]));
        }
        s.extend(option(OPT_GO, &go_data(EXPORT, &[])));
        s.extend(reqs.concat());
        serve(&s);
    }
}
