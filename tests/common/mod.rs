//! Runs the real `distrun` binary: `Distrun::new().args([..]).run()`, then assertions on the
//! exit code and output.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A command line for the binary.
pub struct Distrun {
    args: Vec<String>,
    dir: PathBuf,
    /// Variables set (`Some`) or removed (`None`) for the run.
    env: Vec<(String, Option<String>)>,
}

/// What a run gave.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Distrun {
    pub fn new() -> Self {
        Distrun {
            args: Vec::new(),
            dir: root(),
            env: Vec::new(),
        }
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, args: I) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.dir = dir.to_path_buf();
        self
    }

    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((key.into(), Some(value.to_string())));
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.env.push((key.into(), None));
        self
    }

    pub fn run(self) -> Ran {
        self.run_with(Path::new(env!("CARGO_BIN_EXE_distrun")))
    }

    /// Runs another build of the binary.
    pub fn run_with(self, binary: &Path) -> Ran {
        let mut cmd = Command::new(binary);
        cmd.args(&self.args).current_dir(&self.dir);
        for (key, value) in &self.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        let out = cmd.output().expect("distrun runs");
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Ran {
    pub fn code(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

/// A path in a temporary directory of the test's own, removed when the test is done with it;
/// kept, to be looked at, when the test fails (drops while panicking).
pub struct Scratch {
    dir: PathBuf,
    path: PathBuf,
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for a look: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A fresh, empty temporary directory.
pub fn temp_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("distrun-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch {
        path: dir.clone(),
        dir,
    }
}

/// Writes a spec into a fresh temporary directory; derefs to the spec's path.
pub fn temp_spec(name: &str, text: &str) -> Scratch {
    let mut scratch = temp_dir(name);
    scratch.path = scratch.dir.join(format!("{name}.toml"));
    std::fs::write(&scratch.path, text).unwrap();
    scratch
}

/// Every spec under specs/.
pub fn example_specs() -> Vec<PathBuf> {
    let mut specs: Vec<PathBuf> = std::fs::read_dir(root().join("specs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    specs.sort();
    specs
}

/// Every spec under examples/ (each workload's folder), in a stable order.
pub fn workload_specs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "toml") {
                out.push(path);
            }
        }
    }
    let mut specs = Vec::new();
    walk(&root().join("examples"), &mut specs);
    specs.sort();
    specs
}

/// `mpiexec -n P distrun ARGS` with Open MPI's settings for root and oversubscription; killed
/// (and reported as code -9) after `limit`.
pub fn mpirun(p: usize, args: &[&str], env: &[(&str, &str)], limit: std::time::Duration) -> Ran {
    mpirun_with(
        Path::new(env!("CARGO_BIN_EXE_distrun")),
        p,
        args,
        env,
        limit,
    )
}

/// [`mpirun`] of another build of the binary.
pub fn mpirun_with(
    binary: &Path,
    p: usize,
    args: &[&str],
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> Ran {
    let mut cmd = Command::new("mpiexec");
    cmd.args(["--oversubscribe", "-n", &p.to_string()])
        .arg(binary)
        .args(args)
        .current_dir(root())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .expect("mpiexec runs (scripts/setup installs Open MPI)");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code().unwrap_or(-9),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The manifest of a run directory.
pub fn manifest(run: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap()
}

/// A .npy file's shape and its elements as f64 (complex: real parts), in C order.
pub fn read_npy(path: &Path) -> (Vec<u64>, Vec<f64>) {
    let (shape, values) = read_npy_complex(path);
    (shape, values.into_iter().map(|v| v.0).collect())
}

/// A .npy file's shape and its elements as (re, im) pairs, in C order (bf16 is stored as `<u2`
/// bits, which this reads as bf16).
pub fn read_npy_complex(path: &Path) -> (Vec<u64>, Vec<(f64, f64)>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().to_vec();
    assert!(
        npy.header().order() != npyz::Order::Fortran,
        "gathered files are C order"
    );
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => panic!("{other:?}"),
    };
    fn f32_at(b: &[u8]) -> f64 {
        f64::from(f32::from_le_bytes(b[..4].try_into().unwrap()))
    }
    fn f64_at(b: &[u8]) -> f64 {
        f64::from_le_bytes(b[..8].try_into().unwrap())
    }
    type Decode = fn(&[u8]) -> (f64, f64);
    let (size, decode): (usize, Decode) = match descr.as_str() {
        "<f8" => (8, |b| (f64_at(b), 0.0)),
        "<f4" => (4, |b| (f32_at(b), 0.0)),
        "<f2" => (2, |b| {
            (half::f16::from_le_bytes([b[0], b[1]]).to_f64(), 0.0)
        }),
        "<u2" => (2, |b| {
            (half::bf16::from_le_bytes([b[0], b[1]]).to_f64(), 0.0)
        }),
        "<i4" => (4, |b| {
            (f64::from(i32::from_le_bytes(b.try_into().unwrap())), 0.0)
        }),
        "<i8" => (8, |b| {
            (i64::from_le_bytes(b.try_into().unwrap()) as f64, 0.0)
        }),
        "|u1" => (1, |b| (f64::from(b[0]), 0.0)),
        "|i1" => (1, |b| (f64::from(b[0] as i8), 0.0)),
        "<c8" => (8, |b| (f32_at(b), f32_at(&b[4..]))),
        "<c16" => (16, |b| (f64_at(b), f64_at(&b[8..]))),
        other => panic!("read_npy: {other}"),
    };
    let n = shape.iter().product::<u64>() as usize;
    let data = &bytes[bytes.len() - n * size..];
    (shape, data.chunks_exact(size).map(decode).collect())
}

/// Runs a spec under mpiexec at `p` ranks into `out`, asserts it exited 0, and returns its manifest.
pub fn run_ok(p: usize, spec: &Path, out: &Path, env: &[(&str, &str)]) -> serde_json::Value {
    let ran = mpirun(
        p,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        env,
        std::time::Duration::from_secs(300),
    );
    assert_eq!(
        ran.code,
        0,
        "{} at {p} ranks:\n{}",
        spec.display(),
        ran.stderr
    );
    manifest(out)
}

/// Writes a C-order .npy of (re, im) values in `dtype` (real dtypes keep the real parts).
pub fn write_values(
    dir: &Path,
    name: &str,
    dtype: distrun::spec::tensor::DType,
    shape: &[u64],
    v: &[(f64, f64)],
) {
    use distrun::spec::tensor::DType;
    let bytes: Vec<u8> = v
        .iter()
        .flat_map(|&(re, im)| match dtype {
            DType::F64 => re.to_le_bytes().to_vec(),
            DType::F32 => (re as f32).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(re).to_le_bytes().to_vec(),
            DType::Bf16 => half::bf16::from_f64(re).to_le_bytes().to_vec(),
            DType::C64 => [(re as f32).to_le_bytes(), (im as f32).to_le_bytes()].concat(),
            DType::C128 => [re.to_le_bytes(), im.to_le_bytes()].concat(),
            other => panic!("write_values: {other}"),
        })
        .collect();
    let path = dir.join(format!("{name}.npy"));
    distrun::output::npy::write_npy(
        &path,
        dtype,
        shape,
        distrun::spec::tensor::Layout::C,
        &bytes,
    )
    .unwrap();
}

/// A DFT along one axis of a C-order array (sign -1 forward, +1 inverse), unscaled: direct,
/// or by [`radix2`] along an axis of a power of two from 64 points on (which a test checks
/// against the direct sum).
pub fn dft_axis(x: &[(f64, f64)], shape: &[usize], axis: usize, sign: f64) -> Vec<(f64, f64)> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut out = vec![(0.0, 0.0); x.len()];
    let fast = n >= 64 && n.is_power_of_two();
    // The direct sum's twiddles, e^(sign 2 pi i m / n) for m = k j mod n.
    let twiddles: Vec<(f64, f64)> = (0..if fast { 0 } else { n })
        .map(|m| {
            let ph = sign * 2.0 * std::f64::consts::PI * m as f64 / n as f64;
            (ph.cos(), ph.sin())
        })
        .collect();
    for o in 0..outer {
        for i in 0..inner {
            if fast {
                let mut line: Vec<(f64, f64)> =
                    (0..n).map(|j| x[(o * n + j) * inner + i]).collect();
                radix2(&mut line, sign);
                for (k, v) in line.into_iter().enumerate() {
                    out[(o * n + k) * inner + i] = v;
                }
                continue;
            }
            for k in 0..n {
                let mut s = (0.0, 0.0);
                for j in 0..n {
                    let (c, si) = twiddles[(k * j) % n];
                    let v = x[(o * n + j) * inner + i];
                    s.0 += v.0 * c - v.1 * si;
                    s.1 += v.0 * si + v.1 * c;
                }
                out[(o * n + k) * inner + i] = s;
            }
        }
    }
    out
}

/// An in-place iterative radix-2 DFT of a power-of-two line (sign -1 forward, +1 inverse),
/// unscaled, its twiddles computed directly for each stage.
pub fn radix2(x: &mut [(f64, f64)], sign: f64) {
    let n = x.len();
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if i < j {
            x.swap(i, j);
        }
    }
    let mut len = 2;
    while len <= n {
        for k in 0..len / 2 {
            let ph = sign * 2.0 * std::f64::consts::PI * k as f64 / len as f64;
            let w = (ph.cos(), ph.sin());
            for start in (0..n).step_by(len) {
                let (a, b) = (x[start + k], x[start + k + len / 2]);
                let t = (b.0 * w.0 - b.1 * w.1, b.0 * w.1 + b.1 * w.0);
                x[start + k] = (a.0 + t.0, a.1 + t.1);
                x[start + k + len / 2] = (a.0 - t.0, a.1 - t.1);
            }
        }
        len *= 2;
    }
}
