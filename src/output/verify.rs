//! `distrun verify RUN_DIR`: checks a run directory without trusting any of it.
//!
//! Every file the manifest names must be a plain file inside the directory (never a link, a
//! FIFO or a device), with the header and size of the array its tensor record describes and
//! with its recorded checksum. Each tensor's checksum must be the one its shards give (and its
//! gathered file's data); the shards must be one per rank. The spec must be its recorded text as
//! run, with that text's hash; every tensor the spec writes must be listed; and every file in the
//! directory must be listed. Files are streamed, never read whole.

mod files;
mod global;
mod spec;

use super::manifest::{MANIFEST_FILE, TensorRecord, read_manifest};
use super::plain::{Refusal, open_plain, plain_name};
use crate::dist::{Placement, TensorState};
use crate::spec::model::Checksum;
use crate::spec::tensor::Distribution;
use files::{Form, Opened};
use global::{ShardFile, global_checksum};
use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Something a run directory does not bear out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A file's bytes do not hash to its recorded checksum.
    Mismatch {
        /// The file, as the manifest names it.
        file: String,
        /// The manifest's checksum.
        expected: String,
        /// The checksum of its bytes.
        found: String,
    },
    /// A file the manifest names is not there.
    Missing {
        /// The file, as the manifest names it.
        file: String,
    },
    /// A name that is not a plain file inside the run directory: absolute, with `..`, a
    /// symbolic link (anywhere on the way), a FIFO, a device or a directory.
    NotPlain {
        /// The name, as the manifest gives it.
        file: String,
    },
    /// A file or directory that could not be read.
    Unreadable {
        /// Its name in the run directory.
        file: String,
        /// Why.
        error: String,
    },
    /// A file that does not hold the array its tensor record describes (size or header).
    Malformed {
        /// The file.
        file: String,
        /// What is wrong.
        what: String,
    },
    /// A tensor's checksum is not that of the global tensor its files hold.
    Global {
        /// The tensor.
        tensor: String,
        /// Which files: its shards, or its gathered file's data.
        source: String,
        /// The manifest's checksum.
        expected: String,
        /// The checksum they give.
        found: String,
    },
    /// A tensor record that does not describe what distrun writes (its shape, distribution,
    /// shards or gathered file).
    Record {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        what: String,
    },
    /// The spec disagrees with its text, its hash or the rest of the manifest.
    Spec {
        /// What is wrong.
        what: String,
    },
    /// A tensor the spec writes that the manifest does not list.
    TensorMissing {
        /// The tensor.
        tensor: String,
    },
    /// A tensor the manifest lists that the spec does not write.
    TensorExtra {
        /// The tensor.
        tensor: String,
    },
    /// A file the manifest names more than once.
    Duplicate {
        /// The file.
        file: String,
    },
    /// Something in the run directory that the manifest does not list.
    Unlisted {
        /// Its name in the run directory.
        file: String,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Mismatch {
                file,
                expected,
                found,
            } => write!(f, "{file}: checksum {found}, the manifest says {expected}"),
            Finding::Missing { file } => write!(f, "{file}: missing"),
            Finding::NotPlain { file } => write!(f, "{file}: {}", Refusal::NotPlain),
            Finding::Unreadable { file, error } => write!(f, "{file}: cannot read: {error}"),
            Finding::Malformed { file, what } => write!(f, "{file}: {what}"),
            Finding::Global {
                tensor,
                source,
                expected,
                found,
            } => write!(
                f,
                "tensor {tensor}: {source} give checksum {found}, the manifest says {expected}"
            ),
            Finding::Record { tensor, what } => write!(f, "tensor {tensor}: {what}"),
            Finding::Spec { what } => write!(f, "spec: {what}"),
            Finding::TensorMissing { tensor } => {
                write!(
                    f,
                    "tensor {tensor}: written by the spec, not in the manifest"
                )
            }
            Finding::TensorExtra { tensor } => {
                write!(
                    f,
                    "tensor {tensor}: in the manifest, not written by the spec"
                )
            }
            Finding::Duplicate { file } => write!(f, "{file}: named more than once"),
            Finding::Unlisted { file } => write!(f, "{file}: not listed in the manifest"),
        }
    }
}

/// What verification found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Files found and hashed.
    pub checked: usize,
    /// Everything that does not verify, in the order found.
    pub findings: Vec<Finding>,
}

impl VerifyReport {
    /// True when nothing was found.
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Verifies a run directory (see the module's documentation). Errors only when the manifest
/// cannot be read.
pub fn verify(run_dir: &Path) -> anyhow::Result<VerifyReport> {
    let manifest = read_manifest(run_dir)?;
    let mut v = Verifier {
        dir: run_dir,
        algorithm: manifest.checksum_algorithm,
        ranks: manifest.ranks,
        report: VerifyReport::default(),
        listed: HashSet::from([PathBuf::from(MANIFEST_FILE)]),
    };
    if let Some(spec) = spec::check_spec(&manifest, &mut v.report.findings) {
        spec::check_tensors(&spec, &manifest, &mut v.report.findings);
    }
    for (prefix, tensors) in spec::written_sets(&manifest) {
        for (name, t) in tensors {
            v.tensor(&format!("{prefix}{name}"), t);
        }
    }
    v.unlisted();
    Ok(v.report)
}

/// A verification under way.
struct Verifier<'a> {
    dir: &'a Path,
    algorithm: Checksum,
    ranks: u64,
    report: VerifyReport,
    /// The files named so far (and the manifest).
    listed: HashSet<PathBuf>,
}

impl Verifier<'_> {
    fn find(&mut self, finding: Finding) {
        self.report.findings.push(finding);
    }

    /// Checks a tensor's record, its shards, the global checksum they give, and its gathered
    /// file.
    fn tensor(&mut self, name: &str, t: &TensorRecord) {
        let state = match shard_list(t, self.ranks).and_then(|()| state_of(t, self.ranks)) {
            Ok(state) => Some(state),
            Err(what) => {
                self.find(Finding::Record {
                    tensor: name.to_string(),
                    what,
                });
                None
            }
        };
        let opened: Vec<Option<Opened>> = t
            .shards
            .iter()
            .map(|shard| {
                let form = state
                    .as_ref()
                    .and_then(|s| shard_form(s, self.ranks, shard.rank));
                self.file(&shard.file, &shard.checksum, form.as_ref(), false)
            })
            .collect();
        if let Some(state) = &state
            && let Some(shards) = opened
                .iter()
                .map(|o| o.as_ref().map(Opened::shard))
                .collect::<Option<Vec<ShardFile>>>()
        {
            self.global(name, t, state, &shards);
        }
        if let Some(file) = &t.file {
            self.gathered(name, t, file, state.as_ref());
        }
    }

    /// Compares the tensor's checksum with the one its shards give.
    fn global(&mut self, name: &str, t: &TensorRecord, state: &TensorState, shards: &[ShardFile]) {
        match global_checksum(state, shards, self.algorithm) {
            Ok(found) if found == t.checksum => {}
            Ok(found) => self.find(Finding::Global {
                tensor: name.to_string(),
                source: "its shards".to_string(),
                expected: t.checksum.clone(),
                found,
            }),
            Err(e) => self.find(Finding::Unreadable {
                file: format!("the shards of {name}"),
                error: e.to_string(),
            }),
        }
    }

    /// Checks the gathered file, and its data against the tensor's checksum.
    fn gathered(&mut self, name: &str, t: &TensorRecord, file: &str, state: Option<&TensorState>) {
        let form = state.and_then(|s| gathered_form(s, self.ranks));
        let checksum = t.file_checksum.as_deref().unwrap_or("none");
        let data = self
            .file(file, checksum, form.as_ref(), true)
            .and_then(|o| o.data_checksum);
        if let Some(found) = data.filter(|found| *found != t.checksum) {
            self.find(Finding::Global {
                tensor: name.to_string(),
                source: format!("the data of {file}"),
                expected: t.checksum.clone(),
                found,
            });
        }
    }

    /// Checks the file `name`: a plain file inside the run directory, named once, of `form`
    /// where known (size, then header), with `checksum`. Returns it open when its form is known
    /// and right, with the checksum of its data where `data` asks.
    fn file(
        &mut self,
        name: &str,
        checksum: &str,
        form: Option<&Form>,
        data: bool,
    ) -> Option<Opened> {
        let file = self.open(name)?;
        self.examine(name, file, checksum, form, data)
            .unwrap_or_else(|e| {
                self.find(Finding::Unreadable {
                    file: name.to_string(),
                    error: e.to_string(),
                });
                None
            })
    }

    /// Opens a named file as a plain file inside the run directory, and counts it as listed.
    fn open(&mut self, name: &str) -> Option<File> {
        let file = name.to_string();
        let Some(plain) = plain_name(name) else {
            self.find(Finding::NotPlain { file });
            return None;
        };
        if !self.listed.insert(plain) {
            self.find(Finding::Duplicate { file: file.clone() });
        }
        open_plain(self.dir, name)
            .map_err(|refusal| {
                self.find(match refusal {
                    Refusal::Missing => Finding::Missing { file },
                    Refusal::NotPlain => Finding::NotPlain { file },
                    Refusal::Unreadable(e) => Finding::Unreadable {
                        file,
                        error: e.to_string(),
                    },
                })
            })
            .ok()
    }

    /// [`Verifier::file`] once the file is open: its size (before reading a byte), then its
    /// checksum and header in one pass.
    fn examine(
        &mut self,
        name: &str,
        file: File,
        checksum: &str,
        form: Option<&Form>,
        data: bool,
    ) -> io::Result<Option<Opened>> {
        let malformed = |what: String| Finding::Malformed {
            file: name.to_string(),
            what,
        };
        if let Some(form) = form {
            let size = file.metadata()?.len();
            if size != form.size {
                let what = format!("{size} bytes, but {} takes {}", form.what, form.size);
                self.find(malformed(what));
                return Ok(None);
            }
        }
        let head = form.map_or(0, |f| f.header.len());
        let hashed = files::hash(&file, self.algorithm, head, data)?;
        self.report.checked += 1;
        if hashed.checksum != checksum {
            self.find(Finding::Mismatch {
                file: name.to_string(),
                expected: checksum.to_string(),
                found: hashed.checksum.clone(),
            });
        }
        let Some(form) = form else {
            return Ok(None);
        };
        if hashed.head != form.header {
            self.find(malformed(format!(
                "its header is not that of {}",
                form.what
            )));
            return Ok(None);
        }
        Ok(Some(Opened::new(file, form, hashed)))
    }

    /// Names everything in the run directory that the manifest does not list.
    fn unlisted(&mut self) {
        match files::unlisted(self.dir, &self.listed) {
            Ok(names) => {
                let found = names.into_iter().map(|file| Finding::Unlisted { file });
                self.report.findings.extend(found);
            }
            Err(e) => self.find(Finding::Unreadable {
                file: ".".to_string(),
                error: e.to_string(),
            }),
        }
    }
}

/// Whether a record's shards are one per rank, in rank order.
fn shard_list(t: &TensorRecord, ranks: u64) -> Result<(), String> {
    let in_order = t.shards.iter().enumerate().all(|(i, s)| s.rank == i as u64);
    if ranks > 0 && t.shards.len() as u64 == ranks && in_order {
        return Ok(());
    }
    let got: Vec<u64> = t.shards.iter().map(|s| s.rank).collect();
    Err(format!(
        "shards of ranks {got:?}, not one for each of the {ranks} ranks in rank order"
    ))
}

/// The tensor a record describes, over `ranks` ranks, when it is one distrun could have
/// written: 1 to 8 axes, a distribution that fits them, a size that fits in 64 bits.
fn state_of(t: &TensorRecord, ranks: u64) -> Result<TensorState, String> {
    if !(1..=8).contains(&t.shape.len()) {
        return Err(format!("shape {:?} does not have 1 to 8 axes", t.shape));
    }
    let bad = |why: String| format!("distribution {}: {why}", t.distribution);
    let dist: Distribution =
        serde_json::from_value(t.distribution.clone()).map_err(|e| bad(e.to_string()))?;
    if let Distribution::BlockCyclic(c) = &dist
        && c.blocks.contains(&0)
    {
        return Err(bad("a block size of 0".to_string()));
    }
    let path = crate::spec::diag::KeyPath::root();
    if let Some(d) = crate::dist::check(&dist, &t.shape, Some(ranks), &path).first() {
        return Err(bad(d.message.clone()));
    }
    // Zero extents aside, so that no product of some of the axes overflows either.
    let rows = if dist == Distribution::Partial {
        ranks
    } else {
        1
    };
    let bytes = t
        .shape
        .iter()
        .try_fold(t.dtype.size() * rows, |acc, &n| acc.checked_mul(n.max(1)));
    if bytes.is_none() {
        return Err(format!("shape {:?} is too large", t.shape));
    }
    Ok(TensorState {
        shape: t.shape.clone(),
        dtype: t.dtype,
        layout: t.layout,
        dist,
    })
}

/// What `rank`'s shard holds: its piece, or an empty array where it holds nothing.
fn shard_form(state: &TensorState, ranks: u64, rank: u64) -> Option<Form> {
    let local = Placement::new(&state.dist, &state.shape, ranks)
        .local_shape(rank)
        .unwrap_or_else(|| vec![0; state.shape.len()]);
    Form::new(state.dtype, &local, state.layout)
}

/// What the gathered file holds: the global tensor in C order (a partial tensor's stack of
/// every rank's array).
fn gathered_form(state: &TensorState, ranks: u64) -> Option<Form> {
    let rows = (state.dist == Distribution::Partial).then_some(ranks);
    let shape: Vec<u64> = rows
        .into_iter()
        .chain(state.shape.iter().copied())
        .collect();
    Form::new(state.dtype, &shape, crate::spec::tensor::Layout::C)
}

#[cfg(test)]
mod tests;
