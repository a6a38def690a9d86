//! Fuzzes the journal decoder: the bytes (after a flags byte that may make
//! the header's and the records' CRCs right) are a journal, header and
//! log, on a `mem:` device; `Journal::open` and `replay` onto a RAID 5
//! volume run: `Ok` or an error, never a panic or a hang. The body is
//! `journal_input` in crates/uraid-core/tests/harness/mod.rs, which
//! tests/decoders.rs runs too.
#![no_main]

#[path = "../../crates/uraid-core/tests/harness/mod.rs"]
mod harness;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = harness::journal_input(data);
});
