//! Fuzzes the superblock's volume table alone: a valid superblock header
//! with the volume count from byte 0 and the table from the rest, its CRC
//! made right so the decoder goes past the check: decodes (and then
//! encodes back the same, and its ends and capacities come out) or gives
//! an error, never a panic. The body is `volume_table_input` in
//! crates/uraid-core/tests/harness/mod.rs, which tests/decoders.rs runs too.
#![no_main]

#[path = "../../crates/uraid-core/tests/harness/mod.rs"]
mod harness;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = harness::volume_table_input(data);
});
