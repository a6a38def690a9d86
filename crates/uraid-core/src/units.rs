//! Parsing and printing of sizes and rates, as on the command line.
//!
//! Sizes (`--chunk 64K`, `mem:2G`) use powers of 1024, as mdadm and
//! CrystalDiskMark do; rates (`bw=250M`) use powers of 1000, as MB/s does.

use crate::{bail, Result};

fn split_suffix(s: &str) -> (&str, &str) {
    let i = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (&s[..i], &s[i..])
}

fn parse_with(s: &str, what: &str, base: u64) -> Result<u64> {
    let t = s.trim();
    let (num, suf) = split_suffix(t);
    let mult = match suf.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => base,
        "M" | "MB" | "MIB" => base * base,
        "G" | "GB" | "GIB" => base * base * base,
        "T" | "TB" | "TIB" => base * base * base * base,
        _ => bail!(InvalidInput, "{what} '{s}' has an unknown unit; use a number with K, M, G or T"),
    };
    let n: u64 = match num.parse() {
        Ok(n) => n,
        Err(_) => bail!(InvalidInput, "{what} '{s}' is not a number; write it like 64K, 250M or 2G"),
    };
    match n.checked_mul(mult) {
        Some(v) => Ok(v),
        None => bail!(InvalidInput, "{what} '{s}' is too large"),
    }
}

/// Parses a size in bytes with an optional K/M/G/T suffix (powers of 1024).
///
/// Errors: `InvalidInput` naming `what` and the bad text.
pub fn parse_size(s: &str, what: &str) -> Result<u64> {
    parse_with(s, what, 1024)
}

/// Parses a rate or count with an optional K/M/G/T suffix (powers of 1000).
///
/// Errors: `InvalidInput` naming `what` and the bad text.
pub fn parse_rate(s: &str, what: &str) -> Result<u64> {
    parse_with(s, what, 1000)
}

/// Prints a byte count the short way sizes are given (`128K`, `1M`, `1.5G`).
pub fn fmt_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{}{}", v as u64, UNITS[u])
    } else {
        format!("{:.1}{}", v, UNITS[u])
    }
}

/// A random version-4 UUID.
pub fn new_uuid() -> [u8; 16] {
    let mut u: [u8; 16] = rand::random();
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K", "x").unwrap(), 65536);
        assert_eq!(parse_size("2G", "x").unwrap(), 2 << 30);
        assert_eq!(parse_size("512", "x").unwrap(), 512);
        assert_eq!(parse_rate("250M", "x").unwrap(), 250_000_000);
        assert!(parse_size("12Q", "chunk").unwrap_err().to_string().contains("chunk '12Q'"));
        assert!(parse_size("", "x").is_err());
        assert!(parse_size("99999999999T", "x").is_err());
        assert_eq!(fmt_size(128 << 10), "128K");
        assert_eq!(fmt_size(1536 << 20), "1.5G");
    }
}
