//! Opening a run directory's files as plain files only: a relative name of plain components,
//! no symbolic link on the way, and a regular file at the end (a FIFO or a device is never read,
//! so nothing can block or stream forever).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Why a name inside a run directory was not opened.
#[derive(Debug)]
pub enum Refusal {
    /// Nothing has that name.
    Missing,
    /// Not a plain file inside the directory: an absolute name, `..`, a symbolic link, a FIFO,
    /// a device or a directory.
    NotPlain,
    /// It is there but could not be opened.
    Unreadable(io::Error),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Missing => f.write_str("missing"),
            Refusal::NotPlain => f.write_str("not a plain file inside the run directory"),
            Refusal::Unreadable(e) => write!(f, "cannot open: {e}"),
        }
    }
}

impl From<Refusal> for io::Error {
    fn from(r: Refusal) -> io::Error {
        match r {
            Refusal::Missing => io::ErrorKind::NotFound.into(),
            Refusal::NotPlain => io::Error::new(io::ErrorKind::InvalidData, r.to_string()),
            Refusal::Unreadable(e) => e,
        }
    }
}

/// `name` as a relative path of plain components joined by single slashes (no root, no empty
/// component, no `.` or `..`), if it is one.
pub fn plain_name(name: &str) -> Option<PathBuf> {
    let plain = name.split('/').all(|c| !matches!(c, "" | "." | ".."));
    plain.then(|| PathBuf::from(name))
}

/// Opens the regular file `name` inside `dir` for reading: every directory on the way must be a
/// directory and the file a regular file, none of them a symbolic link. The file is opened
/// without following links and without blocking, and checked again once open (the name may
/// have been swapped meanwhile).
pub fn open_plain(dir: &Path, name: &str) -> Result<File, Refusal> {
    let rel = plain_name(name).ok_or(Refusal::NotPlain)?;
    let mut path = dir.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        path.push(part);
        let kind = fs::symlink_metadata(&path).map_err(refusal)?.file_type();
        let fits = if i + 1 == parts.len() {
            kind.is_file()
        } else {
            kind.is_dir()
        };
        if !fits {
            return Err(Refusal::NotPlain);
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(refusal)?;
    let meta = file.metadata().map_err(Refusal::Unreadable)?;
    if !meta.file_type().is_file() {
        return Err(Refusal::NotPlain);
    }
    Ok(file)
}

fn refusal(e: io::Error) -> Refusal {
    match e.raw_os_error() {
        _ if e.kind() == io::ErrorKind::NotFound => Refusal::Missing,
        Some(libc::ELOOP | libc::ENOTDIR) => Refusal::NotPlain,
        _ => Refusal::Unreadable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::TestDir;
    use std::os::unix::fs::symlink;

    #[test]
    fn plain_names_are_relative_and_plain() {
        assert_eq!(plain_name("a.npy"), Some(PathBuf::from("a.npy")));
        assert_eq!(plain_name("p0/a.npy"), Some(PathBuf::from("p0/a.npy")));
        for bad in [
            "",
            "/etc/passwd",
            "../x.npy",
            "a/../b",
            "./a.npy",
            "a/.",
            "a//b",
            "a/",
        ] {
            assert_eq!(plain_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_regular_files_inside_open() {
        let root = TestDir::new("plain-open");
        let dir = root.path().join("run");
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("a.npy"), b"a").unwrap();
        fs::write(dir.join("sub/b.npy"), b"b").unwrap();
        fs::write(root.path().join("outside.npy"), b"o").unwrap();
        symlink("/dev/zero", dir.join("zero.npy")).unwrap();
        symlink("a.npy", dir.join("link.npy")).unwrap();
        symlink(dir.join("sub"), dir.join("linked")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(dir.join("fifo.npy"))
            .status()
            .unwrap();
        assert!(fifo.success());
        assert!(open_plain(&dir, "a.npy").is_ok());
        assert!(open_plain(&dir, "sub/b.npy").is_ok());
        assert!(matches!(
            open_plain(&dir, "gone.npy"),
            Err(Refusal::Missing)
        ));
        for name in [
            "zero.npy",
            "link.npy",
            "linked/b.npy",
            "fifo.npy",
            "sub",
            "a.npy/x",
            "../outside.npy",
        ] {
            assert!(
                matches!(open_plain(&dir, name), Err(Refusal::NotPlain)),
                "{name}"
            );
        }
        let absolute = root.path().join("outside.npy");
        assert!(matches!(
            open_plain(&dir, absolute.to_str().unwrap()),
            Err(Refusal::NotPlain)
        ));
    }
}
