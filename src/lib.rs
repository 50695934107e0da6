//! distrun: distributed tensor work on many GPUs or CPUs from a declarative TOML spec.
//!
//! One spec flows one way: load (TOML with positions) -> validate (schema, then meaning) ->
//! plan (every tensor and step resolved for N ranks).

#![warn(missing_docs)]

pub mod backend;
pub mod cli;
pub mod dist;
pub mod exec;
pub mod init;
pub mod ops;
pub mod output;
pub mod plan;
pub mod report;
pub mod runtime;
pub mod spec;
