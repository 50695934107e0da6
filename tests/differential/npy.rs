//! .npy files, version 1.0, written and read here (not by distrun's writer).

use crate::model::{Dt, E, encode};

/// A C-order .npy of `data` (elements of `dt`) with `shape`.
pub fn write(dt: Dt, shape: &[usize], data: &[E]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        dt.descr()
    );
    // Magic (6), version (2), header length (2), header padded with spaces to a multiple of 64,
    // ending in a newline.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    for &e in data {
        encode(dt, e, &mut out);
    }
    out
}

/// A .npy's descr, Fortran order flag, shape and data bytes.
pub struct Npy {
    pub descr: String,
    pub fortran: bool,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Reads a .npy file (versions 1 to 3).
pub fn read(bytes: &[u8]) -> Result<Npy, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + len]).map_err(|e| e.to_string())?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}':"))
            .ok_or(format!("no {key} in {header}"))?;
        Ok(header[at + key.len() + 3..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr[1..descr[1..].find('\'').unwrap() + 1].to_string();
    let fortran = field("fortran_order")?.starts_with("True");
    let shape_text = field("shape")?;
    let shape_text = &shape_text[1..shape_text.find(')').unwrap()];
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|e| format!("{s}: {e}")))
        .collect::<Result<Vec<usize>, String>>()?;
    Ok(Npy {
        descr,
        fortran,
        shape,
        data: bytes[start + len..].to_vec(),
    })
}
