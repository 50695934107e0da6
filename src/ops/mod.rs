//! Operations written once over the backend: data movement (exchange plans), collectives, matmul.

pub mod exchange;
pub mod matmul;
pub mod step;
