//! Reading the header of a `.npy` file (shape and dtype), without its data.

use super::tensor::DType;
use std::path::Path;

/// What a .npy header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The array's shape.
    pub shape: Vec<u64>,
    /// numpy's type string, e.g. `<f4`.
    pub descr: String,
}

/// Reads only the header of a .npy file.
pub fn read_header(path: &Path) -> Result<NpyHeader, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let npy = npyz::NpyFile::new(std::io::BufReader::new(file))
        .map_err(|e| format!("{} is not a .npy file: {e}", path.display()))?;
    Ok(NpyHeader {
        shape: npy.shape().to_vec(),
        descr: descr(&npy.dtype()),
    })
}

/// numpy's type string of a header's dtype (e.g. `<f4`; structured types as npyz prints them).
pub fn descr(dtype: &npyz::DType) -> String {
    match dtype {
        npyz::DType::Plain(t) => t.to_string(),
        other => format!("{other:?}"),
    }
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
