//! Fuzzes the write-intent bitmap decoder: the bytes (after a 4-byte
//! prefix choosing flags, region size and data end) are placed where the
//! bitmap lives on two `mem:` members and `Bitmap::load` runs: `Ok` or an
//! error, never a panic. The body is `bitmap_input` in
//! crates/uraid-core/tests/harness/mod.rs, which tests/decoders.rs runs too.
#![no_main]

#[path = "../../crates/uraid-core/tests/harness/mod.rs"]
mod harness;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = harness::bitmap_input(data);
});
