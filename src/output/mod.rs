//! What a run writes: the run directory (created atomically), one `.npy` per rank per written
//! tensor, checksums of every file, `manifest.json` (written last), and `distrun verify`.
//!
//! Order of a run's writes, with any number of ranks on one shared filesystem:
//! rank 0 calls [`RunDir::create`] and broadcasts [`RunDir::path`]; the other ranks call
//! [`RunDir::open`] with it; every rank writes its shards ([`write_npy_in`]); after a barrier,
//! rank 0 writes the gathered files, then the manifest ([`write_manifest`]), then
//! [`RunDir::commit`]s. Until the commit nothing exists under the final name.

pub mod checksum;
pub mod manifest;
pub mod npy;
pub mod rundir;
pub mod verify;

#[cfg(test)]
pub(crate) mod fixtures;

pub use checksum::{Hasher, hash_file};
pub use manifest::{Manifest, read_manifest, write_manifest};
pub use npy::{write_npy, write_npy_in, write_npy_to};
pub use rundir::RunDir;
pub use verify::{VerifyReport, verify};
