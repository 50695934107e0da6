//! The editor side, proven with a validator distrun does not contain: check-jsonschema (what
//! `scripts/setup` installs into .tools/venv) accepts every spec in specs/ and examples/ against
//! the committed schema and rejects broken ones.

mod common;
use common::*;
use std::process::Command;

fn check_jsonschema() -> Command {
    let local = root().join(".tools/venv/bin/check-jsonschema");
    let program = if local.exists() {
        local
    } else {
        "check-jsonschema".into()
    };
    let mut cmd = Command::new(program);
    cmd.current_dir(root())
        .args(["--schemafile", "schemas/distrun.schema.json"]);
    cmd
}

fn run(mut cmd: Command) -> (bool, String) {
    let out = cmd.output().expect(
        "check-jsonschema is not installed: run scripts/setup (it installs it into .tools/venv)",
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn check_jsonschema_accepts_every_example_spec() {
    let mut cmd = check_jsonschema();
    cmd.args(example_specs()).args(workload_specs());
    let (ok, out) = run(cmd);
    assert!(ok, "check-jsonschema rejected specs/ or examples/:\n{out}");
}

#[test]
fn check_jsonschema_rejects_broken_specs() {
    for (file, needle) in [
        ("tests/bad/key_typo.toml", "'distribuion' was unexpected"),
        ("tests/bad/wrong_type.toml", "is not of type 'array'"),
        (
            "tests/bad/unknown_dtype.toml",
            "$.tensors.a.dtype: 'float32'",
        ),
        ("tests/bad/unknown_op.toml", "steps[1]"),
    ] {
        let mut cmd = check_jsonschema();
        cmd.arg(file);
        let (ok, out) = run(cmd);
        assert!(!ok, "check-jsonschema accepted {file}");
        assert!(
            out.contains(needle),
            "{file}: expected `{needle}` in:\n{out}"
        );
    }
}
