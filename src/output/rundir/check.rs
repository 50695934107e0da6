//! What a run directory's place must be, checked before a run: a new name in a writable
//! directory, every name short enough for the filesystem.

use super::{RunDir, UNIQUE_TRIES, already_exists, stale, temp_file_name};
use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The longest file name, in bytes, of the common Linux filesystems (ext4, xfs, btrfs, tmpfs,
/// NFS): the limit a spec's file names are checked against before any filesystem is known.
pub const NAME_MAX: usize = 255;

/// The widest pid a temporary name can hold: Linux's `PID_MAX_LIMIT` (2^22).
const WIDEST_PID: u32 = 1 << 22;

/// The most bytes of the file `name` in its hidden temporary form (`.NAME.tmp-PID`, with the
/// widest pid), which is what must fit the filesystem while the file is written.
pub fn written_name_len(name: &str) -> usize {
    temp_file_name(name, WIDEST_PID).len()
}

/// The longest file name, in bytes, that directory `dir` (or its nearest existing ancestor)
/// takes: its filesystem's `NAME_MAX`, else [`NAME_MAX`].
pub fn name_max(dir: &Path) -> usize {
    let Ok(path) = CString::new(or_dot(nearest_existing(dir)).as_os_str().as_bytes()) else {
        return NAME_MAX;
    };
    // SAFETY: a NUL-terminated path; pathconf only reads it.
    let n = unsafe { libc::pathconf(path.as_ptr(), libc::_PC_NAME_MAX) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(NAME_MAX)
}

/// A long name for a message: its start and end around an ellipsis.
pub fn abbreviate(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= 48 {
        return name.to_string();
    }
    let start: String = chars[..24].iter().collect();
    let end: String = chars[chars.len() - 16..].iter().collect();
    format!("{start}…{end}")
}

/// Where a run directory goes: its parent directory and its name.
pub(super) struct Place {
    /// The parent (`.` for a bare name).
    pub parent: PathBuf,
    /// The last component.
    pub name: OsString,
    /// The path without trailing slashes.
    pub path: PathBuf,
}

impl Place {
    /// The place `path` names; refused unless its last component is a name for a new directory
    /// (not `.`, `..` or nothing: `newdir/.` is `newdir` itself, which has no parent to rename
    /// into).
    pub fn of(path: &Path) -> io::Result<Place> {
        let bytes = path.as_os_str().as_bytes();
        let trimmed = &bytes[..bytes.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1)];
        let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(0) => (&b"/"[..], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b"."[..], trimmed),
        };
        if matches!(name, b"" | b"." | b"..") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{:?} does not end in a name for a new directory",
                    path.display().to_string()
                ),
            ));
        }
        let os = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
        Ok(Place {
            parent: PathBuf::from(os(parent)),
            name: os(name),
            path: PathBuf::from(os(trimmed)),
        })
    }
}

/// Refuses a path where anything exists, a symbolic link too (even one to nothing: the commit's
/// rename would fail on it).
pub(super) fn refuse_existing(path: &Path) -> io::Result<()> {
    match path.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists (a symbolic link)", path.display()),
        )),
        Ok(_) => Err(already_exists(path)),
        Err(_) => Ok(()),
    }
}

/// The nearest of `dir` and its ancestors (by [`Path::parent`]) that exists; the empty path (the
/// working directory) where none of a relative path does.
fn nearest_existing(dir: &Path) -> &Path {
    let mut at = dir;
    while !at.as_os_str().is_empty() && fs::symlink_metadata(at).is_err() {
        at = at.parent().unwrap_or(Path::new(""));
    }
    at
}

/// `dir`, with `.` for the empty path.
fn or_dot(dir: &Path) -> &Path {
    if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }
}

/// Refuses an existing path that is not a directory (`/dev/null` of `/dev/null/x`).
fn refuse_file(existing: &Path) -> io::Result<()> {
    match fs::metadata(or_dot(existing)) {
        Ok(m) if !m.is_dir() => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", existing.display()),
        )),
        _ => Ok(()),
    }
}

/// Refuses a name of `n` bytes beyond `limit`, saying what it is (`what`) and where (`dir`).
fn refuse_long(n: usize, what: String, limit: usize, dir: &Path) -> io::Result<()> {
    if n <= limit {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{what} is {n} bytes, more than the {limit} that a file name in {} may have",
            dir.display()
        ),
    ))
}

/// A name for a message.
fn shown(name: &OsStr) -> String {
    abbreviate(&name.to_string_lossy())
}

/// Refuses names beyond `limit` bytes: the directories to make below `existing`, the run
/// directory's (with the suffix a unique name may take), its temporary name, and every file's
/// temporary name.
fn refuse_long_names(
    place: &Place,
    existing: &Path,
    unique: bool,
    files: &[String],
    limit: usize,
) -> io::Result<()> {
    let parent = &place.parent;
    let missing = parent.strip_prefix(existing).unwrap_or(Path::new(""));
    for dir in missing.iter() {
        let what = format!("the directory name `{}`", shown(dir));
        refuse_long(dir.len(), what, limit, or_dot(existing))?;
    }
    let suffix = if unique {
        format!("-{UNIQUE_TRIES}").len()
    } else {
        0
    };
    let what = format!("the run directory's name `{}`", shown(&place.name));
    refuse_long(place.name.len() + suffix, what, limit, parent)?;
    let partial = stale::partial_name(&place.name, WIDEST_PID, 99);
    let what = format!("its temporary name `{}`", shown(&partial));
    refuse_long(partial.len(), what, limit, parent)?;
    for file in files {
        let what = format!(
            "the file `{}`, while written (`.NAME.tmp-PID`),",
            abbreviate(file)
        );
        refuse_long(written_name_len(file), what, limit, parent)?;
    }
    Ok(())
}

/// Checks, before a run, that its directory can be made at `final_path` and hold `files` (the
/// names of the files the run writes into it), leaving nothing behind: the last component must
/// name a new directory; nothing may exist at `final_path` (a dangling symbolic link counts)
/// unless `unique` (the commit then takes a free suffix); every name must fit the filesystem; and
/// the first directory the run will make (its temporary directory, or where the parent is
/// missing, the first missing one's temporary twin) is made in the nearest existing directory
/// and removed. Returns the parent directory (which may not exist yet: the run makes it).
pub fn check_target(final_path: &Path, unique: bool, files: &[String]) -> io::Result<PathBuf> {
    let place = Place::of(final_path)?;
    if !unique {
        refuse_existing(&place.path)?;
    }
    let existing = nearest_existing(&place.parent);
    refuse_file(existing)?;
    refuse_long_names(&place, existing, unique, files, name_max(existing))?;
    let below = place.path.strip_prefix(existing).unwrap_or(&place.path);
    let first = below.iter().next().unwrap_or(place.name.as_os_str());
    // Made and, as it is dropped, removed.
    RunDir::create_as(existing.join(first), true).map_err(|e| {
        let dir = or_dot(existing).display();
        io::Error::new(e.kind(), format!("cannot create a directory in {dir}: {e}"))
    })?;
    Ok(place.parent)
}
