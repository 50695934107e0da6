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
    for bad in ["", ".hidden", "../escape", "sub/file", "a\\b"] {
        let err = run.write_file(bad, |_| Ok(())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
    }
    assert!(entries(run.path()).is_empty());
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
    let missing = root.path().join(".job.partial-1");
    let err = RunDir::open(missing).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}
