//! Opening a `.npy` file and checking its header (shape, dtype, order, where the data starts)
//! against the file's size, without reading its data: what `validate` checks and `run` reads
//! through.
//!
//! Only what `numpy.save` writes is read: the magic, format version 1.0, 2.0 or 3.0, and a header
//! of at most [`MAX_HEADER`] bytes holding a dict of exactly `descr` (a plain type string),
//! `fortran_order` and `shape`. The header is parsed in one pass, so no file makes the check
//! slow; the file must be a regular file (opened without blocking, so that a FIFO cannot hang
//! the check) and hold the bytes that its shape and dtype need.

mod header;

use super::tensor::DType;
use header::unreadable;
use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The longest header read, in bytes (numpy writes a few hundred; its own reader refuses more
/// than 10000 by default).
pub const MAX_HEADER: u32 = 1 << 16;

/// `.npy` magic string.
const MAGIC: &[u8] = b"\x93NUMPY";

/// What a .npy header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The array's shape.
    pub shape: Vec<u64>,
    /// numpy's type string, e.g. `<f4` (printable ASCII).
    pub descr: String,
    /// Whether the data is in Fortran order (first axis fastest).
    pub fortran: bool,
    /// Where the data starts: the header's length in bytes.
    pub data_start: u64,
}

/// Why a .npy file is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyError {
    /// What is wrong, naming the file.
    pub message: String,
    /// What to do about it.
    pub help: &'static str,
}

/// Opens the .npy file at `path` and checks its header (see [`check`]); the file is left at the
/// start of the data.
pub fn open(path: &Path) -> Result<(NpyHeader, File), NpyError> {
    let (mut file, len) = open_regular(path)?;
    match check(&mut file, len) {
        Ok(header) => Ok((header, file)),
        Err(what) => Err(NpyError {
            message: format!("{} {what}", path.display()),
            help: "save the array with numpy.save: one plain dtype, all of its data",
        }),
    }
}

/// Reads and checks only the header of the .npy file at `path`.
pub fn read_header(path: &Path) -> Result<NpyHeader, NpyError> {
    open(path).map(|(header, _)| header)
}

/// Reads the header of a .npy file of `len` bytes from `r` (at the file's start, left at the
/// start of the data) and checks that the file holds the data the header describes. The error
/// follows the file's name (`is truncated: needs N bytes, has M`).
pub fn check(r: &mut impl Read, len: u64) -> Result<NpyHeader, String> {
    let (text_len, data_start) = preamble(r, len)?;
    let mut text = vec![0; text_len];
    r.read_exact(&mut text)
        .map_err(|e| format!("cannot be read: {e}"))?;
    let entries = header::parse(&text)?;
    let header = NpyHeader {
        shape: entries.shape,
        descr: entries.descr,
        fortran: entries.fortran,
        data_start,
    };
    if let Some(size) = itemsize(&header.descr) {
        let needs = elements(&header.shape)
            .and_then(|n| n.checked_mul(size))
            .and_then(|n| n.checked_add(data_start))
            .ok_or_else(|| {
                format!(
                    "holds shape {:?} of {}: more bytes than 64 bits can count",
                    header.shape, header.descr
                )
            })?;
        if needs > len {
            return Err(truncated(needs, len));
        }
    }
    Ok(header)
}

/// Reads the magic, the version and the header's length from a file of `len` bytes; returns
/// the header's length and where the data starts.
fn preamble(r: &mut impl Read, len: u64) -> Result<(usize, u64), String> {
    let mut start = [0u8; 8];
    if len < 8 || r.read_exact(&mut start).is_err() || &start[..6] != MAGIC {
        return Err("is not a .npy file: it does not start with \\x93NUMPY".into());
    }
    let width = match (start[6], start[7]) {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        (major, minor) => {
            return Err(unreadable(format_args!(
                "format version {major}.{minor} (distrun reads 1.0, 2.0 and 3.0)"
            )));
        }
    };
    if len < 8 + width as u64 {
        return Err(truncated(8 + width as u64, len));
    }
    let mut bytes = [0u8; 4];
    r.read_exact(&mut bytes[..width])
        .map_err(|e| format!("cannot be read: {e}"))?;
    let text_len = u32::from_le_bytes(bytes);
    if text_len > MAX_HEADER {
        return Err(unreadable(format_args!(
            "its header is {text_len} bytes, more than the {MAX_HEADER} distrun reads"
        )));
    }
    let data_start = 8 + width as u64 + u64::from(text_len);
    if data_start > len {
        return Err(truncated(data_start, len));
    }
    Ok((text_len as usize, data_start))
}

/// The error for a file of `has` bytes that `needs` more.
fn truncated(needs: u64, has: u64) -> String {
    format!("is truncated: needs {needs} bytes, has {has}")
}

/// The number of elements of `shape`, unless more than 64 bits count.
fn elements(shape: &[u64]) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

/// The size of an element of a dtype distrun reads (`None` for other type strings, which
/// validation refuses for the tensor's dtype).
fn itemsize(descr: &str) -> Option<u64> {
    DType::ALL
        .into_iter()
        .find(|&d| descrs(d).contains(&descr))
        .map(DType::size)
}

/// Opens the regular file at `path` without blocking (a FIFO would block an open for reading
/// until a writer came); returns it with its length.
fn open_regular(path: &Path) -> Result<(File, u64), NpyError> {
    let cannot = |e: std::io::Error| NpyError {
        message: format!("cannot open {}: {e}", path.display()),
        help: "the path is relative to the spec file's directory",
    };
    regular(&std::fs::metadata(path).map_err(cannot)?, path)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(cannot)?;
    // It may have been replaced between the two looks.
    let meta = file.metadata().map_err(cannot)?;
    regular(&meta, path)?;
    Ok((file, meta.len()))
}

/// An error unless `meta` is a regular file's.
fn regular(meta: &Metadata, path: &Path) -> Result<(), NpyError> {
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    Err(NpyError {
        message: format!("{} is not a regular file but {kind}", path.display()),
        help: "name a .npy file written by numpy.save",
    })
}

/// The numpy type strings that hold a dtype (little-endian or endian-free; bf16 as raw `<u2` or
/// `<V2` bits, since numpy has no bfloat16).
pub fn descrs(dtype: DType) -> &'static [&'static str] {
    match dtype {
        DType::F16 => &["<f2"],
        DType::Bf16 => &["<u2", "|V2", "<V2"],
        DType::F32 => &["<f4"],
        DType::F64 => &["<f8"],
        DType::C64 => &["<c8"],
        DType::C128 => &["<c16"],
        DType::I8 => &["|i1", "<i1"],
        DType::U8 => &["|u1", "<u1"],
        DType::I32 => &["<i4"],
        DType::U32 => &["<u4"],
        DType::I64 => &["<i8"],
        DType::U64 => &["<u8"],
    }
}

#[cfg(test)]
mod tests;
