//! The bottom of the data path: the request every layer speaks
//! ([`request`]), I/O buffers ([`buf`]), the members themselves (files,
//! block devices, emulated `mem:` drives: [`member`]), fault injection
//! over any member ([`fault`]), what each member sits on ([`facts`])
//! and who each disk is ([`identity`]),
//! simulated drives for simulation tests ([`sim`]) and a pass-through
//! layer that counts what goes through it, the pattern of a new layer
//! ([`tap`]). Nothing here knows
//! about RAID, caches or arrays.

pub mod buf;
pub mod facts;
pub mod fault;
pub mod identity;
pub mod member;
pub mod request;
pub mod sim;
pub mod tap;
