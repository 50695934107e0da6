//! Finding NVSHMEM's host library: `NVSHMEM_HOME`, the loader's own search, then the places pip
//! and conda install it (`known_places`), each tried in order; every place looked at is named
//! when none holds it. Also the unique-id bootstrap plugin beside the library.

use super::{ENV_HOME, ENV_UID_PLUGIN, LIBRARY, UID_PLUGIN};
use anyhow::{Result, bail, ensure};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Glob patterns (`*` within one path component; `~` for the home directory) of the directories
/// that may hold [`LIBRARY`], in the order they are tried after `NVSHMEM_HOME` and the loader.
pub fn known_places() -> Vec<String> {
    let arch = std::env::consts::ARCH;
    vec![
        // pip into a virtual environment under /opt (the GPU machines: /opt/torch/.venv).
        "/opt/*/.venv/lib/python3*/site-packages/nvidia/nvshmem/lib".into(),
        // pip as root into the system Python (Debian and Ubuntu), or another Python under /usr/local.
        "/usr/local/lib/python3*/dist-packages/nvidia/nvshmem/lib".into(),
        "/usr/local/lib/python3*/site-packages/nvidia/nvshmem/lib".into(),
        // pip --user.
        "~/.local/lib/python3*/site-packages/nvidia/nvshmem/lib".into(),
        // NVIDIA's Debian and Ubuntu packages (libnvshmem3-cuda-13: .../nvshmem/13/).
        format!("/usr/lib/{arch}-linux-gnu/nvshmem/*"),
        // NVIDIA's tarball and the HPC SDK.
        "/opt/nvidia/nvshmem*/lib".into(),
        format!("/opt/nvidia/hpc_sdk/Linux_{arch}/*/comm_libs/*/nvshmem*/lib"),
    ]
}

/// One place the library is looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// `lib/` under `NVSHMEM_HOME`.
    Home(PathBuf),
    /// The dynamic linker's own search: LD_LIBRARY_PATH, then the ld.so cache.
    Loader,
    /// A known install place: its pattern and the existing directories it matched.
    Known {
        /// The pattern, as in [`known_places`].
        pattern: String,
        /// The directories it matched, in name order (none when nothing is installed there).
        dirs: Vec<PathBuf>,
    },
}

/// What the search looks at: the environment's values, and the file system's root (`/`; tests
/// put a tree of their own there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// `NVSHMEM_HOME`, when set and not empty.
    pub nvshmem_home: Option<PathBuf>,
    /// The user's home directory, for `~`.
    pub user_home: Option<PathBuf>,
    /// Where absolute paths start.
    pub root: PathBuf,
}

impl Search {
    /// The search of this process: its environment, the real file system.
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Search {
            nvshmem_home: var(ENV_HOME),
            user_home: var("HOME"),
            root: PathBuf::from("/"),
        }
    }

    /// Every place, in the order tried.
    pub fn places(&self) -> Vec<Place> {
        let mut places = Vec::new();
        if let Some(home) = &self.nvshmem_home {
            places.push(Place::Home(home.join("lib")));
        }
        places.push(Place::Loader);
        for pattern in known_places() {
            let expanded = match pattern.strip_prefix("~/") {
                Some(rest) => match &self.user_home {
                    Some(home) => home.join(rest).to_string_lossy().into_owned(),
                    None => continue,
                },
                None => pattern.clone(),
            };
            let dirs = glob_dirs(&self.root, &expanded);
            places.push(Place::Known { pattern, dirs });
        }
        places
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if name.len() < first.len() + last.len() || !name.starts_with(first) || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The directories under `root` that the absolute `pattern` matches (`*` within components),
/// sorted by path.
fn glob_dirs(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![root.to_path_buf()];
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for dir in &found {
            if component.contains('*') {
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    if wildcard(component, &name.to_string_lossy()) && entry.path().is_dir() {
                        next.push(entry.path());
                    }
                }
            } else {
                let path = dir.join(component);
                if path.is_dir() {
                    next.push(path);
                }
            }
        }
        next.sort();
        found = next;
    }
    found
}

/// Tries `places` in order with `open` (given a full path, or [`LIBRARY`] alone for the loader)
/// and returns what the first success gave with the directory it came from (None when the loader
/// found it), or the error naming the library and every place looked.
pub fn locate<T>(
    places: &[Place],
    mut open: impl FnMut(&OsStr) -> Result<T, String>,
) -> Result<(T, Option<PathBuf>)> {
    /// Opens the library in `dir` when it is there, noting why not in `looked`.
    fn try_dir<T>(
        dir: &Path,
        what: &str,
        looked: &mut Vec<String>,
        open: &mut impl FnMut(&OsStr) -> Result<T, String>,
    ) -> Option<T> {
        let file = dir.join(LIBRARY);
        if !file.is_file() {
            looked.push(format!("{what}{}: not there", dir.display()));
            return None;
        }
        open(file.as_os_str())
            .map_err(|e| {
                looked.push(format!(
                    "{what}{}: there, but it did not load: {e}",
                    file.display()
                ))
            })
            .ok()
    }
    let mut looked = Vec::new();
    for place in places {
        match place {
            Place::Home(dir) => {
                if let Some(t) = try_dir(dir, &format!("{ENV_HOME}/lib = "), &mut looked, &mut open)
                {
                    return Ok((t, Some(dir.clone())));
                }
            }
            Place::Loader => match open(OsStr::new(LIBRARY)) {
                Ok(t) => return Ok((t, None)),
                Err(e) => looked.push(format!(
                    "the dynamic linker's search path (LD_LIBRARY_PATH, then the ld.so cache): {e}"
                )),
            },
            Place::Known { pattern, dirs } => {
                if dirs.is_empty() {
                    looked.push(format!("{pattern}: no such directory"));
                }
                for dir in dirs {
                    if let Some(t) = try_dir(dir, "", &mut looked, &mut open) {
                        return Ok((t, Some(dir.clone())));
                    }
                }
            }
        }
    }
    bail!(
        "NVSHMEM's host library {LIBRARY} was not found. Looked, in order, in:\n  - {}\n\
         Set {ENV_HOME} to the directory whose lib/ holds it (for pip's nvidia-nvshmem-cu13: \
         .../site-packages/nvidia/nvshmem), or add its directory to LD_LIBRARY_PATH.",
        looked.join("\n  - ")
    )
}

/// The bootstrap plugin NVSHMEM should load: None when the user set [`ENV_UID_PLUGIN`], else
/// [`UID_PLUGIN`] beside the library in `dir`, or an error when it is not there.
pub fn uid_plugin(dir: &Path, user_set: bool) -> Result<Option<PathBuf>> {
    if user_set {
        return Ok(None);
    }
    let plugin = dir.join(UID_PLUGIN);
    ensure!(
        plugin.is_file(),
        "{LIBRARY} was found in {}, but not its unique-id bootstrap plugin {UID_PLUGIN} beside it: \
         set {ENV_UID_PLUGIN} to the plugin's full path",
        dir.display()
    );
    Ok(Some(plugin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::TestDir;
    use std::fs;

    /// A scratch directory for one test, removed when dropped.
    struct Scratch(TestDir);

    impl Scratch {
        fn new(name: &str) -> Self {
            Scratch(TestDir::new(&format!("nvshmem-{name}")))
        }

        /// Creates `rel` (a directory) with the library in it, and the plugin when asked.
        fn install(&self, rel: &str, plugin: bool) -> PathBuf {
            let dir = self.0.path().join(rel.trim_start_matches('/'));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(LIBRARY), b"").unwrap();
            if plugin {
                fs::write(dir.join(UID_PLUGIN), b"").unwrap();
            }
            dir
        }
    }

    fn search(root: &Scratch, home: Option<&str>) -> Search {
        Search {
            nvshmem_home: home.map(|h| root.0.path().join(h.trim_start_matches('/'))),
            user_home: Some(PathBuf::from("/home/me")),
            root: root.0.path().to_path_buf(),
        }
    }

    /// Runs `locate` with an opener that succeeds for existing files (and for the loader when
    /// `loader` is set); returns the attempts and the outcome.
    fn run(places: &[Place], loader: bool) -> (Vec<String>, Result<(String, Option<PathBuf>)>) {
        let mut tried = Vec::new();
        let found = locate(places, |p| {
            let p = p.to_string_lossy().into_owned();
            tried.push(p.clone());
            if p == LIBRARY {
                return if loader {
                    Ok(p)
                } else {
                    Err("not found".into())
                };
            }
            Ok(p)
        });
        (tried, found)
    }

    #[test]
    fn wildcards_match_within_a_component() {
        assert!(wildcard("python3*", "python3.12"));
        assert!(wildcard("*", "torch"));
        assert!(wildcard("nvshmem*", "nvshmem"));
        assert!(wildcard("a*b*c", "axxbyyc"));
        assert!(!wildcard("python3*", "python2.7"));
        assert!(!wildcard("a*b*c", "acb"));
        assert!(!wildcard("lib", "lib64"));
    }

    #[test]
    fn nvshmem_home_comes_first_then_the_loader_then_known_places() {
        let root = Scratch::new("order");
        let venv = root.install(
            "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib",
            true,
        );
        let home = root.install("/custom/nvshmem/lib", true);

        // NVSHMEM_HOME wins over everything.
        let places = search(&root, Some("/custom/nvshmem")).places();
        assert_eq!(places[0], Place::Home(home.clone()));
        assert_eq!(places[1], Place::Loader);
        let (tried, found) = run(&places, true);
        assert_eq!(found.unwrap().1, Some(home.clone()));
        assert_eq!(tried, [home.join(LIBRARY).to_string_lossy()]);

        // Without it, the loader is asked before any known place.
        let places = search(&root, None).places();
        let (tried, found) = run(&places, true);
        assert_eq!(found.unwrap(), (LIBRARY.to_string(), None));
        assert_eq!(tried, [LIBRARY]);

        // A loader that finds nothing: the pip virtual environment under /opt.
        let (tried, found) = run(&places, false);
        assert_eq!(found.unwrap().1, Some(venv.clone()));
        assert_eq!(
            tried,
            [
                LIBRARY.to_string(),
                venv.join(LIBRARY).to_string_lossy().into()
            ]
        );

        // An NVSHMEM_HOME without the library falls through to the others.
        let places = search(&root, Some("/nowhere")).places();
        let (_, found) = run(&places, false);
        assert_eq!(found.unwrap().1, Some(venv));
    }

    #[test]
    fn known_places_are_tried_in_order_and_home_is_expanded() {
        let root = Scratch::new("known");
        let user = root.install(
            "/home/me/.local/lib/python3.11/site-packages/nvidia/nvshmem/lib",
            true,
        );
        let arch = std::env::consts::ARCH;
        let deb = root.install(&format!("/usr/lib/{arch}-linux-gnu/nvshmem/13"), true);
        let places = search(&root, None).places();
        let (_, found) = run(&places, false);
        assert_eq!(found.unwrap().1, Some(user.clone()));
        fs::remove_file(user.join(LIBRARY)).unwrap();
        let (_, found) = run(&places, false);
        assert_eq!(found.unwrap().1, Some(deb));
        // Without a home directory, the ~ place is left out.
        let mut s = search(&root, None);
        s.user_home = None;
        assert!(
            !s.places()
                .iter()
                .any(|p| matches!(p, Place::Known { pattern, .. } if pattern.starts_with('~')))
        );
    }

    #[test]
    fn absence_names_the_library_and_every_place_looked() {
        let root = Scratch::new("absent");
        let places = search(&root, Some("/my/nvshmem")).places();
        let (_, found) = run(&places, false);
        let text = format!("{:#}", found.unwrap_err());
        assert!(text.contains(LIBRARY), "{text}");
        assert!(text.contains("NVSHMEM_HOME/lib = "), "{text}");
        assert!(text.contains("my/nvshmem/lib: not there"), "{text}");
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
        for pattern in known_places() {
            assert!(text.contains(&pattern), "{pattern} missing from:\n{text}");
        }
        assert!(text.contains("Set NVSHMEM_HOME"), "{text}");
        // The places appear in the order they were tried.
        let at = |s: &str| text.find(s).unwrap();
        assert!(at("NVSHMEM_HOME/lib") < at("LD_LIBRARY_PATH"));
        assert!(at("LD_LIBRARY_PATH") < at("/opt/*/.venv"));
        assert!(at("/opt/*/.venv") < at("/opt/nvidia/nvshmem*"));
    }

    #[test]
    fn a_library_that_does_not_load_is_reported_and_skipped() {
        let root = Scratch::new("broken");
        let bad = root.install("/opt/nvidia/nvshmem/lib", true);
        let places = search(&root, None).places();
        let found = locate(&places, |p| -> Result<(), String> {
            Err(format!("cannot open {}", p.to_string_lossy()))
        });
        let text = format!("{:#}", found.unwrap_err());
        assert!(
            text.contains(&format!(
                "{}: there, but it did not load",
                bad.join(LIBRARY).display()
            )),
            "{text}"
        );
    }

    #[test]
    fn the_plugin_comes_from_beside_the_library_unless_the_user_chose() {
        let root = Scratch::new("plugin");
        let with = root.install("/a/lib", true);
        let without = root.install("/b/lib", false);
        assert_eq!(
            uid_plugin(&with, false).unwrap(),
            Some(with.join(UID_PLUGIN))
        );
        assert_eq!(uid_plugin(&with, true).unwrap(), None);
        assert_eq!(uid_plugin(&without, true).unwrap(), None);
        let text = uid_plugin(&without, false).unwrap_err().to_string();
        assert!(
            text.contains(UID_PLUGIN) && text.contains(ENV_UID_PLUGIN),
            "{text}"
        );
    }
}
