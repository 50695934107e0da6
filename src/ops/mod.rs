//! Operations written once over the backend: data movement (exchange plans), collectives, matmul, fft.

pub mod exchange;
pub mod fft;
pub mod matmul;
pub mod movement;
pub mod movement_check;
pub mod sum;

/// The outcome of a step's check: of comparing a result with its expected values (data
/// movement), or of an op's own test (Freivalds' for matmul, round trip and Parseval for fft).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Every element within tolerance (exactly equal where the op is exact).
    pub passed: bool,
    /// Largest error: absolute for exact ops, relative to the values' size for float ones.
    pub max_error: f64,
}
