//! Writing `.npy` files (format version 1.0) from a piece's raw little-endian bytes.

use super::checksum::Hasher;
use super::rundir::RunDir;
use crate::spec::model::Checksum;
use crate::spec::tensor::{DType, Layout};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// `.npy` magic string and format version 1.0.
const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";

/// numpy aligns the data to this many bytes.
const ALIGN: usize = 64;

/// numpy's type string for a dtype; bf16 (which numpy lacks) is written as its raw `<u2` bits.
fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "<f2",
        DType::Bf16 => "<u2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::C64 => "<c8",
        DType::C128 => "<c16",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::U64 => "<u8",
    }
}

/// The magic, version, header length and header dictionary, padded so the data starts aligned:
/// the exact bytes before the data of every `.npy` distrun writes.
pub(crate) fn header(dtype: DType, shape: &[u64], layout: Layout) -> io::Result<Vec<u8>> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let fortran = if layout == Layout::F { "True" } else { "False" };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': {fortran}, 'shape': {shape}, }}",
        descr(dtype)
    );
    // Magic and version, two length bytes, the dictionary, and a closing newline.
    let unpadded = MAGIC.len() + 2 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(ALIGN) - unpadded));
    dict.push('\n');
    let len = u16::try_from(dict.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "npy header too long"))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + dict.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    Ok(out)
}

/// The header for `data`, after checking that `data` holds exactly `shape`'s elements.
fn checked_header(dtype: DType, shape: &[u64], layout: Layout, data: &[u8]) -> io::Result<Vec<u8>> {
    let expected = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok());
    if expected != Some(data.len()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} bytes do not hold a {dtype} array of shape {shape:?}",
                data.len()
            ),
        ));
    }
    header(dtype, shape, layout)
}

/// Writes a `.npy` (header, then `data` as it is) to any writer.
///
/// `data` is the array's elements in `layout` order (C: last axis fastest, F: first axis fastest;
/// `fortran_order` is set for F), little-endian; c64/c128 as (re, im) pairs, f16/bf16 as 2-byte bit
/// patterns (bf16 is written as `<u2`). Its length must be `dtype.size()` times the elements.
pub fn write_npy_to(
    w: &mut impl Write,
    dtype: DType,
    shape: &[u64],
    layout: Layout,
    data: &[u8],
) -> io::Result<()> {
    w.write_all(&checked_header(dtype, shape, layout, data)?)?;
    w.write_all(data)
}

/// Writes a `.npy` file at `path` directly (not atomically; inside a run directory use
/// [`write_npy_in`]). See [`write_npy_to`] for what `data` holds.
pub fn write_npy(
    path: &Path,
    dtype: DType,
    shape: &[u64],
    layout: Layout,
    data: &[u8],
) -> io::Result<()> {
    let mut file = File::create(path)?;
    write_npy_to(&mut file, dtype, shape, layout, data)?;
    file.sync_all()
}

/// Writes a `.npy` file named `name` into a run directory atomically (see
/// [`RunDir::write_file`]) and returns the file's checksum, computed as it is written.
pub fn write_npy_in(
    dir: &RunDir,
    name: &str,
    algorithm: Checksum,
    dtype: DType,
    shape: &[u64],
    layout: Layout,
    data: &[u8],
) -> io::Result<String> {
    let header = checked_header(dtype, shape, layout, data)?;
    dir.write_file(name, |file| {
        file.write_all(&header)?;
        file.write_all(data)
    })?;
    let mut hasher = Hasher::new(algorithm);
    hasher.update(&header);
    hasher.update(data);
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests;
