//! The form of a listed `.npy` (its header and size), hashing it in one pass, and the listing of
//! a run directory.

use super::global::ShardFile;
use crate::output::checksum::{Hasher, hash_reader};
use crate::output::npy::header;
use crate::spec::model::Checksum;
use crate::spec::tensor::{DType, Layout};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// What a `.npy` that distrun writes must be: its exact header and its size.
pub struct Form {
    /// The header bytes, before the data.
    pub header: Vec<u8>,
    /// Header and data, in bytes.
    pub size: u64,
    /// The array, in words.
    pub what: String,
}

impl Form {
    /// The `.npy` of a `dtype` array of `shape` stored in `layout`; None where its size does not
    /// fit in 64 bits.
    pub fn new(dtype: DType, shape: &[u64], layout: Layout) -> Option<Form> {
        let header = header(dtype, shape, layout).ok()?;
        let data = shape
            .iter()
            .try_fold(dtype.size(), |acc, &n| acc.checked_mul(n))?;
        Some(Form {
            size: data.checked_add(header.len() as u64)?,
            header,
            what: format!("a {dtype} array of shape {shape:?} in {layout} order"),
        })
    }
}

/// A file of the right form, open for reading its data.
pub struct Opened {
    file: File,
    data_start: u64,
    /// The checksum of its data (the bytes after the header), where asked for.
    pub data_checksum: Option<String>,
}

impl Opened {
    /// A file with the header `form` gives, hashed as [`hash`] did.
    pub fn new(file: File, form: &Form, hashed: Hashed) -> Opened {
        Opened {
            file,
            data_start: form.header.len() as u64,
            data_checksum: hashed.data,
        }
    }

    /// The file as a shard to read the global tensor from.
    pub fn shard(&self) -> ShardFile<'_> {
        ShardFile {
            file: &self.file,
            data_start: self.data_start,
        }
    }
}

/// A file's checksum, its first bytes, and the checksum of the rest.
pub struct Hashed {
    /// The checksum of every byte.
    pub checksum: String,
    /// The first bytes (as many as asked for, or the whole file where it is shorter).
    pub head: Vec<u8>,
    /// The checksum of the bytes after `head`, where asked for.
    pub data: Option<String>,
}

/// Hashes a file in one pass, from its start, keeping its first `head` bytes and, with `data`,
/// hashing what follows them apart too.
pub fn hash(file: &File, algorithm: Checksum, head: usize, data: bool) -> io::Result<Hashed> {
    let mut split = Split {
        inner: file,
        head: Vec::with_capacity(head),
        want: head,
        data: data.then(|| Hasher::new(algorithm)),
    };
    let checksum = hash_reader(&mut split, algorithm)?;
    Ok(Hashed {
        checksum,
        head: split.head,
        data: split.data.map(Hasher::finish),
    })
}

/// A reader that keeps the first `want` bytes it passes on and feeds the rest to `data`.
struct Split<'a> {
    inner: &'a File,
    head: Vec<u8>,
    want: usize,
    data: Option<Hasher>,
}

impl Read for Split<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let take = (self.want - self.head.len()).min(n);
        self.head.extend_from_slice(&buf[..take]);
        if let Some(h) = &mut self.data {
            h.update(&buf[take..n]);
        }
        Ok(n)
    }
}

/// Everything under `dir` (links not followed) that is neither in `listed` nor a directory on
/// the way to something in it, by name relative to `dir`, sorted.
pub fn unlisted(dir: &Path, listed: &HashSet<PathBuf>) -> io::Result<Vec<String>> {
    let on_the_way: HashSet<&Path> = listed.iter().flat_map(|p| p.ancestors().skip(1)).collect();
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for entry in fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let name = rel.join(entry.file_name());
            if listed.contains(&name) {
                continue;
            }
            if entry.file_type()?.is_dir() && on_the_way.contains(name.as_path()) {
                todo.push(name);
            } else {
                out.push(name.display().to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}
