//! Headers as numpy writes them are read; every other file is refused quickly, with a reason.

use super::*;
use crate::output::fixtures::TestDir;
use crate::output::write_npy_to;
use crate::spec::tensor::Layout;
use std::time::{Duration, Instant};

/// A .npy file of format `version`.0 with the header `dict` and `data` bytes of data.
fn npy(version: u8, dict: &str, data: usize) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    let text = format!("{dict}\n");
    if version == 1 {
        out.extend((text.len() as u16).to_le_bytes());
    } else {
        out.extend((text.len() as u32).to_le_bytes());
    }
    out.extend(text.as_bytes());
    out.resize(out.len() + data, 0);
    out
}

fn checked(bytes: &[u8]) -> Result<NpyHeader, String> {
    check(&mut &bytes[..], bytes.len() as u64)
}

/// The error for `bytes`, which must contain `needle`.
fn refused(bytes: &[u8], needle: &str) {
    let e = checked(bytes).unwrap_err();
    assert!(e.contains(needle), "{e:?} lacks {needle:?}");
}

#[test]
fn reads_what_distrun_writes_and_leaves_the_reader_at_the_data() {
    for (dtype, shape, layout) in [
        (DType::F32, vec![2, 3], Layout::C),
        (DType::C128, vec![4], Layout::F),
        (DType::Bf16, vec![0, 5], Layout::C),
        (DType::U8, vec![], Layout::C),
    ] {
        let n = shape.iter().product::<u64>() * dtype.size();
        let mut bytes = Vec::new();
        write_npy_to(&mut bytes, dtype, &shape, layout, &vec![7; n as usize]).unwrap();
        let mut r = &bytes[..];
        let h = check(&mut r, bytes.len() as u64).unwrap();
        assert_eq!(h.shape, shape);
        assert_eq!(h.descr, descrs(dtype)[0]);
        assert_eq!(h.fortran, layout == Layout::F);
        assert_eq!(h.data_start, (bytes.len() as u64) - n);
        assert_eq!(r.len() as u64, n, "the reader is at the data");
    }
}

#[test]
fn reads_versions_two_and_three_python2_longs_and_double_quotes() {
    let dict = "{\"descr\": '<i8', 'fortran_order': False, 'shape': (2L, 3L)}";
    for version in [1, 2, 3] {
        let h = checked(&npy(version, dict, 48)).unwrap();
        assert_eq!((h.shape, h.descr.as_str()), (vec![2, 3], "<i8"));
    }
}

#[test]
fn deep_nesting_is_refused_at_once() {
    // py_literal took time doubling with each level: 22 levels took over 30 s.
    let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': {deep}}}");
    let started = Instant::now();
    refused(
        &npy(2, &dict, 4),
        "is not a .npy distrun reads: its header has the key 'x'",
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn structured_dtypes_are_named() {
    let dict = "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), }";
    refused(&npy(1, dict, 16), "holds a structured dtype");
}

#[test]
fn a_short_file_is_truncated_with_its_sizes() {
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }";
    let full = npy(1, dict, 96);
    assert!(checked(&full).is_ok());
    let len = full.len();
    refused(
        &full[..len - 5],
        &format!("is truncated: needs {len} bytes, has {}", len - 5),
    );
    // The header itself cut short.
    refused(&full[..20], &format!("needs {} bytes, has 20", len - 96));
    refused(&full[..9], "needs 10 bytes, has 9");
}

#[test]
fn a_long_header_is_refused_before_it_is_read() {
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend(u32::MAX.to_le_bytes());
    refused(
        &bytes,
        "its header is 4294967295 bytes, more than the 65536",
    );
}

#[test]
fn sizes_beyond_64_bits_are_refused_and_zero_sized_arrays_are_not() {
    let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}";
    refused(&npy(1, huge, 0), "more bytes than 64 bits can count");
    let empty = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0)}";
    assert!(checked(&npy(1, empty, 0)).is_ok());
    let other = "{'descr': '>f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}";
    assert_eq!(checked(&npy(1, other, 0)).unwrap().descr, ">f4");
}

#[test]
fn malformed_headers_say_what_is_wrong() {
    let with = |entries: &str| npy(1, &format!("{{{entries}}}"), 64);
    let ok = "'descr': '<f4', 'fortran_order': False, 'shape': (4,)";
    assert!(checked(&with(ok)).is_ok());
    for (entries, needle) in [
        ("'descr': '<f4', 'shape': (4,)", "lacks 'fortran_order'"),
        (&format!("{ok}, 'shape': (4,)"), "'shape' twice"),
        (
            "'descr': '<f4', 'fortran_order': 0, 'shape': (4,)",
            "`0` where True or False",
        ),
        (
            "'descr': '<f4', 'fortran_order': False, 'shape': (-4,)",
            "dimension `-4`",
        ),
        (
            "'descr': '<f4', 'fortran_order': False, 'shape': (4.0,)",
            "dimension `4.0`",
        ),
        (
            "'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)",
            "not a whole number below 2^64",
        ),
        (
            "'descr': '<f4', 'fortran_order': False, 'shape': [4]",
            "`[` where `(`",
        ),
        (
            "'descr': '<f4', 'fortran_order': False, 'shape': (4,,)",
            "`,` where a dimension",
        ),
        (
            "'descr': '\x1b[31m', 'fortran_order': False",
            "'\\x1b[31m' is not a numpy type",
        ),
        ("'descr': '<f4", "unterminated string"),
        ("'descr': '<f4'; 'x'", "byte 0x3b at 15"),
        ("'descr' '<f4'", "'<f4' where `:`"),
    ] {
        refused(&with(entries), needle);
    }
    refused(
        &npy(1, &format!("{{{ok}}} x"), 64),
        "`x` where the end of the header",
    );
    refused(&npy(4, "{}", 0), "format version 4.0");
    refused(b"PK\x03\x04 a zip", "is not a .npy file");
}

#[test]
fn only_regular_files_are_opened_and_without_blocking() {
    let dir = TestDir::new("npy-fifo");
    let fifo = dir.path().join("fifo.npy");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let e = read_header(&fifo).unwrap_err();
    assert!(
        e.message
            .ends_with("fifo.npy is not a regular file but a FIFO"),
        "{e:?}"
    );
    let e = read_header(dir.path()).unwrap_err();
    assert!(
        e.message.ends_with("is not a regular file but a directory"),
        "{e:?}"
    );
    let e = read_header(&dir.path().join("none.npy")).unwrap_err();
    assert!(e.message.starts_with("cannot open "), "{e:?}");
}
