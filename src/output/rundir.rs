//! Run directories that appear whole or not at all.
//!
//! A run directory is built under a hidden sibling name (`<parent>/.<name>.partial-<pid>-<n>`) and
//! renamed to its final name by [`RunDir::commit`]; inside it, every file is written under a
//! hidden temporary name and renamed into place ([`RunDir::write_file`]). So a reader never sees
//! a half-written file under its final name, nor a run directory without its manifest.
//!
//! With several processes (MPI ranks sharing a filesystem): rank 0 calls [`RunDir::create`] or
//! [`RunDir::create_unique`] (the owner) and sends [`RunDir::path`] to the others, who call
//! [`RunDir::open`] with it. Every rank writes its own files; after a barrier, only the owner
//! commits. A handle from [`RunDir::open`] never removes or renames the directory.

use chrono::{DateTime, Utc};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A run directory being written, under its temporary name until committed.
#[derive(Debug)]
pub struct RunDir {
    /// Where files are written until the commit.
    temp: PathBuf,
    /// The creating process's (the owner's) name for the directory: it alone commits, or
    /// removes the directory on drop. None for a handle from [`RunDir::open`], and once the
    /// commit has been tried.
    target: Option<Target>,
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
        if final_path.symlink_metadata().is_ok() {
            return Err(already_exists(&final_path));
        }
        RunDir::create_as(final_path, false)
    }

    /// As [`RunDir::create`], for a name that need not be free: where `final_path` is taken (by
    /// a run of the same job that started in the same second) the commit appends `-2`, `-3`...
    pub fn create_unique(final_path: PathBuf) -> io::Result<RunDir> {
        RunDir::create_as(final_path, true)
    }

    fn create_as(final_path: PathBuf, unique: bool) -> io::Result<RunDir> {
        let name = final_path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not name a directory", final_path.display()),
            )
        })?;
        let parent = match final_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent)?;
        // Unique to this process and this directory of it.
        static CREATED: AtomicUsize = AtomicUsize::new(0);
        let temp = parent.join(format!(
            ".{}.partial-{}-{}",
            name.to_string_lossy(),
            std::process::id(),
            CREATED.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&temp)?;
        Ok(RunDir {
            temp,
            target: Some(Target {
                path: final_path,
                unique,
            }),
        })
    }

    /// Opens a temporary directory that another process created (its [`RunDir::path`]), to write
    /// files into. The handle cannot commit, and leaves the directory on drop.
    pub fn open(temp_path: PathBuf) -> io::Result<RunDir> {
        if !fs::metadata(&temp_path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", temp_path.display()),
            ));
        }
        Ok(RunDir {
            temp: temp_path,
            target: None,
        })
    }

    /// The temporary directory files are written into (what other ranks pass to
    /// [`RunDir::open`]).
    pub fn path(&self) -> &Path {
        &self.temp
    }

    /// Writes the file `name` (a plain file name) atomically: `write` fills a hidden temporary
    /// file, which is flushed to disk and then renamed to `name`, replacing any file of that name.
    /// On failure the temporary file is removed and `name` is left as it was.
    pub fn write_file(
        &self,
        name: &str,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        check_name(name)?;
        let temp = self
            .temp
            .join(format!(".{name}.tmp-{}", std::process::id()));
        let result = File::create(&temp).and_then(|mut file| {
            write(&mut file)?;
            file.sync_all()
        });
        let result = result.and_then(|()| fs::rename(&temp, self.temp.join(name)));
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
    /// An owner's directory whose commit was not tried is removed (best effort).
    fn drop(&mut self) {
        if self.target.is_some() {
            let _ = fs::remove_dir_all(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests;
