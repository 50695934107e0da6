//! Operations written once over the backend: data movement (exchange plans), collectives, matmul, fft.

pub mod exchange;
pub mod fft;
pub mod matmul;
pub mod step;
