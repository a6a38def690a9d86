//! Fuzzes the superblock decoder (the member's first 4 KiB: header, slots
//! and volume table): any bytes decode or give an error, never a panic;
//! bytes that decode encode back to the same superblock.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uraid_core::control::superblock::Superblock;

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock::decode(data) {
        let again = Superblock::decode(&sb.encode()).expect("an encoded superblock decodes");
        assert_eq!(again.encode(), sb.encode());
    }
});
