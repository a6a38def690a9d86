//! The parity arithmetic of one stripe operation, once its reads are in:
//! P (and Q) from the new data (full-stripe and reconstruct-write), by
//! the difference (read-modify-write), or the lost chunks reconstructed
//! first (degraded read and write). Pure computation over row buffers,
//! no I/O.

use super::{Kind, Method};
use crate::io::buf::IoBuf;
use crate::raid::chunk::MAX_MEMBERS;
use crate::raid::parity::Kernel;

/// The chunks of one stripe operation's rows, in parity order.
pub(super) struct StripeRows<'a> {
    /// The stripe's members in parity order: data 0 .. `data`, P, Q.
    pub(super) members: &'a [u32],
    /// Data chunks.
    pub(super) data: usize,
    /// Data indices `first .. first + count` are written.
    pub(super) first: usize,
    pub(super) count: usize,
    /// Bytes per chunk over the operation's rows.
    pub(super) rows: usize,
    /// New data by data index (`rows` bytes each; null where not
    /// written).
    pub(super) new: &'a [*mut u8; MAX_MEMBERS],
}

impl StripeRows<'_> {
    /// Brings P (and Q) in `bufs` (row buffers by member role) up to date
    /// for `method`; for a reconstruction, first rebuilds the chunks at
    /// parity positions `lost` (a degraded read stops there; a degraded
    /// write then lays its new data over them and computes P and Q).
    pub(super) fn compute(&self, kernel: Kernel, method: Method, kind: Kind, bufs: &mut [Option<IoBuf>], lost: &[usize]) {
        let (d, k, rows) = (self.data, self.members.len(), self.rows);
        let (sm, first, count) = (self.members, self.first, self.count);
        debug_assert!(sm[d..].iter().all(|m| !sm[..d].contains(m)), "parity members {:?} among the data members {:?}", &sm[d..], &sm[..d]);
        let newp = self.new;
        // SAFETY: (for the slices below) each new-data pointer addresses
        // `rows` bytes inside a request's buffer, the zero buffer, or (for a
        // merged stripe) the row buffer of that data member, which no other
        // slice below addresses; row buffers are heap blocks that stay put
        // while the vector holding them is taken out.
        let new = |i: usize| -> &[u8] { unsafe { std::slice::from_raw_parts(newp[i], rows) } };
        let get = |bufs: &mut [Option<IoBuf>], m: u32| -> *mut u8 { bufs[m as usize].as_mut().expect("buffer").as_mut_ptr() };
        // SAFETY: distinct members have distinct buffers, each at least
        // a chunk (>= rows) long.
        let slice = |p: *mut u8| -> &mut [u8] { unsafe { std::slice::from_raw_parts_mut(p, rows) } };
        let p_ptr = get(bufs, sm[d]);
        let q_ptr = (k > d + 1).then(|| get(bufs, sm[d + 1]));
        let gen = |data: &[&[u8]]| match q_ptr {
            None => kernel.gen_p(data, slice(p_ptr)),
            Some(q) => kernel.gen_pq(data, slice(p_ptr), slice(q)),
        };
        match method {
            Method::Full => {
                // Fixed arrays, not vectors: no allocation per operation.
                let mut data: [&[u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
                for (i, s) in data.iter_mut().enumerate().take(d) {
                    *s = new(i);
                }
                gen(&data[..d]);
            }
            Method::Rmw => {
                // (`i` is the data index the kernels take, too.)
                #[allow(clippy::needless_range_loop)]
                for i in first..first + count {
                    let old_ptr = get(bufs, sm[i]);
                    let old: &[u8] = slice(old_ptr);
                    match q_ptr {
                        None => kernel.update_p(old, new(i), slice(p_ptr)),
                        Some(q) => kernel.update_pq(i, old, new(i), slice(p_ptr), slice(q)),
                    }
                }
            }
            Method::Rcw => {
                let mut data: [&[u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
                for (i, s) in data.iter_mut().enumerate().take(d) {
                    *s = if i >= first && i < first + count { new(i) } else { &*slice(get(bufs, sm[i])) };
                }
                gen(&data[..d]);
            }
            Method::Recon => {
                let mut ptrs = [std::ptr::null_mut::<u8>(); MAX_MEMBERS];
                for (i, p) in ptrs.iter_mut().enumerate().take(k) {
                    *p = get(bufs, sm[i]);
                }
                let ptrs = &ptrs[..k];
                {
                    let mut stripe: Vec<&mut [u8]> = ptrs.iter().map(|&p| slice(p)).collect();
                    if !lost.is_empty() {
                        match q_ptr {
                            None => kernel.recover_raid5(&mut stripe, lost[0]),
                            Some(_) => kernel.recover_raid6(&mut stripe, lost),
                        }
                    }
                }
                if kind == Kind::Write {
                    #[allow(clippy::needless_range_loop)]
                    for i in first..first + count {
                        slice(ptrs[i]).copy_from_slice(new(i));
                    }
                    let mut data: [&[u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
                    for (s, &p) in data.iter_mut().zip(&ptrs[..d]) {
                        *s = &*slice(p);
                    }
                    gen(&data[..d]);
                }
            }
        }
    }
}
