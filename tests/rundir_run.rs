//! The run directory with the real binary: a `--out` that cannot be written is refused before
//! anything runs (at 1 and 3 ranks); SIGTERM and SIGINT while the directory is written leave no
//! temporary directory; what SIGKILL leaves, the next run and `distrun clean` remove.

mod common;
use common::*;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A spec that writes one tensor, in `dir`; its default output dir is `dir/runs`.
fn spec_in(dir: &Path) -> PathBuf {
    let spec = dir.join("w.toml");
    std::fs::write(
        &spec,
        format!(
            "[job]\nname = \"w\"\n[tensors.x]\nshape = [64]\ndtype = \"f32\"\ninit = \"ones\"\n\
             distribution = {{ slab = 0 }}\n[[steps]]\nop = \"barrier\"\n[output]\n\
             dir = \"{}\"\ntensors = [\"x\"]\n",
            dir.join("runs").display()
        ),
    )
    .unwrap();
    spec
}

/// The names in a directory, sorted (hidden ones too).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// This host's name as partial directories carry it.
fn host() -> String {
    gethostname::gethostname()
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A pid that ran and has ended.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Asserts a refused run: exit 1 within seconds, the reason and "nothing was run" once, no
/// step run.
fn assert_refused(ran: &Ran, took: Duration, reason: &str) {
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(took < Duration::from_secs(30), "it took {took:?}");
    assert_eq!(
        ran.stderr.matches("; nothing was run").count(),
        1,
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains(reason),
        "{reason:?} in:\n{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains("distrun: step"), "{}", ran.stderr);
}

/// Every `--out` that cannot become a run directory, with what the refusal says.
fn bad_outs(dir: &Path) -> Vec<(PathBuf, String)> {
    std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("link")).unwrap();
    let long = "r".repeat(300);
    let mut outs = vec![
        (
            dir.join("newdir").join("."),
            "does not end in a name for a new directory".into(),
        ),
        (
            dir.join("link"),
            "link already exists (a symbolic link): choose another --out".into(),
        ),
        // Read-only for root too.
        (
            PathBuf::from("/sys/distrun-run"),
            "cannot create a directory in /sys".into(),
        ),
        (
            PathBuf::from("/dev/null/x"),
            "/dev/null is not a directory".into(),
        ),
        (
            dir.join(&long),
            format!(
                "the run directory's name `{}…{}` is 300 bytes",
                "r".repeat(24),
                "r".repeat(16)
            ),
        ),
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let locked = dir.join("locked");
        std::fs::create_dir(&locked).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o555);
        std::fs::set_permissions(&locked, mode).unwrap();
        outs.push((locked.join("run"), "cannot create a directory in".into()));
    }
    outs
}

#[test]
fn a_bad_out_is_refused_before_anything_runs() {
    let dir = temp_dir("bad-out");
    let spec = spec_in(&dir);
    for (out, reason) in bad_outs(&dir) {
        let before = entries(&dir);
        let t0 = Instant::now();
        let ran = Distrun::new()
            .args([
                "run",
                spec.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ])
            .run();
        assert_refused(&ran, t0.elapsed(), &reason);
        assert_eq!(entries(&dir), before, "{}", out.display());
    }
}

#[test]
fn a_bad_out_is_refused_before_anything_runs_at_three_ranks() {
    let dir = temp_dir("bad-out-3");
    let spec = spec_in(&dir);
    let outs = bad_outs(&dir);
    for (out, reason) in [&outs[1], &outs[3]] {
        let before = entries(&dir);
        let t0 = Instant::now();
        let args = [
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let ran = mpirun(3, &args, &[], Duration::from_secs(120));
        assert_refused(&ran, t0.elapsed(), reason);
        assert_eq!(entries(&dir), before, "{}", out.display());
    }
}

#[test]
fn a_tensor_name_too_long_for_a_file_is_an_invalid_spec() {
    let dir = temp_dir("long-name");
    let out = dir.join("run");
    let ran = Distrun::new()
        .args([
            "run",
            "tests/bad/long_tensor_name.toml",
            "--out",
            out.to_str().unwrap(),
        ])
        .run();
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("its name is 300 bytes"),
        "{}",
        ran.stderr
    );
    assert!(entries(&dir).is_empty());
}

/// Starts `distrun run SPEC --out OUT -q` (under `mpiexec -n P` with `p`) whose ranks pause for
/// a minute once they have written their first shard; SIGINT is not inherited as ignored.
fn start_paused(p: Option<usize>, spec: &Path, out: &Path) -> Child {
    let binary = env!("CARGO_BIN_EXE_distrun");
    let mut cmd = match p {
        Some(p) => {
            let mut cmd = Command::new("mpiexec");
            cmd.args(["--oversubscribe", "-n", &p.to_string(), binary])
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            cmd
        }
        None => Command::new(binary),
    };
    cmd.args(["run", spec.to_str().unwrap(), "--out"])
        .arg(out)
        .arg("-q")
        .env("DISTRUN_WRITE_PAUSE_S", "60")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only resets a signal's action between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

/// The partial directory in `dir` once rank 0's shard is in it.
fn wait_for_shard(dir: &Path) -> PathBuf {
    let t0 = Instant::now();
    loop {
        let partial = entries(dir)
            .into_iter()
            .map(|n| dir.join(n))
            .find(|p| p.join("x.rank0.npy").exists());
        if let Some(partial) = partial {
            return partial;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no shard written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most 20 s) for a started run to end; its status and stderr.
fn wait_ended(mut child: Child) -> (ExitStatus, String) {
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("still running 20 s after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: signals one process this test started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

#[test]
fn sigterm_and_sigint_while_writing_leave_no_partial_directory() {
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let dir = temp_dir(&format!("signal-{sig}"));
        let spec = spec_in(&dir);
        let child = start_paused(None, &spec, &dir.join("run"));
        let pid = child.id();
        let partial = wait_for_shard(&dir);
        signal(pid, sig);
        let (status, stderr) = wait_ended(child);
        assert_eq!(status.signal(), Some(sig), "{stderr}");
        assert_eq!(entries(&dir), ["w.toml"], "{stderr}");
        let said = format!(
            "distrun: {name}: removed the unfinished run directory {}",
            partial.display()
        );
        assert!(stderr.contains(&said), "{stderr}");
    }
}

/// The pid of every rank of a job whose command line names `spec`, by rank.
fn rank_pids(spec: &Path, ranks: usize) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        let out = Command::new("pgrep")
            .args(["-f", spec.to_str().unwrap()])
            .output()
            .unwrap();
        let mut pids = vec![0; ranks];
        for pid in String::from_utf8_lossy(&out.stdout).lines() {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let rank = environ
                .split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"OMPI_COMM_WORLD_RANK="))
                .and_then(|r| std::str::from_utf8(r).ok()?.parse::<usize>().ok());
            if let Some(r) = rank.filter(|&r| r < ranks) {
                pids[r] = pid.parse().unwrap();
            }
        }
        if !pids.contains(&0) {
            return pids;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "ranks: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn signals_while_three_ranks_write_leave_no_partial_directory() {
    // SIGTERM to the owner (rank 0) or another rank, SIGKILL of another rank (the launcher
    // then stops the rest with SIGTERM), SIGTERM to the launcher (a scheduler's, or Ctrl-C's).
    let victims: [(&str, Option<usize>, i32); 4] = [
        ("term-rank0", Some(0), libc::SIGTERM),
        ("term-rank2", Some(2), libc::SIGTERM),
        ("kill-rank1", Some(1), libc::SIGKILL),
        ("term-mpiexec", None, libc::SIGTERM),
    ];
    for (label, rank, sig) in victims {
        let dir = temp_dir(label);
        let spec = spec_in(&dir);
        let launcher = start_paused(Some(3), &spec, &dir.join("run"));
        wait_for_shard(&dir);
        let pid = match rank {
            Some(r) => rank_pids(&spec, 3)[r],
            None => launcher.id(),
        };
        signal(pid, sig);
        let (status, stderr) = wait_ended(launcher);
        assert!(!status.success(), "{label}: {stderr}");
        assert_eq!(entries(&dir), ["w.toml"], "{label}: {stderr}");
    }
}

#[test]
fn what_sigkill_leaves_the_next_run_and_clean_remove() {
    let dir = temp_dir("leftover");
    let spec = spec_in(&dir);
    // A run killed while it writes leaves its partial directory.
    let child = start_paused(None, &spec, &dir.join("killed"));
    let killed = wait_for_shard(&dir);
    signal(child.id(), libc::SIGKILL);
    let (status, _) = wait_ended(child);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(killed.join("x.rank0.npy").exists());
    // Beside it: a running process's, another host's, and a name that only looks alike.
    let live = dir.join(format!(".live.partial-{}-{}-0", host(), std::process::id()));
    let elsewhere = dir.join(format!(".far.partial-elsewhere-{}-0", dead_pid()));
    let alike = dir.join(format!(".x.partial-{}-{}", host(), dead_pid()));
    for d in [&live, &elsewhere, &alike] {
        std::fs::create_dir(d).unwrap();
    }
    let ran = Distrun::new()
        .args(["run", spec.to_str().unwrap(), "--out"])
        .args([dir.join("run").to_str().unwrap(), "-q"])
        .run()
        .code(0);
    let pid = killed.to_str().unwrap().rsplit('-').nth(1).unwrap();
    let said = format!(
        "distrun: removed {}, left by process {pid} of this host, which has ended",
        killed.display()
    );
    assert_eq!(ran.stderr.trim(), said);
    assert!(!killed.exists() && dir.join("run").join("manifest.json").exists());
    assert!(live.exists() && elsewhere.exists() && alike.exists());

    // `distrun clean DIR` removes a stale one, names it, and names the running one it keeps.
    let stale = dir.join(format!(".again.partial-{}-{}-1", host(), dead_pid()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("x.rank0.npy"), "").unwrap();
    let ran = Distrun::new()
        .args(["clean", dir.to_str().unwrap()])
        .run()
        .code(0);
    assert!(!stale.exists() && live.exists());
    assert!(
        ran.stdout
            .contains(&format!("removed {}: process", stale.display())),
        "{}",
        ran.stdout
    );
    let kept = format!(
        "kept {}: process {} is running",
        live.display(),
        std::process::id()
    );
    assert!(ran.stdout.contains(&kept), "{}", ran.stdout);
    let ran = Distrun::new()
        .args(["clean", dir.join("missing").to_str().unwrap()])
        .run()
        .code(1);
    assert!(ran.stderr.contains("cannot read"), "{}", ran.stderr);
}
