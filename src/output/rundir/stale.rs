//! Temporary (partial) run directories by name, and those whose owner is gone.
//!
//! A partial directory is named `.<name>.partial-<host>-<pid>-<n>`: the host and pid of the
//! process that created it. A process ended by SIGKILL (or a crash) leaves its directory behind;
//! one whose host is this host and whose pid no longer runs here is stale. Directories of other
//! hosts (a filesystem shared by several machines) are never touched: whether their owner runs
//! cannot be told from here.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This host's name as partial directories carry it: letters, digits, `.`, `-` and `_` (any
/// other byte becomes `_`).
fn host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
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
    })
}

/// The partial directory name of the `n`th run directory that process `pid` of this host
/// creates for the final name `name`.
pub(super) fn partial_name(name: &OsStr, pid: u32, n: usize) -> OsString {
    let mut partial = OsString::from(".");
    partial.push(name);
    partial.push(format!(".partial-{}-{pid}-{n}", host()));
    partial
}

/// The owner's pid of a partial directory name of this host (None for any other name).
fn owner(entry: &OsStr) -> Option<u32> {
    let entry = entry.to_str()?;
    let mut parts = entry.rsplitn(3, '-');
    let (n, pid, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) || !digits(pid) {
        return None;
    }
    let name = rest.strip_suffix(&format!(".partial-{}", host()))?;
    // pid 0 and negative pids name process groups for kill(2): never a directory's owner.
    let pid: u32 = pid
        .parse()
        .ok()
        .filter(|&p| p > 0 && p <= i32::MAX as u32)?;
    (name.len() > 1 && name.starts_with('.')).then_some(pid)
}

/// Whether process `pid` runs on this host (one of another user's counts: kill(2) answers
/// EPERM).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; `owner` keeps pid positive.
    let found = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    found || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// A partial directory of this host, found in a parent directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// Its path.
    pub path: PathBuf,
    /// The process that created it.
    pub pid: u32,
    /// Whether that process still runs (then the directory is being written).
    pub alive: bool,
}

/// The partial directories of this host's processes in `dir`, sorted by name.
pub fn partials(dir: &Path) -> io::Result<Vec<Partial>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Some(pid) = owner(&entry.file_name()) else {
            continue;
        };
        if entry.file_type()?.is_dir() {
            found.push(Partial {
                path: entry.path(),
                pid,
                alive: alive(pid),
            });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// Removes a partial directory (one already gone counts as removed).
pub fn remove(partial: &Partial) -> io::Result<()> {
    match fs::remove_dir_all(&partial.path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io::Error::new(
            e.kind(),
            format!("cannot remove {}: {e}", partial.path.display()),
        )),
        _ => Ok(()),
    }
}

/// Removes the stale partial directories in `dir` (those whose process is gone) and returns
/// them; a live process's directory is kept.
pub fn remove_stale(dir: &Path) -> io::Result<Vec<Partial>> {
    let stale: Vec<Partial> = partials(dir)?.into_iter().filter(|p| !p.alive).collect();
    stale.iter().try_for_each(remove)?;
    Ok(stale)
}
