//! One drive against arrays of N such drives, at one or more chunk sizes,
//! measured in one session: the question every RAID review asks.

use std::sync::Arc;

use uraid_core::control::array::temporary;
use uraid_core::io::member::DATA_OFFSET;
use uraid_core::units::fmt_size;
use uraid_core::{bail, Geometry, Member, Result, Volume};

use crate::report::{Comparison, Config};
use crate::suite::{run_suite, Progress, SuiteOptions};

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Array sizes in drives; 1 is the single drive (always measured first).
    pub counts: Vec<usize>,
    /// Chunk sizes in bytes for the arrays.
    pub chunks: Vec<u64>,
    /// The tests and their timing.
    pub suite: SuiteOptions,
}

/// The array sizes `compare` uses by default for `n` drives: 1, then the
/// powers of two below `n`, then `n` (1, 2, 4 for four drives).
pub fn default_counts(n: usize) -> Vec<usize> {
    let mut v = vec![1];
    let mut k = 2;
    while k < n {
        v.push(k);
        k *= 2;
    }
    if n > 1 {
        v.push(n);
    }
    v
}

/// Runs the suite on `members[0]` alone and on RAID 0 over the first k
/// members for each count k > 1 and each chunk. No superblock is written;
/// the members' data areas are overwritten.
///
/// Errors: `InvalidInput` when a count exceeds the members given, and any
/// error of the suite.
pub fn compare(
    members: &[Member],
    opts: &CompareOptions,
    progress: &mut dyn FnMut(&str, Progress),
) -> Result<Comparison> {
    let mut counts = opts.counts.clone();
    counts.sort_unstable();
    counts.dedup();
    if counts.first() != Some(&1) {
        counts.insert(0, 1);
    }
    let max = *counts.last().expect("not empty");
    if max > members.len() {
        bail!(InvalidInput, "an array of {max} drives was asked for but only {} members were given", members.len());
    }
    if opts.chunks.is_empty() {
        bail!(InvalidInput, "give at least one chunk size");
    }
    let mut configs = Vec::new();
    for &k in &counts {
        let chunks: Vec<Option<u64>> = if k == 1 { vec![None] } else { opts.chunks.iter().copied().map(Some).collect() };
        for chunk in chunks {
            let ms = members[..k].iter().map(Member::try_clone).collect::<Result<Vec<_>>>()?;
            let (label, vol): (String, Arc<Volume>) = match chunk {
                None => {
                    let m = ms.into_iter().next().expect("one member");
                    let size = m.size().saturating_sub(DATA_OFFSET);
                    let vol = Volume::new(Arc::new(vec![m]), Geometry::single(size), DATA_OFFSET)?;
                    ("1 drive".to_string(), vol)
                }
                Some(c) => (format!("RAID 0 x{k} {}", fmt_size(c)), temporary(ms, c)?.0),
            };
            let results = run_suite(&vol, &opts.suite, &mut |p| progress(&label, p))?;
            configs.push(Config { label, drives: k, chunk, results });
        }
    }
    let names: Vec<&str> = members[..max].iter().map(Member::name).collect();
    Ok(Comparison { members: names.join(" "), configs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(default_counts(1), vec![1]);
        assert_eq!(default_counts(4), vec![1, 2, 4]);
        assert_eq!(default_counts(6), vec![1, 2, 4, 6]);
    }
}
