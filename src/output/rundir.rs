//! Run directories that appear whole or not at all.
//!
//! A run directory is built under a hidden sibling name (`<parent>/.<name>.partial-<pid>`) and
//! renamed to its final name by [`RunDir::commit`]; inside it, every file is written under a
//! hidden temporary name and renamed into place ([`RunDir::write_file`]). So a reader never sees
//! a half-written file under its final name, nor a run directory without its manifest.
//!
//! With several processes (MPI ranks sharing a filesystem): rank 0 calls [`RunDir::create`] (the
//! owner) and sends [`RunDir::path`] to the others, who call [`RunDir::open`] with it and the
//! final path. Every rank writes its own files; after a barrier, only the owner commits (or
//! abandons). A handle from [`RunDir::open`] never removes or renames the directory.

use chrono::{DateTime, Utc};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

/// A run directory being written, under its temporary name until committed.
#[derive(Debug)]
pub struct RunDir {
    /// Where files are written until the commit.
    temp: PathBuf,
    /// The name the directory takes at the commit.
    final_path: PathBuf,
    /// True for the creating process: it alone commits, abandons, or removes on drop.
    owner: bool,
    /// True once committed or abandoned: nothing left to clean up.
    settled: bool,
}

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
    /// as the owner. Refuses when `final_path` already exists.
    pub fn create(final_path: PathBuf) -> io::Result<RunDir> {
        if final_path.symlink_metadata().is_ok() {
            return Err(already_exists(&final_path));
        }
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
        let temp = parent.join(format!(
            ".{}.partial-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        fs::create_dir(&temp)?;
        Ok(RunDir {
            temp,
            final_path,
            owner: true,
            settled: false,
        })
    }

    /// Opens a temporary directory that another process created (its [`RunDir::path`]), to write
    /// files into. The handle cannot commit or abandon, and leaves the directory on drop.
    pub fn open(temp_path: PathBuf, final_path: PathBuf) -> io::Result<RunDir> {
        if !fs::metadata(&temp_path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", temp_path.display()),
            ));
        }
        Ok(RunDir {
            temp: temp_path,
            final_path,
            owner: false,
            settled: false,
        })
    }

    /// The temporary directory files are written into (what other ranks pass to
    /// [`RunDir::open`]).
    pub fn path(&self) -> &Path {
        &self.temp
    }

    /// The directory's name once committed.
    pub fn final_path(&self) -> &Path {
        &self.final_path
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

    /// Renames the directory to its final path and returns that path. Only the owner commits, and
    /// only when every rank has finished writing; refuses when the final path exists by then.
    /// When the rename fails the directory is kept under its temporary name (not removed).
    pub fn commit(mut self) -> io::Result<PathBuf> {
        if !self.owner {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "only the process that created a run directory commits it",
            ));
        }
        // From here on the files stay on disk whatever happens: a failed commit keeps them
        // under the temporary name, which the error gives.
        self.settled = true;
        let result = if self.final_path.symlink_metadata().is_ok() {
            Err(already_exists(&self.final_path))
        } else {
            fs::rename(&self.temp, &self.final_path)
        };
        match result {
            Ok(()) => Ok(self.final_path.clone()),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot rename {} to {}: {e} (the files are kept in {})",
                    self.temp.display(),
                    self.final_path.display(),
                    self.temp.display()
                ),
            )),
        }
    }

    /// Removes the directory and everything in it (the owner), or just lets go of it (others).
    pub fn abandon(mut self) -> io::Result<()> {
        self.settled = true;
        if self.owner {
            fs::remove_dir_all(&self.temp)
        } else {
            Ok(())
        }
    }
}

impl Drop for RunDir {
    /// An owner's directory that was neither committed nor abandoned is removed (best effort).
    fn drop(&mut self) {
        if self.owner && !self.settled {
            let _ = fs::remove_dir_all(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests;
