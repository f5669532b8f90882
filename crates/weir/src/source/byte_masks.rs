//! Where two bytes are in a block of 64: one bit per byte, for splitting records into fields.
//!
//! The CSV fast path ([`super::csv_fast`]) needs every delimiter and newline of a run. A
//! record's fields are about twenty bytes, so a search per field (`memchr`) pays its setup
//! again and again; here a block of 64 bytes is compared at once and gives two bit masks, the
//! delimiters and newlines together and the newlines alone, whose set bits are then walked.
//! The comparisons are the `wide` crate's 16-byte vectors (SSE2 on x86-64, NEON on AArch64, a
//! scalar loop elsewhere), with no `unsafe` here.

use wide::u8x16;

/// The bits of `block` whose byte is `a` or `b`, and those whose byte is `b` (bit i for byte
/// i).
#[inline]
pub(crate) fn block_masks(block: &[u8; 64], a: u8, b: u8) -> (u64, u64) {
    let (va, vb) = (u8x16::splat(a), u8x16::splat(b));
    let (mut either, mut bs) = (0u64, 0u64);
    for (k, chunk) in block.chunks_exact(16).enumerate() {
        let mut lanes = [0u8; 16];
        lanes.copy_from_slice(chunk);
        let v = u8x16::new(lanes);
        let is_b = v.cmp_eq(vb);
        let is_either = v.cmp_eq(va) | is_b;
        // A move mask has one bit per lane, the 16 low bits of its i32.
        either |= u64::from(is_either.move_mask() as u16) << (16 * k);
        bs |= u64::from(is_b.move_mask() as u16) << (16 * k);
    }
    (either, bs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scan(block: &[u8; 64], a: u8, b: u8) -> (u64, u64) {
        let bit = |k: usize, hit: bool| u64::from(hit) << k;
        block
            .iter()
            .enumerate()
            .fold((0, 0), |(e, o), (k, &x)| (e | bit(k, x == a || x == b), o | bit(k, x == b)))
    }

    #[test]
    fn masks_of_a_block() {
        let mut block = [b'x'; 64];
        block[0] = b',';
        block[9] = b'\n';
        block[63] = b',';
        assert_eq!(block_masks(&block, b',', b'\n'), (1 | 1 << 9 | 1 << 63, 1 << 9));
    }

    proptest! {
        /// The masks are a byte-by-byte scan's, over blocks dense with both bytes and bytes
        /// with the high bit set (a sign taken wrongly in a lane or a mask would show there).
        #[test]
        fn masks_are_a_scans(
            a in prop_oneof![Just(b','), Just(0u8), Just(0x80u8), any::<u8>()],
            b in prop_oneof![Just(b'\n'), Just(0xffu8), any::<u8>()],
            bytes in proptest::collection::vec(
                prop_oneof![Just(b','), Just(b'\n'), Just(0u8), Just(0x80u8), Just(0xffu8),
                    any::<u8>()],
                64,
            ),
        ) {
            let mut block = [0u8; 64];
            block.copy_from_slice(&bytes);
            prop_assert_eq!(block_masks(&block, a, b), scan(&block, a, b));
        }
    }
}
