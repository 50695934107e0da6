use super::*;
use crate::output::fixtures::TestDir;
use chrono::TimeZone;
use std::io::Write;

/// The names in a directory, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn write_text(run: &RunDir, name: &str, text: &str) {
    run.write_file(name, |f| f.write_all(text.as_bytes()))
        .unwrap();
}

#[test]
fn default_path_is_job_name_and_utc_timestamp() {
    let now = Utc.with_ymd_and_hms(2026, 11, 21, 17, 30, 45).unwrap();
    assert_eq!(
        default_path(Path::new("runs"), "gemm-slab", now),
        PathBuf::from("runs/gemm-slab-20261121T173045Z")
    );
}

#[test]
fn files_appear_under_final_names_only_after_commit() {
    let root = TestDir::new("rundir-commit");
    let final_path = root.path().join("out").join("job-1");
    let run = RunDir::create(final_path.clone()).unwrap();
    assert!(!final_path.exists());
    assert!(run.path().starts_with(root.path().join("out")));
    write_text(&run, "a.txt", "hello");
    write_text(&run, "b.txt", "world");
    // Only the final names inside, no temporary files left; nothing visible at the final path.
    assert_eq!(entries(run.path()), ["a.txt", "b.txt"]);
    assert!(!final_path.exists());
    let temp = run.path().to_path_buf();
    assert_eq!(run.commit().unwrap(), final_path);
    assert!(!temp.exists());
    assert_eq!(entries(&final_path), ["a.txt", "b.txt"]);
    assert_eq!(
        fs::read_to_string(final_path.join("a.txt")).unwrap(),
        "hello"
    );
    assert_eq!(entries(&root.path().join("out")), ["job-1"]);
}

#[test]
fn rewriting_a_file_replaces_it() {
    let root = TestDir::new("rundir-rewrite");
    let run = RunDir::create(root.path().join("job")).unwrap();
    write_text(&run, "a.txt", "first");
    write_text(&run, "a.txt", "second");
    assert_eq!(
        fs::read_to_string(run.path().join("a.txt")).unwrap(),
        "second"
    );
}

#[test]
fn a_failed_write_leaves_nothing() {
    let root = TestDir::new("rundir-failed-write");
    let run = RunDir::create(root.path().join("job")).unwrap();
    let err = run
        .write_file("a.txt", |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk on fire"))
        })
        .unwrap_err();
    assert_eq!(err.to_string(), "disk on fire");
    assert!(entries(run.path()).is_empty());
}

#[test]
fn names_must_be_plain_and_visible() {
    let root = TestDir::new("rundir-names");
    let run = RunDir::create(root.path().join("job")).unwrap();
    for bad in [
        "",
        ".hidden",
        "../escape",
        "a/b/file",
        "sub/.hidden",
        "/abs",
        "a\\b",
    ] {
        let err = run.write_file(bad, |_| Ok(())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
    }
    assert!(entries(run.path()).is_empty());
    // A sweep point's files go one directory down.
    write_text(&run, "p3/x.npy", "x");
    assert_eq!(
        fs::read_to_string(run.path().join("p3/x.npy")).unwrap(),
        "x"
    );
}

#[test]
fn an_uncommitted_directory_leaves_nothing() {
    let root = TestDir::new("rundir-drop");
    {
        let run = RunDir::create(root.path().join("job-b")).unwrap();
        write_text(&run, "b.txt", "y");
    }
    assert!(entries(root.path()).is_empty());
}

#[test]
fn unique_directories_of_one_name_take_suffixes() {
    // Two runs of one job in the same second, committed in turn, and one whose name appeared
    // while it ran: none fails, none replaces another.
    let root = TestDir::new("rundir-unique");
    let final_path = root.path().join("job-20261122T050000Z");
    let runs: Vec<RunDir> = (0..3)
        .map(|_| RunDir::create_unique(final_path.clone()).unwrap())
        .collect();
    for (k, run) in runs.iter().enumerate() {
        write_text(run, "n.txt", &k.to_string());
    }
    let committed: Vec<PathBuf> = runs.into_iter().map(|r| r.commit().unwrap()).collect();
    assert_eq!(
        entries(root.path()),
        [
            "job-20261122T050000Z",
            "job-20261122T050000Z-2",
            "job-20261122T050000Z-3"
        ]
    );
    for (k, path) in committed.iter().enumerate() {
        assert_eq!(
            fs::read_to_string(path.join("n.txt")).unwrap(),
            k.to_string()
        );
    }
}

#[test]
fn an_existing_final_path_is_refused() {
    let root = TestDir::new("rundir-exists");
    let final_path = root.path().join("job");
    fs::create_dir(&final_path).unwrap();
    let err = RunDir::create(final_path).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(entries(root.path()), ["job"]);
}

#[test]
fn a_commit_onto_a_path_that_appeared_keeps_the_files() {
    let root = TestDir::new("rundir-commit-race");
    let final_path = root.path().join("job");
    let run = RunDir::create(final_path.clone()).unwrap();
    write_text(&run, "a.txt", "x");
    let temp = run.path().to_path_buf();
    fs::create_dir(&final_path).unwrap();
    let err = run.commit().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert!(err.to_string().contains(&temp.display().to_string()));
    assert_eq!(entries(&temp), ["a.txt"]);
    assert!(entries(&final_path).is_empty());
}

#[test]
fn other_ranks_write_into_the_owners_directory() {
    let root = TestDir::new("rundir-ranks");
    let final_path = root.path().join("job");
    let owner = RunDir::create(final_path.clone()).unwrap();
    {
        let other = RunDir::open(owner.path().to_path_buf()).unwrap();
        write_text(&other, "rank1.txt", "1");
        // Only the owner commits; a non-owner's handle leaves the directory when dropped.
        let other2 = RunDir::open(owner.path().to_path_buf()).unwrap();
        assert_eq!(
            other2.commit().unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
    }
    write_text(&owner, "rank0.txt", "0");
    owner.commit().unwrap();
    assert_eq!(entries(&final_path), ["rank0.txt", "rank1.txt"]);
}

#[test]
fn open_needs_an_existing_directory() {
    let root = TestDir::new("rundir-open");
    let missing = root.path().join(".job.partial-host-1-0");
    let err = RunDir::open(missing).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}

#[test]
fn a_place_is_a_parent_and_a_name_for_a_new_directory() {
    let place = |p: &str| check::Place::of(Path::new(p)).map(|p| (p.parent, p.name, p.path));
    let ok = |parent: &str, name: &str, path: &str| {
        Ok::<_, ()>((PathBuf::from(parent), name.into(), PathBuf::from(path)))
    };
    assert_eq!(place("run").map_err(drop), ok(".", "run", "run"));
    assert_eq!(place("a/b/run/").map_err(drop), ok("a/b", "run", "a/b/run"));
    assert_eq!(place("/run").map_err(drop), ok("/", "run", "/run"));
    for bad in ["newdir/.", "a/..", ".", "..", "/", ""] {
        let err = place(bad).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        assert!(err.to_string().contains("does not end in a name"), "{err}");
    }
}

#[test]
fn a_good_target_is_tried_and_leaves_nothing() {
    let root = TestDir::new("rundir-check-ok");
    let parent = root.path().join("new").join("nested");
    let files = ["x.rank3.npy".to_string(), "manifest.json".to_string()];
    // A missing parent is tried where it would be made, and left to the run to make.
    let target = parent.join("run");
    assert_eq!(check_target(&target, false, &files).unwrap(), parent);
    assert!(entries(root.path()).is_empty());
    fs::create_dir_all(&parent).unwrap();
    assert_eq!(check_target(&target, false, &files).unwrap(), parent);
    assert!(entries(&parent).is_empty());
    // A default (unique) name may be taken: the commit takes a suffix.
    fs::create_dir(&target).unwrap();
    check_target(&target, true, &files).unwrap();
    assert_eq!(entries(&parent), ["run"]);
}

#[test]
fn bad_targets_are_refused_with_their_reason_and_leave_nothing() {
    let root = TestDir::new("rundir-check-bad");
    let dir = root.path();
    std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("link")).unwrap();
    fs::write(dir.join("file"), "").unwrap();
    let long = "n".repeat(300);
    let cases: [(PathBuf, &str); 6] = [
        (
            dir.join("new").join("."),
            "does not end in a name for a new directory",
        ),
        (dir.join("link"), "link already exists (a symbolic link)"),
        (
            dir.join("file").join("sub").join("run"),
            "file is not a directory",
        ),
        (dir.join(&long), "the run directory's name `nnnn"),
        (dir.join("n".repeat(250)), "its temporary name `.nnnn"),
        (dir.join(&long).join("run"), "the directory name `nnnn"),
    ];
    for (target, reason) in cases {
        let err = check_target(&target, false, &[]).unwrap_err();
        assert!(
            err.to_string().contains(reason),
            "{}: {err}",
            target.display()
        );
    }
    let file = format!("{}.rank0.npy", "t".repeat(240));
    let err = check_target(&dir.join("run"), false, &[file]).unwrap_err();
    assert!(
        err.to_string().contains("the file `tttt") && err.to_string().contains("263 bytes"),
        "{err}"
    );
    assert_eq!(entries(dir), ["file", "link"]);
}

#[test]
fn a_filesystems_name_limit_is_read_from_the_nearest_existing_directory() {
    let root = TestDir::new("rundir-name-max");
    assert_eq!(
        name_max(&root.path().join("not").join("yet")),
        name_max(root.path())
    );
    assert!(name_max(root.path()) >= 14);
    assert_eq!(written_name_len("a.npy"), ".a.npy.tmp-4194304".len());
}

/// A pid that ran and has ended.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn stale_partial_directories_are_those_of_ended_processes_of_this_host() {
    let root = TestDir::new("rundir-stale");
    let dir = root.path();
    let (dead, live) = (dead_pid(), std::process::id());
    let partial = |name: &str, pid: u32| dir.join(stale::partial_name(name.as_ref(), pid, 0));
    for p in [
        partial("a", dead),
        partial("b", live),
        partial("c-20261121T173045Z", dead),
    ] {
        fs::create_dir(&p).unwrap();
        fs::write(p.join("x.rank0.npy"), "").unwrap();
    }
    // Not partial directories of this host: another host's, a file, other names.
    let other_host = format!(".a.partial-elsewhere-{dead}-0");
    fs::create_dir(dir.join(&other_host)).unwrap();
    fs::write(partial("file", dead), "").unwrap();
    for name in ["run", ".partial-x-1-0", "a.partial-1-0"] {
        fs::create_dir(dir.join(name)).unwrap();
    }
    let found = stale::partials(dir).unwrap();
    let summary: Vec<(PathBuf, bool)> = found.iter().map(|p| (p.path.clone(), p.alive)).collect();
    assert_eq!(
        summary,
        [
            (partial("a", dead), false),
            (partial("b", live), true),
            (partial("c-20261121T173045Z", dead), false),
        ]
    );
    let removed: Vec<PathBuf> = stale::remove_stale(dir)
        .unwrap()
        .into_iter()
        .map(|p| p.path)
        .collect();
    assert_eq!(
        removed,
        [partial("a", dead), partial("c-20261121T173045Z", dead)]
    );
    assert!(partial("b", live).join("x.rank0.npy").exists());
    assert!(dir.join(other_host).exists() && partial("file", dead).exists());
}
