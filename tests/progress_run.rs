//! What rank 0 shows while a run goes, under mpiexec: a progress bar when the launcher's
//! terminal is one (a pseudo-terminal from `script`), one plain line per step otherwise.

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const SPEC: &str = "[job]\nname = \"progress\"\n[tensors.x]\nshape = [64]\ndtype = \"f32\"\n\
    distribution = \"partial\"\ninit = \"ones\"\n[[steps]]\nop = \"all_reduce\"\ninput = \"x\"\n\
    out = \"y\"\n";

#[test]
fn a_bar_on_the_launchers_terminal_and_lines_elsewhere() {
    let spec = temp_spec("progress", SPEC);
    let dir = spec.parent().unwrap();
    // No terminal: one line per step, no escape codes.
    let out = dir.join("plain");
    let ran = mpirun(
        2,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("distrun: step 1/1 all_reduce#0: 25 runs"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains('\x1b'), "{}", ran.stderr);
    // mpiexec on a terminal: rank 0 draws the bar into the stream mpiexec forwards to it.
    let out = dir.join("tty");
    let command = format!(
        "mpiexec --oversubscribe -n 2 {} run {} --out {}",
        env!("CARGO_BIN_EXE_distrun"),
        spec.display(),
        out.display()
    );
    let typed = dir.join("typescript");
    let ran = Command::new("script")
        .args(["-qec", &command, typed.to_str().unwrap()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("script (util-linux) runs");
    let said = String::from_utf8_lossy(&ran.stderr);
    if said.contains("pseudo-terminal") || said.contains("openpty") {
        eprintln!("skipped the terminal half: no pseudo-terminal here ({said})");
        return;
    }
    let out_text = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success(), "{out_text}{said}");
    let shown = std::fs::read_to_string(&typed).unwrap();
    assert!(shown.contains("[1/1] all_reduce#0"), "{shown}");
    assert!(shown.contains(" 0/25"), "{shown}");
    assert!(
        shown.contains("\x1b[2K"),
        "the bar redraws its line: {shown}"
    );
    assert!(
        !shown.contains("\x1b[0A"),
        "a count of 0 moves a terminal's cursor: {shown}"
    );
    assert!(out.join("manifest.json").exists());
}
