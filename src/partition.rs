//! The partition of a key: Kafka's default partitioner for keyed messages (the Java client's
//! `murmur2`, librdkafka's `murmur2` partitioner), so that the ingest tier, any other producer
//! of the topic and the classify tier agree on where a key lives without asking each other.

/// Kafka's `Utils.murmur2` (seed `0x9747b28c`), as the Java client hashes a key.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ len as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `key` among `partitions` (> 0), as Kafka's default partitioner picks it:
/// `toPositive(murmur2(key)) % partitions`.
pub fn partition_of(key: &[u8], partitions: i32) -> i32 {
    debug_assert!(partitions > 0);
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Java client's own test vectors (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_the_java_client() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            (b"abc", 479470107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn partitions_are_in_range_and_stable() {
        for n in [1, 2, 3, 12, 64] {
            for key in ["", "a", "0b6f3f1e-8d9c-4f6a-9a57-6c1f0b0c9d21", "pods/ns/name"] {
                let p = partition_of(key.as_bytes(), n);
                assert!((0..n).contains(&p));
                assert_eq!(p, partition_of(key.as_bytes(), n));
            }
        }
        assert_eq!(partition_of(b"21", 7), (-973932308i32 & 0x7fff_ffff) % 7);
    }
}
