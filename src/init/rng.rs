//! The counter-based generator (defined exactly in the [module docs](super)).

use super::fdlibm;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The 64-bit golden-ratio constant used by SplitMix64.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The stream key of one tensor: XXH3-64 of the tensor's name (UTF-8 bytes) with the job's
/// seed as XXH3's seed.
pub fn key(seed: u64, name: &str) -> u64 {
    xxh3_64_with_seed(name.as_bytes(), seed)
}

/// SplitMix64's output function applied to `x` (the state increment included).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64 random bits for `counter` in the stream `key`.
pub fn bits(key: u64, counter: u64) -> u64 {
    splitmix64(key ^ counter.wrapping_mul(GOLDEN))
}

/// A uniform double in `[0, 1)`: the top 53 bits of [`bits`] times 2^-53 (exact).
pub fn unit(key: u64, counter: u64) -> f64 {
    (bits(key, counter) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A standard normal by Box-Muller from counters `c` and `c + 1`:
/// `sqrt(-2 ln(1 - u1)) * cos(2 pi u2)`, every operation rounded separately in f64, `ln` and
/// `cos` the [`fdlibm`] ones (the same bits on every CPU and GPU).
pub fn std_normal(key: u64, c: u64) -> f64 {
    let u1 = unit(key, c);
    let u2 = unit(key, c.wrapping_add(1));
    (-2.0 * fdlibm::ln(1.0 - u1)).sqrt() * fdlibm::cos(std::f64::consts::TAU * u2)
}
