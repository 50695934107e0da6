//! Run directories that appear whole or not at all.
//!
//! A run directory is built under a hidden sibling name
//! (`<parent>/.<name>.partial-<host>-<pid>-<n>`, see [`stale`]) and renamed to its final name by
//! [`RunDir::commit`]; inside it, every file is written under a hidden temporary name and renamed
//! into place ([`RunDir::write_file`]). So a reader never sees a half-written file under its final
//! name, nor a run directory without its manifest.
//!
//! With several processes (MPI ranks sharing a filesystem): rank 0 calls [`RunDir::create`] or
//! [`RunDir::create_unique`] (the owner) and sends [`RunDir::path`] to the others, who call
//! [`RunDir::open`] with it. Every rank writes its own files; after a barrier, only the owner
//! commits. A handle from [`RunDir::open`] never renames the directory, nor removes it when
//! dropped.
//!
//! Before a run, [`check_target`] tries what the run will do (without leaving anything). A process
//! that ends without unwinding (a signal, a failure that ends the job) calls
//! [`remove_uncommitted`], which removes the directories of its live handles, opened ones too;
//! what SIGKILL leaves, [`stale::remove_stale`] removes later.

mod check;
pub mod stale;

pub use check::{NAME_MAX, abbreviate, check_target, name_max, written_name_len};

use chrono::{DateTime, Utc};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A run directory being written, under its temporary name until committed.
#[derive(Debug)]
pub struct RunDir {
    /// Where files are written until the commit.
    temp: PathBuf,
    /// The creating process's (the owner's) name for the directory: it alone commits, or
    /// removes the directory on drop. None for a handle from [`RunDir::open`], and once the
    /// commit has been tried.
    target: Option<Target>,
    /// Whether [`WRITING`] lists this handle's directory (until the commit is tried).
    listed: bool,
}

/// The name an owner's directory takes at the commit.
#[derive(Debug)]
struct Target {
    path: PathBuf,
    /// Where `path` is taken, the commit takes the first free of `<path>-2`, `<path>-3`...
    unique: bool,
}

/// How many names a unique commit tries (`<name>`, then `<name>-2` up to this).
const UNIQUE_TRIES: usize = 1000;

/// `<output_dir>/<job_name>-<UTC timestamp>`, e.g. `runs/gemm-20261121T173045Z`.
pub fn default_path(output_dir: &Path, job_name: &str, now: DateTime<Utc>) -> PathBuf {
    output_dir.join(format!("{job_name}-{}", now.format("%Y%m%dT%H%M%SZ")))
}

fn already_exists(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{} already exists", path.display()),
    )
}

/// The temporary directories this process writes into, by handle: those it created until it
/// commits or removes them, those of another process it opened until the handle is dropped.
static WRITING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Set by [`remove_uncommitted`]: the process is ending, and creates, opens or commits nothing
/// more.
static ENDING: AtomicBool = AtomicBool::new(false);

/// [`WRITING`], locked (also after a panic elsewhere: the list stays valid).
fn writing() -> MutexGuard<'static, Vec<PathBuf>> {
    WRITING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes one handle's directory off [`WRITING`].
fn unlist(writing: &mut Vec<PathBuf>, dir: &Path) {
    if let Some(i) = writing.iter().position(|d| d == dir) {
        writing.swap_remove(i);
    }
}

fn ending() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "the process is ending")
}

/// Removes every temporary directory this process writes into and that is not committed, for a
/// process that ends without unwinding (on SIGINT or SIGTERM, or a failure that ends every rank):
/// the job ends, so the directory will never be committed. Every rank removes it, not only its
/// owner: a launcher that stops the job may kill the owner at once when the others have ended.
/// From then on creating, opening or committing a run directory fails. Returns the directories.
pub fn remove_uncommitted() -> Vec<PathBuf> {
    let mut writing = writing();
    ENDING.store(true, Ordering::SeqCst);
    let dirs: Vec<PathBuf> = writing.drain(..).collect();
    for dir in &dirs {
        remove_tree(dir);
    }
    dirs
}

/// Removes a directory tree that other ranks may still be writing into: tries again while new
/// files appear in it.
fn remove_tree(dir: &Path) {
    for _ in 0..100 {
        match fs::remove_dir_all(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => continue,
            _ => return,
        }
    }
}

/// The hidden name under which `write_file` writes the file `name` (process `pid`'s).
fn temp_file_name(name: &str, pid: u32) -> String {
    format!(".{name}.tmp-{pid}")
}

/// Refuses names that are empty, hidden (temporary names are), or not a plain file name.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain, visible file name"),
        ));
    }
    Ok(())
}

impl RunDir {
    /// Creates the temporary directory for `final_path` (and `final_path`'s parent directories),
    /// as the owner. Refuses when `final_path` already exists (and the commit, when it has
    /// appeared since).
    pub fn create(final_path: PathBuf) -> io::Result<RunDir> {
        check::refuse_existing(&final_path)?;
        RunDir::create_as(final_path, false)
    }

    /// As [`RunDir::create`], for a name that need not be free: where `final_path` is taken (by
    /// a run of the same job that started in the same second) the commit appends `-2`, `-3`...
    pub fn create_unique(final_path: PathBuf) -> io::Result<RunDir> {
        RunDir::create_as(final_path, true)
    }

    fn create_as(final_path: PathBuf, unique: bool) -> io::Result<RunDir> {
        let place = check::Place::of(&final_path)?;
        fs::create_dir_all(&place.parent)?;
        // Unique to this process and this directory of it.
        static CREATED: AtomicUsize = AtomicUsize::new(0);
        let n = CREATED.fetch_add(1, Ordering::Relaxed);
        let temp = place
            .parent
            .join(stale::partial_name(&place.name, std::process::id(), n));
        // Created and listed at once, so that an ending process finds every one.
        let mut writing = writing();
        if ENDING.load(Ordering::SeqCst) {
            return Err(ending());
        }
        fs::create_dir(&temp)?;
        writing.push(temp.clone());
        Ok(RunDir {
            temp,
            target: Some(Target {
                path: place.path,
                unique,
            }),
            listed: true,
        })
    }

    /// Opens a temporary directory that another process created (its [`RunDir::path`]), to write
    /// files into. The handle cannot commit, and leaves the directory on drop (only
    /// [`remove_uncommitted`] removes it).
    pub fn open(temp_path: PathBuf) -> io::Result<RunDir> {
        if !fs::metadata(&temp_path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", temp_path.display()),
            ));
        }
        let mut writing = writing();
        if ENDING.load(Ordering::SeqCst) {
            return Err(ending());
        }
        writing.push(temp_path.clone());
        Ok(RunDir {
            temp: temp_path,
            target: None,
            listed: true,
        })
    }

    /// The temporary directory files are written into (what other ranks pass to
    /// [`RunDir::open`]).
    pub fn path(&self) -> &Path {
        &self.temp
    }

    /// Writes the file `name` (a plain file name, or one in a subdirectory: `p3/x.rank0.npy`)
    /// atomically: `write` fills a hidden temporary
    /// file, which is flushed to disk and then renamed to `name`, replacing any file of that name.
    /// On failure the temporary file is removed and `name` is left as it was.
    pub fn write_file(
        &self,
        name: &str,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        // A sweep point's files go in a directory of their own: `p3/x.rank0.npy`.
        let (sub, file) = match name.rsplit_once('/') {
            Some((sub, file)) => (Some(sub), file),
            None => (None, name),
        };
        check_name(file)?;
        let dir = match sub {
            None => self.temp.clone(),
            Some(sub) => {
                check_name(sub)?;
                let dir = self.temp.join(sub);
                fs::create_dir_all(&dir)?;
                dir
            }
        };
        let temp = dir.join(temp_file_name(file, std::process::id()));
        let result = File::create(&temp).and_then(|mut file| {
            write(&mut file)?;
            file.sync_all()
        });
        let result = result.and_then(|()| fs::rename(&temp, dir.join(file)));
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result
    }

    /// Renames the directory to its final path (for a unique directory, the first free of the
    /// path, `-2`, `-3`...) and returns that path. Only the owner commits, and only when every
    /// rank has finished writing. When the rename fails the directory is kept under its
    /// temporary name (not removed).
    pub fn commit(mut self) -> io::Result<PathBuf> {
        // From here on the files stay on disk whatever happens: a failed commit keeps them
        // under the temporary name, which the error gives.
        let Some(target) = self.target.take() else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "only the process that created a run directory commits it",
            ));
        };
        // Committed or kept, the directory is no longer this process's to remove.
        let mut writing = writing();
        if ENDING.load(Ordering::SeqCst) {
            return Err(ending());
        }
        unlist(&mut writing, &self.temp);
        self.listed = false;
        let tries = if target.unique { UNIQUE_TRIES } else { 1 };
        for k in 1..=tries {
            let path = match k {
                1 => target.path.clone(),
                _ => with_suffix(&target.path, k),
            };
            // A run directory is never empty, so a rename onto one that appeared meanwhile
            // fails too (only an empty directory would be replaced).
            let result = match path.symlink_metadata() {
                Ok(_) => Err(already_exists(&path)),
                Err(_) => fs::rename(&self.temp, &path),
            };
            match result {
                Ok(()) => return Ok(path),
                Err(e) if taken(&e) && k < tries => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "cannot rename {} to {}: {e} (the files are kept in {})",
                            self.temp.display(),
                            path.display(),
                            self.temp.display()
                        ),
                    ));
                }
            }
        }
        unreachable!("the last try returns")
    }
}

/// `path` with `-k` appended to its last component.
fn with_suffix(path: &Path, k: usize) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!("-{k}"));
    path.with_file_name(name)
}

/// Whether a rename failed because its target exists.
fn taken(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::AlreadyExists || e.kind() == io::ErrorKind::DirectoryNotEmpty
}

impl Drop for RunDir {
    /// An owner's directory whose commit was not tried is removed (best effort); the handle's
    /// directory leaves [`WRITING`].
    fn drop(&mut self) {
        let mut writing = writing();
        if self.target.is_some() {
            let _ = fs::remove_dir_all(&self.temp);
        }
        if self.listed {
            unlist(&mut writing, &self.temp);
        }
    }
}

#[cfg(test)]
mod tests;
