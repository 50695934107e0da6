use super::*;
use crate::output::checksum::hash_file;
use crate::output::fixtures::TestDir;
use crate::spec::npy::read_header;
use std::process::Command;

/// One file to write and what numpy must find in it.
struct Case {
    name: &'static str,
    dtype: DType,
    shape: Vec<u64>,
    layout: Layout,
    data: Vec<u8>,
    /// numpy's `dtype.str`.
    descr: &'static str,
    /// The elements in C order, complex ones as [re, im].
    c_order: serde_json::Value,
}

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

fn cases() -> Vec<Case> {
    // F layout, shape [2, 3]: the k-th stored element is at (k % 2, k / 2).
    let f_c_order: Vec<f64> = (0..2)
        .flat_map(|i| (0..3).map(move |j| (i + 2 * j) as f64))
        .collect();
    let c64: Vec<f32> = (0..24).flat_map(|k| [k as f32, -(k as f32)]).collect();
    let c64_c_order: Vec<[f32; 2]> = (0..24).map(|k| [k as f32, -(k as f32)]).collect();
    let bf16: Vec<u16> = vec![0x3f80, 0x4000, 0xbf80, 0x7f80, 0x0001];
    vec![
        Case {
            name: "c2d.npy",
            dtype: DType::F32,
            shape: vec![2, 3],
            layout: Layout::C,
            data: f32_bytes((0..6).map(|k| k as f32)),
            descr: "<f4",
            c_order: serde_json::json!([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
        },
        Case {
            name: "f2d.npy",
            dtype: DType::F64,
            shape: vec![2, 3],
            layout: Layout::F,
            data: (0..6).flat_map(|k| (k as f64).to_le_bytes()).collect(),
            descr: "<f8",
            c_order: serde_json::json!(f_c_order),
        },
        Case {
            name: "c64.npy",
            dtype: DType::C64,
            shape: vec![2, 3, 4],
            layout: Layout::C,
            data: f32_bytes(c64),
            descr: "<c8",
            c_order: serde_json::json!(c64_c_order),
        },
        Case {
            name: "bf16.npy",
            dtype: DType::Bf16,
            shape: vec![5],
            layout: Layout::C,
            data: bf16.iter().flat_map(|b| b.to_le_bytes()).collect(),
            descr: "<u2",
            c_order: serde_json::json!(bf16),
        },
        Case {
            name: "i8.npy",
            dtype: DType::I8,
            shape: vec![3],
            layout: Layout::C,
            data: vec![0xff, 0x00, 0x7f],
            descr: "|i1",
            c_order: serde_json::json!([-1, 0, 127]),
        },
        Case {
            name: "scalar.npy",
            dtype: DType::U64,
            shape: vec![],
            layout: Layout::C,
            data: 42u64.to_le_bytes().to_vec(),
            descr: "<u8",
            c_order: serde_json::json!([42]),
        },
    ]
}

fn write_cases(dir: &Path) -> Vec<Case> {
    let cases = cases();
    for case in &cases {
        let path = dir.join(case.name);
        write_npy(&path, case.dtype, &case.shape, case.layout, &case.data).unwrap();
    }
    cases
}

#[test]
fn header_is_aligned_and_readable() {
    let dir = TestDir::new("npy-header");
    for case in write_cases(dir.path()) {
        let bytes = std::fs::read(dir.path().join(case.name)).unwrap();
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!(&bytes[..8], MAGIC);
        assert_eq!((10 + header_len) % ALIGN, 0, "{}", case.name);
        assert_eq!(bytes[10 + header_len - 1], b'\n');
        assert_eq!(&bytes[10 + header_len..], &case.data[..]);
        let header = read_header(&dir.path().join(case.name)).unwrap();
        assert_eq!(header.shape, case.shape, "{}", case.name);
        assert_eq!(header.descr, case.descr, "{}", case.name);
    }
}

#[test]
fn wrong_data_length_is_refused() {
    let dir = TestDir::new("npy-length");
    let path = dir.path().join("bad.npy");
    let err = write_npy(&path, DType::F32, &[2, 3], Layout::C, &[0u8; 20]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn write_in_run_dir_returns_the_file_checksum() {
    let dir = TestDir::new("npy-rundir");
    let run = RunDir::create(dir.path().join("run")).unwrap();
    for algorithm in [Checksum::Xxh3_64, Checksum::Sha256] {
        let data = f32_bytes((0..12).map(|k| k as f32 * 0.5));
        let sum = write_npy_in(
            &run,
            "x.npy",
            algorithm,
            DType::F32,
            &[3, 4],
            Layout::F,
            &data,
        )
        .unwrap();
        assert_eq!(
            sum,
            hash_file(&run.path().join("x.npy"), algorithm).unwrap()
        );
    }
}

fn numpy_available() -> bool {
    Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

const CHECK_WITH_NUMPY: &str = r#"
import json, sys
import numpy as np
for case in json.loads(sys.argv[1]):
    a = np.load(case["path"])
    assert list(a.shape) == case["shape"], (case["path"], a.shape)
    assert a.dtype.str == case["descr"], (case["path"], a.dtype.str)
    if case["fortran"]:
        assert a.flags.f_contiguous and not a.flags.c_contiguous, case["path"]
    else:
        assert a.flags.c_contiguous, case["path"]
    expected = np.array(case["c_order"])
    if np.iscomplexobj(a):
        expected = expected[:, 0] + 1j * expected[:, 1]
    assert np.array_equal(a.ravel(order="C"), expected), (case["path"], a)
print("ok")
"#;

#[test]
fn numpy_loads_shape_dtype_order_and_values() {
    if !numpy_available() {
        eprintln!("skipped: python3 with numpy is not available");
        return;
    }
    let dir = TestDir::new("npy-numpy");
    let cases = write_cases(dir.path());
    let spec: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "path": dir.path().join(c.name),
                "shape": c.shape,
                "descr": c.descr,
                "fortran": c.layout == Layout::F && c.shape.len() > 1,
                "c_order": c.c_order,
            })
        })
        .collect();
    let out = Command::new("python3")
        .args([
            "-c",
            CHECK_WITH_NUMPY,
            &serde_json::to_string(&spec).unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "numpy check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
