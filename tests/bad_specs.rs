//! The corpus of bad specs under tests/bad: each file says, in `# expect:` lines, the
//! `LINE:COL: message` of every error it must produce (and `# expect-help:` hints); validation
//! must exit 2, report exactly those errors, and print the source line with a caret.

mod common;
use common::*;
use std::process::Command;

#[test]
fn every_bad_spec_reports_its_errors_with_positions() {
    let dir = root().join("tests/bad");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "the corpus shrank: {files:?}");
    for file in files {
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let expects: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        let helps: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect-help: "))
            .collect();
        assert!(!expects.is_empty(), "{rel} has no `# expect:` line");
        let ran = Distrun::new().args(["validate", &rel]).run();
        assert_eq!(
            ran.code, 2,
            "{rel} must be refused with exit 2:\n{}",
            ran.stderr
        );
        assert!(
            ran.stdout.is_empty(),
            "{rel}: nothing on stdout for an invalid spec"
        );
        let headers: Vec<&str> = ran
            .stderr
            .lines()
            .filter(|l| l.starts_with(&format!("{rel}:")))
            .collect();
        for expect in &expects {
            let (pos, message) = expect.split_at(expect.find(": ").unwrap());
            let message = &message[2..];
            let prefix = format!("{rel}:{pos}: ");
            assert!(
                headers
                    .iter()
                    .any(|h| h.starts_with(&prefix) && h.contains(message)),
                "{rel}: expected `{prefix}...{message}` in:\n{}",
                ran.stderr
            );
            // The offending line is quoted with a caret under the spot.
            let line: usize = pos.split(':').next().unwrap().parse().unwrap();
            let col: usize = pos.split(':').nth(1).unwrap().parse().unwrap();
            // (A long line is quoted around the spot, cut with `…` on either side.)
            let source: Vec<char> = text.lines().nth(line - 1).unwrap().chars().collect();
            let header = format!("{rel}:{pos}: ");
            let mut rest = ran.stderr[ran.stderr.find(&header).unwrap()..]
                .lines()
                .skip(1);
            let quoted = rest.next().unwrap();
            let caret_line = rest.next().unwrap();
            let window = (quoted.strip_prefix(&format!("{line} | ")))
                .unwrap_or_else(|| panic!("{rel}: line {line} not quoted:\n{}", ran.stderr));
            let cut = window.starts_with('…');
            let shown: Vec<char> = window.trim_matches('…').chars().collect();
            let start = (0..=source.len() - shown.len())
                .find(|&i| source[i..i + shown.len()] == shown[..])
                .unwrap_or_else(|| panic!("{rel}: {window:?} is not a piece of line {line}"));
            let bar = caret_line.find("| ").unwrap();
            let caret = caret_line[bar + 2..]
                .chars()
                .position(|c| c == '^')
                .unwrap();
            assert_eq!(
                start + caret - usize::from(cut) + 1,
                col,
                "{rel}: caret of {pos}:\n{}",
                ran.stderr
            );
        }
        for help in helps {
            assert!(
                ran.stderr.contains(help),
                "{rel}: expected help `{help}` in:\n{}",
                ran.stderr
            );
        }
        let count = expects.len();
        let summary = format!(
            "{rel}: {count} error{}; nothing was run",
            if count == 1 { "" } else { "s" }
        );
        assert!(
            ran.stderr.contains(&summary),
            "{rel}: expected exactly {count} errors:\n{}",
            ran.stderr
        );
        if !expects.iter().any(|e| e.contains("TOML syntax")) {
            assert!(
                ran.stderr.contains("= at: "),
                "{rel}: errors name their key path"
            );
        }
    }
}

#[test]
fn every_error_of_a_spec_is_reported_at_once() {
    let spec = temp_spec(
        "many",
        r#"[job]
name = "many"
[tensors.a]
shape = [4, 0]
dtype = "f32"
layout = "G"
init = { fill = "x" }
[[steps]]
op = "barrier"
warmup = -1
"#,
    );
    let ran = Distrun::new()
        .args(["validate", spec.to_str().unwrap()])
        .run()
        .code(2);
    for needle in [
        ":4:13: `shape[1]` is 0, below the minimum 1",
        ":6:10: `G` is not a valid `layout`",
        ":7:17: `fill` must be a number",
        ":10:10: `warmup` is -1, below the minimum 0",
        "4 errors; nothing was run",
    ] {
        assert!(
            ran.stderr.contains(needle),
            "missing `{needle}` in:\n{}",
            ran.stderr
        );
    }
}

#[test]
fn a_missing_file_is_an_invalid_spec() {
    let ran = Distrun::new()
        .args(["validate", "specs/no-such.toml"])
        .run()
        .code(2);
    assert!(
        ran.stderr
            .contains("specs/no-such.toml: cannot read the spec"),
        "{}",
        ran.stderr
    );
}

/// Thousands of errors on one long line (an output list of misspelled names among thousands of
/// tensors) each print a short quote of the line and a short hint: the report grows with the
/// error count, not with the count times the line or the tensors.
#[test]
fn many_errors_on_a_long_line_print_short_reports() {
    let n = 3000;
    let mut text = String::from("[job]\nname = \"many-names\"\n");
    for i in 0..n {
        text.push_str(&format!(
            "[tensors.tensor_{i}]\nshape = [2]\ndtype = \"f32\"\ninit = \"ones\"\n"
        ));
    }
    let outputs: Vec<String> = (0..n).map(|i| format!("\"tensr_{i}\"")).collect();
    text.push_str(&format!("[output]\ntensors = [{}]\n", outputs.join(", ")));
    let spec = temp_spec("many-names", &text);
    let ran = Distrun::new()
        .args(["validate", spec.to_str().unwrap()])
        .run()
        .code(2);
    assert!(ran.stderr.contains(&format!("{n} errors; nothing was run")));
    assert!(
        ran.stderr.len() < n * 800,
        "{} bytes for {n} errors",
        ran.stderr.len()
    );
    // The first errors guess the name meant; every error lists some tensors and the count.
    assert!(ran.stderr.contains("did you mean `tensor_0`?"));
    assert!(ran.stderr.contains(&format!(" and {} more", n - 24)));
    let line = 4 * n + 4;
    let last = format!("tensr_{}", n - 1);
    let at = text.lines().nth(line - 1).unwrap().find(&last).unwrap();
    assert!(
        ran.stderr
            .contains(&format!(":{line}:{}: no tensor named `{last}`", at)),
        "{}",
        &ran.stderr[ran.stderr.len() - 600..]
    );
}

#[test]
fn a_fifo_is_refused_without_blocking_by_validate_and_run() {
    let spec = temp_spec(
        "fifo",
        "[job]\nname = \"fifo\"\n[tensors.w]\nshape = [4]\ndtype = \"f32\"\ninit = { npy = \"w.npy\" }\n",
    );
    let dir = spec.parent().unwrap();
    let fifo = dir.join("w.npy");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let spec = spec.to_str().unwrap();
    let out = dir.join("out");
    let run = ["run", spec, "--device=cpu", "--out", out.to_str().unwrap()];
    for args in [&["validate", spec][..], &run] {
        // `timeout` ends a distrun blocked on the FIFO (exit 124) rather than the test hanging.
        let ran = Command::new("timeout")
            .arg("20")
            .arg(env!("CARGO_BIN_EXE_distrun"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert_eq!(ran.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("w.npy is not a regular file but a FIFO"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn run_refuses_bad_npy_files_as_validate_does() {
    let out = temp_dir("bad-npy-run");
    let ran = Distrun::new()
        .args(["run", "tests/bad/npy_files.toml", "--device=cpu", "--out"])
        .args([out.join("run").to_str().unwrap()])
        .run()
        .code(2);
    for needle in [
        "data/nested.npy is not a .npy distrun reads",
        "data/structured.npy holds a structured dtype",
        "data/truncated.npy is truncated: needs 144 bytes, has 138",
    ] {
        assert!(
            ran.stderr.contains(needle),
            "no {needle:?} in:\n{}",
            ran.stderr
        );
    }
}
