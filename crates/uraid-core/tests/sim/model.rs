//! The simulation's model of the volume: what each 512-byte sector may
//! read back as now, and after a crash; and the bytes a write puts there,
//! made so that any sector read back names the write it came from (or
//! shows that no write made it).

/// Bytes of a sector of the model.
pub const SECTOR: usize = 512;

const MAGIC: u64 = 0x5349_4d55_4c41_5445;

/// Version 0 is zeroes (never written, or zeroed); a write's version is
/// its number, from 1.
pub type Version = u32;

fn word(salt: u64, v: Version, s: u64, i: u64) -> u64 {
    (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ s.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ i.wrapping_mul(0x94D0_49BB_1331_11EB)
        ^ salt
}

/// Fills `buf` with the bytes of version `v` for the sectors from
/// `first` on.
pub fn fill(buf: &mut [u8], salt: u64, v: Version, first: u64) {
    for (k, sec) in buf.chunks_mut(SECTOR).enumerate() {
        let s = first + k as u64;
        for (i, w) in sec.chunks_mut(8).enumerate() {
            let x = match i {
                0 => MAGIC ^ salt ^ v as u64,
                1 => s ^ salt,
                _ => word(salt, v, s, i as u64),
            };
            w.copy_from_slice(&x.to_le_bytes());
        }
    }
}

/// The version sector `s` holds in `sec`, or None when no write of this
/// run put these bytes there.
pub fn decode(sec: &[u8], salt: u64, s: u64) -> Option<Version> {
    let w = |i: usize| u64::from_le_bytes(sec[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    if sec.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let v = w(0) ^ MAGIC ^ salt;
    if v == 0 || v > u32::MAX as u64 || w(1) != s ^ salt {
        return None;
    }
    let v = v as Version;
    (2..SECTOR / 8)
        .all(|i| w(i) == word(salt, v, s, i as u64))
        .then_some(v)
}

/// What each sector of the volume may read back as.
pub struct Model {
    /// Versions a read may return now: the last write acknowledged (more
    /// after a write failed: it may or may not have landed).
    pub now: Vec<Vec<Version>>,
    /// Versions that a crash cannot take away (one of them survives).
    pub durable: Vec<Vec<Version>>,
    /// Versions written since (acknowledged or not) that may survive a
    /// crash too.
    pub maybe: Vec<Vec<Version>>,
    /// The acknowledgement count when each sector's last write was
    /// acknowledged (a flush covers those before it was sent).
    acked_at: Vec<u64>,
    acks: u64,
}

fn add(set: &mut Vec<Version>, v: Version) {
    if !set.contains(&v) {
        set.push(v);
    }
}

impl Model {
    /// A volume of `sectors` sectors of zeroes.
    pub fn new(sectors: usize) -> Model {
        Model {
            now: vec![vec![0]; sectors],
            durable: vec![vec![0]; sectors],
            maybe: vec![Vec::new(); sectors],
            acked_at: vec![0; sectors],
            acks: 0,
        }
    }

    /// Write `v` over sectors `r` was acknowledged; `durable`: it is
    /// durable as it is (FUA, or the journal's promise).
    pub fn acked(&mut self, r: std::ops::Range<usize>, v: Version, durable: bool) {
        self.acks += 1;
        for s in r {
            self.now[s] = vec![v];
            self.acked_at[s] = self.acks;
            if durable {
                self.durable[s] = vec![v];
                self.maybe[s].clear();
            } else {
                add(&mut self.maybe[s], v);
            }
        }
    }

    /// Write `v` over `r` failed (or was in flight at a crash): it may
    /// have landed, in any part.
    pub fn unsure(&mut self, r: std::ops::Range<usize>, v: Version) {
        for s in r {
            add(&mut self.now[s], v);
            add(&mut self.maybe[s], v);
        }
    }

    /// The count a flush sent now covers up to.
    pub fn epoch(&self) -> u64 {
        self.acks
    }

    /// A flush sent at `epoch` completed: every write acknowledged before
    /// it is durable.
    pub fn flushed(&mut self, epoch: u64) {
        for s in 0..self.now.len() {
            if self.acked_at[s] <= epoch && !self.maybe[s].is_empty() {
                self.durable[s] = self.now[s].clone();
                self.maybe[s].clear();
            }
        }
    }

    /// True when sector `s` may read back as `v` after a crash.
    pub fn may_survive(&self, s: usize, v: Version) -> bool {
        self.durable[s].contains(&v) || self.maybe[s].contains(&v)
    }

    /// After a crash, sector `s` was found holding `v`: that is all it
    /// holds now, durably.
    pub fn settle(&mut self, s: usize, v: Version) {
        self.now[s] = vec![v];
        self.durable[s] = vec![v];
        self.maybe[s].clear();
        self.acked_at[s] = 0;
    }
}

#[test]
fn a_sector_names_its_write_and_garbage_names_none() {
    let mut b = vec![0u8; 2 * SECTOR];
    fill(&mut b, 9, 5, 100);
    assert_eq!(decode(&b[..SECTOR], 9, 100), Some(5));
    assert_eq!(decode(&b[SECTOR..], 9, 101), Some(5));
    assert_eq!(
        decode(&b[SECTOR..], 9, 100),
        None,
        "a sector at the wrong place"
    );
    assert_eq!(
        decode(&b[..SECTOR], 8, 100),
        None,
        "a sector of another run"
    );
    let mut c = vec![0u8; SECTOR];
    fill(&mut c, 9, 6, 100);
    let x: Vec<u8> = b[..SECTOR].iter().zip(&c).map(|(a, b)| a ^ b).collect();
    assert_eq!(decode(&x, 9, 100), None, "parity of two writes");
    assert_eq!(decode(&[0; SECTOR], 9, 3), Some(0));
}
