use super::*;
use crate::output::checksum::{Hasher, sha256_hex};
use crate::output::fixtures::{TestDir, sample_manifest};
use crate::output::manifest::Manifest;
use crate::output::manifest::write_manifest;
use crate::output::npy::write_npy_in;
use crate::output::rundir::RunDir;
use crate::spec::tensor::{DType, Layout};
use std::os::unix::fs::symlink;
use std::time::Duration;

/// The sample tensor `a`'s values: 0..8 as f32, shape [4, 2].
fn values() -> Vec<u8> {
    (0..8).flat_map(|k| (k as f32).to_le_bytes()).collect()
}

/// A committed run directory holding the sample manifest's tensor `a` (two slabs of rows, one
/// gathered file) with true checksums.
fn fresh_run(root: &TestDir, algorithm: Checksum) -> PathBuf {
    let run = RunDir::create(root.path().join("job")).unwrap();
    let mut m = sample_manifest(algorithm);
    let values = values();
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
    let mut h = Hasher::new(algorithm);
    h.update(&values);
    a.checksum = h.finish();
    write_manifest(&run, &m).unwrap();
    run.commit().unwrap()
}

/// Rewrites a run directory's manifest after `edit`.
fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Manifest)) {
    let mut m = read_manifest(dir).unwrap();
    edit(&mut m);
    std::fs::write(
        dir.join(MANIFEST_FILE),
        serde_json::to_string_pretty(&m).unwrap(),
    )
    .unwrap();
}

/// What verifying `dir` finds, within a few seconds (a hang fails the test).
fn findings(dir: &Path) -> Vec<Finding> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || tx.send(verify(&dir).unwrap()));
    let report = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("verify ends");
    assert_eq!(report.ok(), report.findings.is_empty());
    report.findings
}

fn not_plain(file: &str) -> Finding {
    Finding::NotPlain {
        file: file.to_string(),
    }
}

fn unlisted(file: &str) -> Finding {
    Finding::Unlisted {
        file: file.to_string(),
    }
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
fn a_flipped_byte_is_a_mismatch_of_the_file_and_the_tensor() {
    let root = TestDir::new("verify-flip");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    let path = dir.join("a.rank1.npy");
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let found = findings(&dir);
    assert_eq!(found.len(), 2, "{found:?}");
    let Finding::Mismatch {
        file,
        expected,
        found: got,
    } = &found[0]
    else {
        panic!("{found:?}")
    };
    assert_eq!(file, "a.rank1.npy");
    assert_ne!(expected, got);
    assert!(got.starts_with("xxh3-64:"));
    assert!(
        matches!(&found[1], Finding::Global { tensor, source, .. } if tensor == "a" && source == "its shards")
    );
}

#[test]
fn a_deleted_file_is_missing() {
    let root = TestDir::new("verify-missing");
    let dir = fresh_run(&root, Checksum::Sha256);
    std::fs::remove_file(dir.join("a.npy")).unwrap();
    let report = verify(&dir).unwrap();
    assert_eq!(report.checked, 2);
    let missing = Finding::Missing {
        file: "a.npy".to_string(),
    };
    assert_eq!(report.findings, [missing]);
}

#[test]
fn no_manifest_is_an_error() {
    let root = TestDir::new("verify-no-manifest");
    assert!(verify(root.path()).is_err());
}

#[test]
fn a_manifest_that_is_a_link_or_a_fifo_is_an_error() {
    let root = TestDir::new("verify-manifest-link");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    let moved = root.path().join("elsewhere.json");
    std::fs::rename(dir.join(MANIFEST_FILE), &moved).unwrap();
    symlink(&moved, dir.join(MANIFEST_FILE)).unwrap();
    assert!(verify(&dir).is_err());
    std::fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    mkfifo(&dir.join(MANIFEST_FILE));
    assert!(verify(&dir).is_err());
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

#[test]
fn a_fifo_or_a_link_to_dev_zero_is_not_read() {
    let root = TestDir::new("verify-fifo");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    std::fs::remove_file(dir.join("a.rank0.npy")).unwrap();
    mkfifo(&dir.join("a.rank0.npy"));
    std::fs::remove_file(dir.join("a.npy")).unwrap();
    symlink("/dev/zero", dir.join("a.npy")).unwrap();
    assert_eq!(
        findings(&dir),
        [not_plain("a.rank0.npy"), not_plain("a.npy")]
    );
}

#[test]
fn names_outside_the_run_are_not_plain() {
    let root = TestDir::new("verify-outside");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    // The same bytes, with the same checksum, outside the run and reached three ways.
    std::fs::rename(dir.join("a.npy"), root.path().join("a.npy")).unwrap();
    let outside = root.path().join("a.npy");
    std::fs::create_dir(root.path().join("sub")).unwrap();
    std::fs::copy(&outside, root.path().join("sub/a.npy")).unwrap();
    symlink(&outside, dir.join("link.npy")).unwrap();
    symlink(root.path().join("sub"), dir.join("sub")).unwrap();
    for name in [
        "../a.npy".to_string(),
        outside.display().to_string(),
        "link.npy".to_string(),
        "sub/a.npy".to_string(),
    ] {
        edit_manifest(&dir, |m| m.tensors["a"].file = Some(name.clone()));
        let mut want = vec![not_plain(&name)];
        // A link in the run that the manifest does not name (any more) is named too.
        for other in ["link.npy", "sub"] {
            if name != other {
                want.push(unlisted(other));
            }
        }
        assert_eq!(findings(&dir), want, "{name}");
    }
}

#[test]
fn unlisted_files_and_directories_are_named() {
    let root = TestDir::new("verify-unlisted");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    std::fs::write(dir.join("extra.npy"), b"x").unwrap();
    std::fs::create_dir_all(dir.join("p0/deeper")).unwrap();
    assert_eq!(findings(&dir), [unlisted("extra.npy"), unlisted("p0")]);
}

#[test]
fn files_in_subdirectories_may_be_listed() {
    let root = TestDir::new("verify-subdir");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    std::fs::create_dir_all(dir.join("p0")).unwrap();
    std::fs::rename(dir.join("a.npy"), dir.join("p0/a.npy")).unwrap();
    std::fs::write(dir.join("p0/stray"), b"x").unwrap();
    edit_manifest(&dir, |m| m.tensors["a"].file = Some("p0/a.npy".to_string()));
    assert_eq!(findings(&dir), [unlisted("p0/stray")]);
}

#[test]
fn a_deleted_tensor_entry_is_found() {
    let root = TestDir::new("verify-no-tensor");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    edit_manifest(&dir, |m| m.tensors.clear());
    let want = [
        Finding::TensorMissing {
            tensor: "a".to_string(),
        },
        unlisted("a.npy"),
        unlisted("a.rank0.npy"),
        unlisted("a.rank1.npy"),
    ];
    assert_eq!(findings(&dir), want);
}

#[test]
fn a_deleted_shard_entry_is_found() {
    let root = TestDir::new("verify-no-shard");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    edit_manifest(&dir, |m| {
        m.tensors["a"].shards.remove(1);
    });
    let found = findings(&dir);
    assert!(
        matches!(&found[0], Finding::Record { tensor, what } if tensor == "a" && what.contains("shards of ranks [0]")),
        "{found:?}"
    );
    assert_eq!(found[1..], [unlisted("a.rank1.npy")]);
}

#[test]
fn a_zeroed_global_checksum_is_found() {
    let root = TestDir::new("verify-zeroed");
    let dir = fresh_run(&root, Checksum::Sha256);
    let zero = format!("sha256:{}", "0".repeat(64));
    edit_manifest(&dir, |m| m.tensors["a"].checksum = zero.clone());
    let found = findings(&dir);
    let sources: Vec<&str> = found
        .iter()
        .map(|f| match f {
            Finding::Global {
                source, expected, ..
            } if *expected == zero => source.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sources, ["its shards", "the data of a.npy"]);
}

#[test]
fn a_shard_holding_another_shape_is_malformed() {
    let root = TestDir::new("verify-shape");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    // As many bytes, but a [4, 1] array: its checksum updated to match.
    std::fs::remove_file(dir.join("a.rank0.npy")).unwrap();
    let run = RunDir::open(dir.clone()).unwrap();
    let piece = &values()[..16];
    let sum = write_npy_in(
        &run,
        "a.rank0.npy",
        Checksum::Xxh3_64,
        DType::F32,
        &[4, 1],
        Layout::C,
        piece,
    );
    let sum = sum.unwrap();
    edit_manifest(&dir, |m| m.tensors["a"].shards[0].checksum = sum);
    let found = findings(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .to_string()
            .starts_with("a.rank0.npy: its header is not that of a f32 array of shape [2, 2]"),
        "{}",
        found[0]
    );
    // A shard cut short is found by its size, before it is read.
    std::fs::write(dir.join("a.rank1.npy"), b"short").unwrap();
    let found = findings(&dir);
    assert!(
        found[1]
            .to_string()
            .starts_with("a.rank1.npy: 5 bytes, but"),
        "{found:?}"
    );
}

#[test]
fn a_file_named_twice_is_found() {
    let root = TestDir::new("verify-twice");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    edit_manifest(&dir, |m| {
        let a = &mut m.tensors["a"];
        a.shards[1].file = a.shards[0].file.clone();
        a.shards[1].checksum = a.shards[0].checksum.clone();
    });
    let found = findings(&dir);
    let named: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 3, "{named:?}");
    assert_eq!(named[0], "a.rank0.npy: named more than once");
    assert!(named[1].starts_with("tensor a: its shards give checksum"));
    assert_eq!(found[2], unlisted("a.rank1.npy"));
}

#[test]
fn a_distribution_that_does_not_fit_is_found() {
    let root = TestDir::new("verify-dist");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    for dist in [
        serde_json::json!({"slab": 5}),
        serde_json::json!({"block_cyclic": {"grid": [2, 1], "blocks": [0, 1]}}),
        serde_json::json!("scattered"),
    ] {
        edit_manifest(&dir, |m| m.tensors["a"].distribution = dist.clone());
        let found = findings(&dir);
        assert!(
            matches!(&found[..], [Finding::Record { what, .. }] if what.starts_with("distribution")),
            "{dist}: {found:?}"
        );
    }
}

#[test]
fn the_spec_is_checked_against_its_text_and_hash() {
    let root = TestDir::new("verify-spec");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    let spec_finding = |dir: &Path| -> Vec<String> {
        findings(dir)
            .iter()
            .map(|f| match f {
                Finding::Spec { what } => what.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let pristine = read_manifest(&dir).unwrap();
    // The spec as run edited.
    edit_manifest(&dir, |m| m.spec["job"]["seed"] = serde_json::json!(7));
    assert_eq!(
        spec_finding(&dir),
        ["spec.job.seed is not what spec_text gives, as run"]
    );
    // The hash edited.
    edit_manifest(&dir, |m| *m = pristine.clone());
    edit_manifest(&dir, |m| m.spec_sha256 = "0".repeat(64));
    let found = spec_finding(&dir);
    assert!(found[0].starts_with("spec_sha256 is 000"), "{found:?}");
    // The text edited (its hash along with it) but not the spec as run.
    edit_manifest(&dir, |m| {
        *m = pristine.clone();
        let text = m
            .spec_text
            .as_ref()
            .unwrap()
            .replace("\"sample\"", "\"other\"");
        m.spec_sha256 = sha256_hex(text.as_bytes());
        m.spec_text = Some(text);
    });
    assert_eq!(
        spec_finding(&dir),
        ["spec.job.name is not what spec_text gives, as run"]
    );
    // No text at all.
    edit_manifest(&dir, |m| {
        *m = pristine.clone();
        m.spec_text = None;
    });
    assert_eq!(
        spec_finding(&dir),
        ["the manifest does not hold the spec's text (spec_text)"]
    );
}

#[test]
fn the_manifest_must_match_what_the_spec_writes() {
    let root = TestDir::new("verify-spec-output");
    let dir = fresh_run(&root, Checksum::Xxh3_64);
    edit_manifest(&dir, |m| {
        let a = m.tensors["a"].clone();
        m.tensors.insert("b".to_string(), a);
        m.tensors["a"].file = None;
    });
    let named: Vec<String> = findings(&dir).iter().map(ToString::to_string).collect();
    assert_eq!(
        named,
        [
            "tensor a: the spec gathers it, but the manifest names no gathered file",
            "tensor b: in the manifest, not written by the spec",
            "a.rank0.npy: named more than once",
            "a.rank1.npy: named more than once",
        ]
    );
}
