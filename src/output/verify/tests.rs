use super::*;
use crate::output::fixtures::{TestDir, sample_manifest};
use crate::output::manifest::write_manifest;
use crate::output::npy::write_npy_in;
use crate::output::rundir::RunDir;
use crate::spec::model::Checksum;
use crate::spec::tensor::{DType, Layout};
use std::path::PathBuf;

/// A committed run directory holding the sample manifest's tensor `a` (two shards, one gathered
/// file) with true checksums.
fn fresh_run(root: &TestDir, algorithm: Checksum) -> PathBuf {
    let run = RunDir::create(root.path().join("job")).unwrap();
    let mut m = sample_manifest(algorithm);
    let values: Vec<u8> = (0..8).flat_map(|k| (k as f32).to_le_bytes()).collect();
    let a = m.tensors.get_mut("a").unwrap();
    for (rank, shard) in a.shards.iter_mut().enumerate() {
        let piece = &values[rank * 16..(rank + 1) * 16];
        shard.checksum = write_npy_in(
            &run,
            &shard.file,
            algorithm,
            DType::F32,
            &[2, 2],
            Layout::C,
            piece,
        )
        .unwrap();
    }
    let whole = write_npy_in(
        &run,
        "a.npy",
        algorithm,
        DType::F32,
        &[4, 2],
        Layout::C,
        &values,
    );
    a.file_checksum = Some(whole.unwrap());
    write_manifest(&run, &m).unwrap();
    run.commit().unwrap()
}

#[test]
fn a_fresh_run_verifies() {
    for algorithm in [Checksum::Xxh3_64, Checksum::Sha256] {
        let root = TestDir::new("verify-fresh");
        let report = verify(&fresh_run(&root, algorithm)).unwrap();
        assert_eq!(report.checked, 3);
        assert!(report.ok(), "{report:?}");
    }
}

#[test]
fn a_flipped_byte_is_a_mismatch() {
    let root = TestDir::new("verify-flip");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    let path = dir.join("a.rank1.npy");
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let report = verify(&dir).unwrap();
    assert_eq!(report.checked, 3);
    assert!(report.missing.is_empty());
    assert_eq!(report.mismatches.len(), 1);
    let (file, expected, found) = &report.mismatches[0];
    assert_eq!(file, "a.rank1.npy");
    assert_ne!(expected, found);
    assert!(found.starts_with("xxh3-64:"));
    assert!(!report.ok());
}

#[test]
fn a_deleted_file_is_missing() {
    let root = TestDir::new("verify-missing");
    let dir = fresh_run(&root, Checksum::Sha256);
    std::fs::remove_file(dir.join("a.npy")).unwrap();
    let report = verify(&dir).unwrap();
    assert_eq!(report.checked, 2);
    assert_eq!(report.missing, ["a.npy"]);
    assert!(report.mismatches.is_empty());
    assert!(!report.ok());
}

#[test]
fn no_manifest_is_an_error() {
    let root = TestDir::new("verify-no-manifest");
    assert!(verify(root.path()).is_err());
}
