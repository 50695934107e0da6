//! The `npy` target: the bytes as a `.npy` file's content, checked by the function `validate`
//! and `run` read headers with. It must not panic or hang; a header it accepts must fit in the
//! file, and its messages (printed to terminals) must hold no control characters.

use super::Target;
use distrun::spec::npy::{check, descrs};
use distrun::spec::tensor::DType;

/// See the module's doc.
pub struct Npy;

impl Target for Npy {
    fn name(&self) -> &'static str {
        "npy"
    }

    fn dictionary(&self) -> &'static [&'static [u8]] {
        &[
            b"\x93NUMPY\x01\x00",
            b"\x93NUMPY\x02\x00",
            b"\x93NUMPY\x03\x00",
            b"'descr'",
            b"'fortran_order'",
            b"'shape'",
            b"'<f4'",
            b"'<c16'",
            b"'|V2'",
            b"'>f8'",
            b"'|O'",
            b"[('a', '<f4')]",
            b"(1,)",
            b"()",
            b"L",
        ]
    }

    fn run(&self, input: &[u8]) {
        let len = input.len() as u64;
        match check(&mut &input[..], len) {
            Ok(header) => {
                assert!(header.data_start <= len, "{header:?}");
                assert!(
                    header.descr.bytes().all(|c| c.is_ascii_graphic()),
                    "{header:?}"
                );
                let dtype = DType::ALL
                    .into_iter()
                    .find(|&d| descrs(d).contains(&header.descr.as_str()));
                if let Some(dtype) = dtype {
                    let needs = (header.shape.iter())
                        .fold(u128::from(dtype.size()), |n, &d| n.saturating_mul(d.into()))
                        .saturating_add(header.data_start.into());
                    assert!(needs <= len.into(), "{header:?} in {len} bytes");
                }
            }
            Err(message) => assert!(!message.contains(char::is_control), "{message:?}"),
        }
    }
}
