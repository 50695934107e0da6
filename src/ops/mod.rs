//! Operations written once over the backend: data movement (exchange plans), collectives.

pub mod exchange;
pub mod step;
