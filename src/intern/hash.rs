//! A fast hasher for the maps read at every write. The state's are keyed by UIDs (UUIDs or
//! 128-bit hashes: already full of entropy) and interned-string handles; the model
//! configuration's by kind and the metrics' set of known kinds hold keys fixed by the
//! configuration, that a lookup never adds to. SipHash's resistance to chosen keys buys nothing
//! there while costing a tenth of the processing time. Integers are mixed with a
//! multiply-xorshift (so sequential UIDs still spread over the map's shards); byte strings go
//! through xxh3.

use std::hash::{BuildHasherDefault, Hasher};

/// The hasher [`FastBuild`] makes: integers mixed in, byte strings through xxh3, finished with
/// MurmurHash3's fmix64.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

/// `BuildHasher` for maps keyed by UIDs and handles.
pub type FastBuild = BuildHasherDefault<FastHasher>;

#[inline]
fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // fmix64 from MurmurHash3: every input bit reaches the high bits that pick a shard.
        let mut k = self.0;
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0 = mix(self.0, xxhash_rust::xxh3::xxh3_64(bytes));
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.0 = mix(self.0, i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.0 = mix(self.0, i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = mix(self.0, i);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.0 = mix(mix(self.0, i as u64), (i >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.0 = mix(self.0, i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_uids_spread_over_high_bits() {
        let b = FastBuild::default();
        let mut tops = std::collections::HashSet::new();
        for i in 0..256u128 {
            tops.insert(b.hash_one(i) >> 58);
        }
        assert!(tops.len() > 50, "the top 6 bits take many values: {}", tops.len());
    }
}
