//! What the connection tests (`tests/conn.rs`) and the `nbd_conn`
//! cargo-fuzz target (which includes this file by path) run: a byte
//! stream fed as one client's to a real server connection
//! ([`Server::serve_stream`]), and the streams that seed the fuzzer.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use uraid_core::raid::geometry::Geometry;
use uraid_core::io::member::{MemSpec, MemberSpec, OpenMode};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::{Level, Member, Volume};
use uraid_nbd::proto::*;
use uraid_nbd::{Export, Server, ServerOptions};

/// Name of the one export of [`test_server`].
pub const EXPORT: &str = "vol";

/// A server with one export, "vol": a RAID 5 volume of 2 MiB over three
/// `mem:` members; short timeouts, so that no stream holds it long.
pub fn test_server() -> Server {
    let opts = ServerOptions {
        queue_depth: 8,
        handshake_timeout: Duration::from_millis(1500),
        client_timeout: Duration::from_millis(1500),
        ..Default::default()
    };
    mem_server(16, opts)
}

/// A server with one export, "vol": a RAID 5 volume of `stripes` stripes
/// of 64 KiB chunks (128 KiB of data each) over three `mem:` members.
pub fn mem_server(stripes: u64, opts: ServerOptions) -> Server {
    let chunk = 64 << 10;
    let spec = MemberSpec::Mem(MemSpec { size: DATA_OFFSET + stripes * chunk, limits: Default::default() });
    let ms: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).expect("mem: member")).collect();
    let g = Geometry::new(Level::Raid5, 3, chunk, stripes * chunk).expect("geometry");
    let volume = Volume::new(Arc::new(ms), g, DATA_OFFSET).expect("volume");
    Server::new(vec![Export { name: EXPORT.into(), description: "fuzzed".into(), volume }], opts)
}

/// Feeds `input` to `server` as one client's stream over a unix socket
/// pair (written from a thread, then the write side is shut down, as a
/// client that sent everything and waits), serves it on the calling
/// thread, and returns what the server sent back (read from another
/// thread until the server hangs up).
pub fn serve_bytes(server: &Server, input: &[u8]) -> Vec<u8> {
    let (client, end) = UnixStream::pair().expect("socketpair");
    let mut rd = client.try_clone().expect("clone socket");
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = rd.read(&mut buf) {
            if n == 0 {
                break;
            }
            // Keep the first MiB (enough for any check); discard the rest.
            let keep = n.min((1usize << 20).saturating_sub(got.len()));
            got.extend_from_slice(&buf[..keep]);
        }
        got
    });
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        let mut c = client;
        // The server may hang up before reading it all (EPIPE).
        let _ = c.write_all(&data);
        let _ = c.shutdown(Shutdown::Write);
        c
    });
    server.serve_stream(OwnedFd::from(end)).expect("serve_stream");
    let client = writer.join().expect("writer thread");
    drop(client);
    reader.join().expect("reader thread")
}

/// The client's flags word, fixed newstyle without zeroes.
pub fn client_flags() -> Vec<u8> {
    (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes().to_vec()
}

/// An option: header and data.
pub fn option(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// NBD_OPT_GO (or INFO) data for export `name` with info `items`.
pub fn go_data(name: &str, items: &[u16]) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&(items.len() as u16).to_be_bytes());
    for i in items {
        v.extend_from_slice(&i.to_be_bytes());
    }
    v
}

/// Client flags and NBD_OPT_GO of the export: a whole handshake.
pub fn handshake() -> Vec<u8> {
    let mut v = client_flags();
    v.extend(option(OPT_GO, &go_data(EXPORT, &[])));
    v
}

/// A transmission request header.
pub fn request(flags: u16, cmd: u16, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut v = REQUEST_MAGIC.to_be_bytes().to_vec();
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&cmd.to_be_bytes());
    v.extend_from_slice(&handle.to_be_bytes());
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

/// Hand-made client streams (file name, bytes): whole sessions, and the
/// malformed ones a client could send.
pub fn nbd_seeds() -> Vec<(String, Vec<u8>)> {
    let cat = |parts: &[Vec<u8>]| parts.concat();
    let disc = request(0, CMD_DISC, 9, 0, 0);
    vec![
        ("go-read-disc".into(), cat(&[handshake(), request(0, CMD_READ, 1, 4096, 8192), disc.clone()])),
        (
            "structured-write-flush-trim-zeroes".into(),
            cat(&[
                client_flags(),
                option(OPT_STRUCTURED_REPLY, &[]),
                option(OPT_GO, &go_data(EXPORT, &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE])),
                request(CMD_FLAG_FUA, CMD_WRITE, 1, 0, 4096),
                vec![0x5a; 4096],
                request(0, CMD_FLUSH, 2, 0, 0),
                request(0, CMD_TRIM, 3, 8192, 4096),
                request(CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 4, 65536, 65536),
                request(0, CMD_READ, 5, 0, 4096),
                disc.clone(),
            ]),
        ),
        (
            "list-info-export-name".into(),
            cat(&[
                client_flags(),
                option(OPT_LIST, &[]),
                option(OPT_INFO, &go_data("", &[INFO_BLOCK_SIZE])),
                option(OPT_INFO, &go_data("nosuch", &[])),
                option(99, b"unknown"),
                option(OPT_EXPORT_NAME, EXPORT.as_bytes()),
                request(0, CMD_READ, 1, 0, 512),
            ]),
        ),
        ("truncated-write".into(), cat(&[handshake(), request(0, CMD_WRITE, 1, 0, 8192), vec![1; 100]])),
        ("go-absurd-length".into(), cat(&[client_flags(), IHAVEOPT.to_be_bytes().to_vec(), OPT_GO.to_be_bytes().to_vec(), u32::MAX.to_be_bytes().to_vec()])),
        ("garbage-request".into(), cat(&[handshake(), b"this is not an NBD request at all".to_vec()])),
        ("out-of-range".into(), cat(&[handshake(), request(0, CMD_READ, 1, u64::MAX - 511, 512), request(0, CMD_WRITE, 2, 2 << 20, 4096), vec![0; 4096], request(0, 77, 3, 0, 0), disc])),
    ]
}
