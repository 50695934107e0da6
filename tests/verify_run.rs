//! `distrun verify` on real run directories: untouched runs at 1 and 3 ranks verify; every kind
//! of tampering (files that are FIFOs or links to /dev/zero, names leaving the run, entries
//! deleted from the manifest, files added, a zeroed global checksum, an edited spec or hash) is
//! named, with exit 3, and quickly (a hang fails the test at its time limit).

mod common;
use common::*;

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tensors of every kind of layout over the ranks, uneven at 3 ranks, gathered too: `x` in row
/// slabs, `y` block-cyclic in Fortran order, `p` partial, `r` replicated.
fn spec(gather: bool) -> String {
    format!(
        r#"
[job]
name = "verify-run"

[runtime]
device = "cpu"

[tensors.x]
shape = [7, 5]
dtype = "f32"
distribution = {{ slab = 0 }}
init = {{ arange = {{ start = 0, step = 1 }} }}

[tensors.p]
shape = [3, 2]
dtype = "f64"
distribution = "partial"
init = {{ arange = {{ start = 0, step = 1 }} }}

[[steps]]
op = "redistribute"
input = "x"
out = "y"
distribution = {{ block_cyclic = {{ blocks = [2, 3] }} }}
layout = "F"

[[steps]]
op = "all_reduce"
input = "p"
out = "r"

[output]
tensors = ["x", "y", "p", "r"]
gather = {gather}
"#
    )
}

/// Runs the spec at `p` ranks into `out`.
fn run(p: usize, spec: &Path, out: &Path) {
    let args = [
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ];
    let ran = if p == 1 {
        Distrun::new().args(args).run()
    } else {
        mpirun(p, &args, &[], Duration::from_secs(300))
    };
    assert_eq!(ran.code, 0, "at {p} ranks:\n{}", ran.stderr);
}

/// `distrun verify DIR`, killed (code -9) if it has not ended within 30 seconds.
fn verify(dir: &Path) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_distrun"))
        .args(["verify", dir.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code().unwrap_or(-9),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let mut m = manifest(dir);
    edit(&mut m);
    std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
}

fn mkfifo(path: &Path) {
    std::fs::remove_file(path).unwrap();
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success());
}

fn link_to(target: &Path, path: &Path) {
    std::fs::remove_file(path).unwrap();
    std::os::unix::fs::symlink(target, path).unwrap();
}

#[test]
fn untouched_runs_verify_at_1_and_3_ranks() {
    for (p, gather) in [(1, true), (3, true), (3, false)] {
        let spec = temp_spec(&format!("verify-ok-{p}-{gather}"), &spec(gather));
        let out = spec.parent().unwrap().join("run");
        run(p, &spec, &out);
        let m = manifest(&out);
        assert_eq!(m["tensors"]["x"]["shards"].as_array().unwrap().len(), p);
        assert_eq!(m["tensors"]["y"]["layout"], "F");
        let ran = verify(&out).code(0);
        let files = 4 * (p + usize::from(gather));
        assert!(
            ran.stdout.contains(&format!("{files} files verified")),
            "{}",
            ran.stdout
        );
    }
}

/// A tampering of a run directory, given the directory and a scratch directory beside it.
type Tamper = fn(&Path, &Path);

#[test]
fn every_tampering_is_named_with_exit_3() {
    let spec = temp_spec("verify-tamper", &spec(true));
    let scratch = spec.parent().unwrap();
    let pristine = scratch.join("pristine");
    run(3, &spec, &pristine);
    let cases: [(&str, Tamper, &[&str]); 14] = [
        (
            "a shard that is a FIFO",
            |run, _| mkfifo(&run.join("x.rank1.npy")),
            &["x.rank1.npy: not a plain file inside the run directory"],
        ),
        (
            "a shard that is a link to /dev/zero",
            |run, _| link_to(Path::new("/dev/zero"), &run.join("y.rank0.npy")),
            &["y.rank0.npy: not a plain file inside the run directory"],
        ),
        (
            "a gathered file that is a link to /dev/zero",
            |run, _| link_to(Path::new("/dev/zero"), &run.join("p.npy")),
            &["p.npy: not a plain file inside the run directory"],
        ),
        (
            "a gathered file that is a FIFO",
            |run, _| mkfifo(&run.join("r.npy")),
            &["r.npy: not a plain file inside the run directory"],
        ),
        (
            "a file named in another run",
            |run, dir| {
                copy_dir(run, &dir.join("other-run"));
                edit_manifest(run, |m| {
                    m["tensors"]["x"]["file"] = json!("../other-run/x.npy")
                });
            },
            &[
                "../other-run/x.npy: not a plain file inside the run directory",
                "x.npy: not listed in the manifest",
            ],
        ),
        (
            "a file named by its absolute path",
            |run, _| {
                let absolute = run.join("x.npy").display().to_string();
                edit_manifest(run, |m| m["tensors"]["x"]["file"] = json!(absolute));
            },
            &["x.npy: not a plain file inside the run directory"],
        ),
        (
            "a link leaving the run",
            |run, dir| {
                std::fs::rename(run.join("x.npy"), dir.join("x.npy")).unwrap();
                std::os::unix::fs::symlink(dir.join("x.npy"), run.join("x.npy")).unwrap();
            },
            &["x.npy: not a plain file inside the run directory"],
        ),
        (
            "a deleted tensor entry",
            |run, _| {
                edit_manifest(run, |m| {
                    m["tensors"].as_object_mut().unwrap().remove("y");
                })
            },
            &[
                "tensor y: written by the spec, not in the manifest",
                "y.rank2.npy: not listed in the manifest",
            ],
        ),
        (
            "a deleted shard entry",
            |run, _| {
                edit_manifest(run, |m| {
                    m["tensors"]["p"]["shards"].as_array_mut().unwrap().pop();
                })
            },
            &[
                "tensor p: shards of ranks [0, 1], not one for each of the 3 ranks",
                "p.rank2.npy: not listed in the manifest",
            ],
        ),
        (
            "an added file",
            |run, _| std::fs::write(run.join("notes.txt"), "x").unwrap(),
            &["notes.txt: not listed in the manifest"],
        ),
        (
            "a zeroed global checksum",
            |run, _| {
                edit_manifest(run, |m| {
                    m["tensors"]["y"]["checksum"] = json!("xxh3-64:0000000000000000")
                })
            },
            &[
                "tensor y: its shards give checksum",
                "tensor y: the data of y.npy give checksum",
            ],
        ),
        (
            "an edited spec",
            |run, _| edit_manifest(run, |m| m["spec"]["job"]["seed"] = json!(99)),
            &["spec: spec.job.seed is not what spec_text gives, as run"],
        ),
        (
            "an edited spec that writes less, and its tensor entry deleted",
            |run, _| {
                edit_manifest(run, |m| {
                    m["spec"]["output"]["tensors"] = json!(["x", "y", "p"]);
                    m["tensors"].as_object_mut().unwrap().remove("r");
                })
            },
            &[
                "spec: spec.output.tensors is not what spec_text gives, as run",
                "r.rank0.npy: not listed in the manifest",
            ],
        ),
        (
            "an edited spec_sha256",
            |run, _| edit_manifest(run, |m| m["spec_sha256"] = json!("0".repeat(64))),
            &["spec: spec_sha256 is 0000"],
        ),
    ];
    for (i, (what, tamper, named)) in cases.into_iter().enumerate() {
        let dir = scratch.join(format!("case{i}"));
        let run = dir.join("run");
        copy_dir(&pristine, &run);
        tamper(&run, &dir);
        let ran = verify(&run);
        assert_eq!(ran.code, 3, "{what}: exit {}\n{}", ran.code, ran.stderr);
        for line in named {
            assert!(
                ran.stderr.contains(line),
                "{what}: no {line:?} in\n{}",
                ran.stderr
            );
        }
        for line in ran.stderr.lines() {
            assert!(line.starts_with(run.to_str().unwrap()), "{what}: {line}");
        }
    }
}
