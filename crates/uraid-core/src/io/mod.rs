//! The bottom of the data path: the request every layer speaks
//! ([`request`]), I/O buffers ([`buf`]), the members themselves (files,
//! block devices, emulated `mem:` drives: [`member`]) and fault injection
//! over any member ([`fault`]); a pass-through layer that counts what goes
//! through it, the pattern of a new layer ([`tap`]). Nothing here knows
//! about RAID, caches or arrays.

pub mod buf;
pub mod fault;
pub mod member;
pub mod request;
pub mod tap;
