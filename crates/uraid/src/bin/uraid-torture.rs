//! uraid-torture: the seeded crash workload of the crash tests.
//!
//! `uraid-torture run --seed N --log FILE MEMBER...` assembles the array and
//! writes to its first volume without end: random non-overlapping writes
//! (one in eight with FUA), up to 16 in flight, and a flush now and then;
//! one write in eight (drawn from a stream of its own, so the rest of the
//! workload is the same as without) is a write-zeroes or a discard of its
//! range instead (with FUA too), which must then read back as zeros.
//! Every 512-byte sector it writes says who wrote it: bytes 0..8 the
//! write's id, 8..16 the sector's logical offset, the rest a fill derived
//! from (seed, id, offset). Before a write is issued the log gets `I id
//! offset len` (`Z id offset len` for a zeroing or discard), when it is
//! acknowledged `A id` (`U id` with FUA), when a flush completes `F id`
//! (the last write id issued before the flush). The test kills the process with SIGKILL at a random moment (the
//! log is in the page cache, which survives a process kill).
//!
//! `uraid-torture verify --seed N --log FILE MEMBER...` assembles the array
//! (which resynchronizes the dirty regions of the write-intent bitmap after
//! the unclean stop) and checks every sector written by the log: it must
//! hold a well-formed sector of some issued write that covered it (or zeros
//! if none, or if a zeroing or discard that covered it may have landed), and
//! every write or zeroing acknowledged before a completed flush, or with
//! FUA, must be there unless a later issued one covered the sector (with
//! `--all-acked`, every acknowledged write: the promise of the cache modes
//! other than write-back, the process being killed, not the power). Prints a JSON
//! summary; exits 1 on any violation, listing the first ones.
//!
//! With `URAID_TORTURE_GROW=DEV[,DEV...]`, `run` first starts a reshape of
//! the array onto those devices as a served array's (`Array::grow_live`,
//! at `URAID_TORTURE_GROW_RATE` bytes/s, 50 MB/s by default) and writes
//! through the reshaping volume while the reshape runs in another thread:
//! the kill then cuts the reshape too, which the next assemble finishes.
//!
//! Only for the tests: no options beyond these.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

use uraid_core::io::member::MemberSpec;
use uraid_core::io::request::Op;
use uraid_core::{BlockQueue, IoBuf, Request, Volume};

const SECTOR: usize = 512;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Fills `buf` (whole sectors) as write `id` at logical `offset`.
fn fill(buf: &mut [u8], seed: u64, id: u64, offset: u64) {
    for (k, s) in buf.chunks_mut(SECTOR).enumerate() {
        let off = offset + (k * SECTOR) as u64;
        s[..8].copy_from_slice(&id.to_le_bytes());
        s[8..16].copy_from_slice(&off.to_le_bytes());
        let mut x = splitmix(seed ^ id.wrapping_mul(0x1000_0000_01B3) ^ off);
        for w in s[16..].chunks_mut(8) {
            x = splitmix(x);
            w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: uraid-torture run|verify --seed N --log FILE [--all-acked] MEMBER...");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 6 || args[1] != "--seed" || args[3] != "--log" {
        usage();
    }
    let seed: u64 = args[2].parse().unwrap_or_else(|_| usage());
    let log = std::path::PathBuf::from(&args[4]);
    let all_acked = args[5] == "--all-acked";
    let specs: Vec<MemberSpec> =
        args[5 + all_acked as usize..].iter().map(|a| a.parse().unwrap_or_else(|e| panic!("{a}: {e}"))).collect();
    let mut array = match uraid_core::control::array::assemble(&specs) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("uraid-torture: cannot assemble: {e}");
            std::process::exit(3);
        }
    };
    let mut vol = array.volume().clone();
    match args[0].as_str() {
        "run" => {
            if let Ok(devs) = std::env::var("URAID_TORTURE_GROW") {
                let add = devs.split(',').map(|d| d.parse().unwrap_or_else(|e| panic!("{d}: {e}"))).collect();
                let level = std::env::var("URAID_TORTURE_GROW_LEVEL").ok().and_then(|l| l.parse().ok());
                let opts = uraid_core::control::array::GrowOptions { add, level, ..Default::default() };
                let mut live = match array.grow_live(&opts, &mut || Ok(())) {
                    Ok(uraid_core::control::array::LiveChange::Reshape(l)) => *l,
                    Ok(_) => {
                        eprintln!("uraid-torture: URAID_TORTURE_GROW takes a change that restripes (not a takeover)");
                        std::process::exit(3);
                    }
                    Err(e) => {
                        eprintln!("uraid-torture: cannot start the reshape: {e}");
                        std::process::exit(3);
                    }
                };
                vol = live.volume().clone();
                let rate = std::env::var("URAID_TORTURE_GROW_RATE").ok().and_then(|r| r.parse().ok()).unwrap_or(50_000_000);
                std::thread::spawn(move || {
                    let stop = std::sync::atomic::AtomicBool::new(false);
                    if let Err(e) = live.step(Some(rate), &stop, &mut |_, _| {}) {
                        eprintln!("uraid-torture: the reshape failed: {e}");
                        std::process::exit(4);
                    }
                    // Ended: left recorded at its end (the kill comes).
                    std::mem::forget(live);
                });
            }
            run(&vol, seed, &log)
        }
        "verify" => {
            let ok = verify(&vol, seed, &log, all_acked);
            drop(vol);
            let _ = array.stop();
            std::process::exit(if ok { 0 } else { 1 });
        }
        _ => usage(),
    }
}

fn run(vol: &Arc<Volume>, seed: u64, log: &std::path::Path) -> ! {
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
    let cap = vol.capacity().min(256 << 20);
    let bs = vol.block_size() as u64;
    let mut q = vol.queue(16).expect("queue");
    let mut rng = splitmix(seed);
    let mut next = || {
        rng = splitmix(rng);
        rng
    };
    let mut zrng = splitmix(seed ^ 0x002e_70e5);
    let mut busy: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut id = 0u64;
    let mut done = Vec::new();
    let mut fua = std::collections::HashSet::new();
    loop {
        let r = next();
        if r % 64 == 0 {
            // Flush: covers every write acknowledged so far.
            while q.in_flight() > 0 {
                done.clear();
                q.wait(1, &mut done);
                ack(&done, &mut busy, &mut fua, &mut log);
            }
            let c = q.run(Request::flush(u64::MAX));
            c.result.expect("flush");
            writeln!(log, "F {id}").unwrap();
            continue;
        }
        let max = (vol.raid().geometry().chunk() * 3 / bs).max(1);
        let len = (next() % max + 1) * bs;
        let off = next() % ((cap - len) / bs) * bs;
        if busy.values().any(|&(o, l)| o < off + len && off < o + l) {
            continue;
        }
        while !q.has_room() {
            done.clear();
            q.wait(1, &mut done);
            ack(&done, &mut busy, &mut fua, &mut log);
        }
        id += 1;
        zrng = splitmix(zrng);
        let mut r = if zrng.is_multiple_of(8) {
            writeln!(log, "Z {id} {off} {len}").unwrap();
            let op = if zrng & 8 == 0 { Op::WriteZeroes { no_hole: false } } else { Op::Discard };
            Request { op, offset: off, len: len as usize, buf: None, tag: id, fua: false }
        } else {
            let mut b = IoBuf::new(len as usize);
            fill(&mut b, seed, id, off);
            writeln!(log, "I {id} {off} {len}").unwrap();
            Request::write(off, len as usize, b, id)
        };
        busy.insert(id, (off, len));
        r.fua = next() % 8 == 0;
        if r.fua {
            fua.insert(id);
        }
        q.push(r).map_err(|r| r.error).expect("push");
        q.submit();
        done.clear();
        q.wait(0, &mut done);
        ack(&done, &mut busy, &mut fua, &mut log);
    }
}

fn ack(done: &[uraid_core::Completion], busy: &mut HashMap<u64, (u64, u64)>, fua: &mut std::collections::HashSet<u64>, log: &mut std::fs::File) {
    for c in done {
        if let Err(e) = &c.result {
            panic!("write {} failed: {e}", c.tag);
        }
        busy.remove(&c.tag);
        let kind = if fua.remove(&c.tag) { "U" } else { "A" };
        writeln!(log, "{kind} {}", c.tag).unwrap();
    }
}

/// What the log of a run says: every write and zeroing issued (id ->
/// offset, length), which were acknowledged (in order) and with FUA, and
/// how many of the acknowledged ones a completed flush made durable.
struct Log {
    issued: HashMap<u64, (u64, u64)>,
    zeroings: std::collections::HashSet<u64>,
    acked: Vec<u64>,
    fua_acked: Vec<u64>,
    /// `acked[..durable_upto_ack]` are durable.
    durable_upto_ack: usize,
}

/// Reads the log at `log` (a last line cut by the kill is skipped).
fn read_log(log: &std::path::Path) -> Log {
    let mut l = Log { issued: HashMap::new(), zeroings: Default::default(), acked: Vec::new(), fua_acked: Vec::new(), durable_upto_ack: 0 };
    for line in std::io::BufReader::new(std::fs::File::open(log).expect("log")).lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [k @ ("I" | "Z"), id, off, len] => {
                let id: u64 = id.parse().unwrap();
                l.issued.insert(id, (off.parse().unwrap(), len.parse().unwrap()));
                if *k == "Z" {
                    l.zeroings.insert(id);
                }
            }
            ["A", id] => l.acked.push(id.parse().unwrap()),
            ["U", id] => {
                l.acked.push(id.parse().unwrap());
                l.fua_acked.push(id.parse().unwrap());
            }
            ["F", _] => l.durable_upto_ack = l.acked.len(),
            _ => {} // a line cut by the kill
        }
    }
    l
}

/// What is wrong with sector `s` holding `got`, if anything: `writers`
/// are the writes that covered it, `fl` the newest durable one (0: none).
fn check_sector(l: &Log, seed: u64, s: u64, got: &[u8], writers: &[u64], fl: u64, expect: &mut [u8]) -> Option<String> {
    let id = u64::from_le_bytes(got[..8].try_into().unwrap());
    if got.iter().all(|&b| b == 0) {
        // The sector's first state, or a zeroing no older than
        // what is durable there may have landed.
        if fl > 0 && !writers.iter().any(|z| l.zeroings.contains(z) && *z >= fl) {
            return Some(format!("sector {s}: zeros, but write {fl} was acknowledged and flushed"));
        }
        return None;
    }
    if !writers.contains(&id) || l.zeroings.contains(&id) {
        return Some(format!("sector {s}: holds id {id}, which never wrote it (torn or misplaced)"));
    }
    fill(expect, seed, id, s);
    if got != &expect[..] {
        return Some(format!("sector {s}: content of write {id} is corrupt"));
    }
    if id < fl {
        let what = if l.zeroings.contains(&fl) { "zeroing" } else { "write" };
        return Some(format!("sector {s}: holds write {id}, older than {what} {fl} acknowledged before a flush"));
    }
    None
}

fn verify(vol: &Arc<Volume>, seed: u64, log: &std::path::Path, all_acked: bool) -> bool {
    // Per sector: every issued write (id) that covered it, and the newest
    // acknowledged write made durable (by a later completed flush, FUA, or
    // at once with `all_acked`).
    let mut l = read_log(log);
    let mut sectors: HashMap<u64, Vec<u64>> = HashMap::new();
    for (&id, &(off, len)) in &l.issued {
        for s in (off..off + len).step_by(SECTOR) {
            sectors.entry(s).or_default().push(id);
        }
    }
    if all_acked {
        l.durable_upto_ack = l.acked.len();
    }
    let mut floor: HashMap<u64, u64> = HashMap::new();
    for &id in l.acked[..l.durable_upto_ack].iter().chain(&l.fua_acked) {
        let (off, len) = l.issued[&id];
        for s in (off..off + len).step_by(SECTOR) {
            let e = floor.entry(s).or_insert(0);
            *e = (*e).max(id);
        }
    }
    let mut bad = Vec::new();
    let mut keys: Vec<u64> = sectors.keys().copied().collect();
    keys.sort_unstable();
    let mut checked = 0u64;
    let mut expect = vec![0u8; SECTOR];
    // Reads go by the volume's logical block (4096 on 4Kn members), each
    // block read once for the sectors in it.
    let bs = u64::from(vol.block_size()).max(SECTOR as u64);
    let mut block: Option<(u64, Vec<u8>)> = None;
    for chunk in keys.chunks(4096) {
        for &s in chunk {
            let base = s / bs * bs;
            if block.as_ref().is_none_or(|(b, _)| *b != base) {
                match vol.read_at(base, bs as usize) {
                    Ok(b) => block = Some((base, b.to_vec())),
                    Err(e) => {
                        block = None;
                        bad.push(format!("sector {s}: read failed: {e}"));
                        continue;
                    }
                }
            }
            let Some((_, b)) = block.as_ref() else { continue };
            let got = &b[(s - base) as usize..(s - base) as usize + SECTOR];
            checked += 1;
            let fl = floor.get(&s).copied().unwrap_or(0);
            bad.extend(check_sector(&l, seed, s, got, &sectors[&s], fl, &mut expect));
        }
    }
    let summary = serde_json::json!({
        "writes_issued": l.issued.len() - l.zeroings.len(),
        "zeroings_issued": l.zeroings.len(),
        "writes_acknowledged": l.acked.len(),
        "writes_durable": l.durable_upto_ack,
        "sectors_checked": checked,
        "violations": bad.len(),
        "first_violations": bad.iter().take(10).collect::<Vec<_>>(),
    });
    println!("{summary}");
    bad.is_empty()
}
