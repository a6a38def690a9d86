//! The bottom of the data path: the request every layer speaks
//! ([`request`]), I/O buffers ([`buf`]), the members themselves (files,
//! block devices, emulated `mem:` drives: [`member`]), fault injection
//! over any member ([`fault`]) and simulated drives for simulation tests
//! ([`sim`]). Nothing here knows about RAID, caches or
//! arrays.

pub mod buf;
pub mod fault;
pub mod member;
pub mod request;
pub mod sim;
