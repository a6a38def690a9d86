//! The live-data map on the redundant data path (see
//! `raid::bitmap::live`): a read's pieces in regions not live are zeros,
//! filled in memory without member I/O; a discard or zeroing of whole
//! regions marks them for the bitmap to forget. The healthy path pays one
//! check per request: the regions of its first and last pieces.

use super::RaidQueue;
use crate::raid::bitmap::Bitmap;
use crate::raid::layout::{Layout, Piece, Places};

/// True when every place of `places` is in a live region.
#[inline]
fn places_live(bm: &Bitmap, data_offset: u64, places: &Places) -> bool {
    places.iter().all(|pl| bm.live(data_offset + pl.member_offset))
}

impl RaidQueue {
    /// With a live-data map: fills with zeros the parts of slot `si`'s read
    /// buffer whose pieces (`lp`) lie in regions not live, and drops those
    /// pieces (no member reads them). One check per request when the first
    /// and last pieces are live and at most one region apart.
    #[inline(never)]
    pub(super) fn skip_dead(&mut self, si: usize, lp: &mut Vec<Piece>) {
        let Some(bm) = self.vol.bitmap() else { return };
        let d = self.vol.data_offset();
        let (Some(a), Some(b)) = (lp.first(), lp.last()) else { return };
        let (oa, ob) = (a.places.first().member_offset, b.places.first().member_offset);
        if places_live(bm, d, &a.places) && places_live(bm, d, &b.places) && oa.abs_diff(ob) < bm.region_size() {
            return;
        }
        self.drop_dead(si, lp);
    }

    /// The slow part of [`skip_dead`](Self::skip_dead): piece by piece.
    #[cold]
    fn drop_dead(&mut self, si: usize, lp: &mut Vec<Piece>) {
        let Some(bm) = self.vol.bitmap().cloned() else { return };
        let d = self.vol.data_offset();
        let buf = self.slots[si].buf.as_mut().expect("checked");
        lp.retain(|p| {
            if places_live(&bm, d, &p.places) {
                return true;
            }
            buf[p.buf_offset..p.buf_offset + p.len].fill(0);
            false
        });
    }

    /// With a live-data map: a discard or zeroing (slot `si`) about to be
    /// planned marks the member rows that hold only its whole stripes
    /// (see [`Layout::rows_only_of_stripes`]; on a declustered level a row
    /// holds several groups, all of which must be inside) for the bitmap
    /// to forget the regions they cover whole (see [`Bitmap::discarding`]).
    pub(super) fn note_discard(&mut self, si: usize, l: &Layout) {
        let Some(bm) = self.vol.bitmap().filter(|b| b.live_map()) else { return };
        let (offset, len) = (self.slots[si].offset, self.slots[si].len as u64);
        let w = l.stripe_data_width();
        let (s0, s1) = (offset.div_ceil(w), (offset + len) / w);
        if s1 <= s0 {
            return;
        }
        let rows = l.rows_only_of_stripes(s0, s1);
        if !rows.is_empty() {
            let d = self.vol.data_offset();
            bm.discarding(d + rows.start * l.chunk(), d + rows.end * l.chunk());
        }
    }
}
