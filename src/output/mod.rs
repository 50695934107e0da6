//! What a run writes: the run directory (created atomically), one `.npy` per rank per written
//! tensor, checksums of every file, `manifest.json` (written last), and `distrun verify`.
//!
//! Order of a run's writes, with any number of ranks on one shared filesystem (`exec::write`):
//! rank 0 calls [`RunDir::create`] (for `--out`) or [`RunDir::create_unique`] (a default name)
//! and sends [`RunDir::path`] to all; the other ranks call [`RunDir::open`] with it; tensor by
//! tensor, every rank writes its shard ([`write_npy_in`]) and rank 0 the gathered file where
//! asked; once every rank's shard records have reached rank 0, it writes the manifest
//! ([`write_manifest`]) and [`RunDir::commit`]s. Until the commit nothing exists under the final
//! name.

pub mod checksum;
pub mod manifest;
pub mod npy;
pub mod plain;
pub mod rundir;
pub mod verify;

#[cfg(test)]
pub(crate) mod fixtures;

pub use checksum::{Hasher, hash_file};
pub use manifest::{Manifest, read_manifest, write_manifest};
pub use npy::{write_npy, write_npy_in, write_npy_to};
pub use rundir::RunDir;
pub use verify::{Finding, VerifyReport, verify};

/// The file of rank `rank`'s piece of tensor `tensor` in a run directory.
pub fn shard_file(tensor: &str, rank: u64) -> String {
    format!("{tensor}.rank{rank}.npy")
}

/// The file of tensor `tensor` gathered whole (`gather = true`).
pub fn gathered_file(tensor: &str) -> String {
    format!("{tensor}.npy")
}
