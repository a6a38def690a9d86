//! Fuzzes every parser of client input in the NBD server: option headers,
//! INFO/GO payloads and transmission request headers. They must never
//! panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uraid_nbd::proto::{parse_info_request, parse_option_header, parse_request, REQUEST_LEN};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..16).and_then(|b| <&[u8; 16]>::try_from(b).ok()) {
        let _ = parse_option_header(h);
    }
    if let Some(h) = data.get(..REQUEST_LEN).and_then(|b| <&[u8; REQUEST_LEN]>::try_from(b).ok()) {
        let _ = parse_request(h);
    }
    if let Some(req) = parse_info_request(data) {
        assert!(req.name.len() + 6 + 2 * req.items.len() <= data.len());
    }
});
