//! Distributed FFT under mpiexec at 1-4 ranks: c2c, r2c and c2r, single and double precision,
//! every norm and direction, slabs along x and y, boxes (pencils), reshape on and off, in place
//! and out of place, the transposes' batches chosen or named, at odd sizes with uneven splits,
//! each result compared with a direct DFT computed here (separably, axis by axis) from values
//! this test writes as .npy files.

mod common;
use common::*;
use distrun::spec::tensor::DType;
use std::path::Path;
use std::time::Duration;

type C = (f64, f64);

fn values(seed: u64, n: usize, complex: bool) -> Vec<C> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    (0..n)
        .map(|_| (next(), if complex { next() } else { 0.0 }))
        .collect()
}

fn dft_all(x: &[C], shape: &[usize], sign: f64) -> Vec<C> {
    (0..shape.len()).fold(x.to_vec(), |acc, a| dft_axis(&acc, shape, a, sign))
}

fn norm_scale(norm: &str, inverse: bool, n: f64) -> f64 {
    match (norm, inverse) {
        ("none", _) | ("backward", false) | ("forward", true) => 1.0,
        ("ortho", _) => 1.0 / n.sqrt(),
        _ => 1.0 / n,
    }
}

struct Case {
    kind: &'static str,
    dtype: DType,
    shape: Vec<u64>,
    /// The result's real last axis (c2r).
    out_last: Option<u64>,
    input_dist: String,
    out_dist: Option<String>,
    inverse: bool,
    norm: &'static str,
    reshape: bool,
    in_place: bool,
    /// The step's `batches` (absent: chosen).
    batches: Option<u32>,
}

fn boxes_along(shape: &[u64], axis: usize, p: usize) -> String {
    let mut lo = 0;
    let mut out = Vec::new();
    for r in 0..p {
        let hi = if r + 1 == p {
            shape[axis]
        } else {
            (lo + shape[axis] / p as u64 + (r as u64 % 2)).min(shape[axis])
        };
        let lower: Vec<u64> = (0..shape.len())
            .map(|a| if a == axis { lo } else { 0 })
            .collect();
        let upper: Vec<u64> = (0..shape.len())
            .map(|a| if a == axis { hi } else { shape[a] })
            .collect();
        out.push(format!("[{lower:?}, {upper:?}]"));
        lo = hi;
    }
    format!("{{ boxes = [{}] }}", out.join(", "))
}

/// Boxes that are exactly the slabs along `axis` over p ranks (the first n % p one larger).
fn slab_boxes(shape: &[u64], axis: usize, p: usize) -> String {
    let (n, q) = (shape[axis], p as u64);
    let boxes: Vec<String> = (0..q)
        .map(|r| {
            let lo = r * (n / q) + r.min(n % q);
            let hi = lo + n / q + u64::from(r < n % q);
            let (mut lower, mut upper) = (vec![0; shape.len()], shape.to_vec());
            (lower[axis], upper[axis]) = (lo, hi);
            format!("[{lower:?}, {upper:?}]")
        })
        .collect();
    format!("{{ boxes = [{}] }}", boxes.join(", "))
}

/// Pencils: boxes splitting axes 0 and 1 over a grid of 2 x p/2 ranks (p x 1 for odd p), rank r
/// at (r % 2, r / 2), as nvmath-python's examples lay them out: on 4 ranks no rank's box lies
/// within the x-slab of the same rank number.
fn pencils(shape: &[u64], p: usize) -> String {
    let grid = if p.is_multiple_of(2) && p > 2 {
        [2, p / 2]
    } else {
        [p, 1]
    };
    let boxes: Vec<String> = (0..p)
        .map(|r| {
            let (mut lower, mut upper) = (vec![0; shape.len()], shape.to_vec());
            for (a, (g, i)) in grid.iter().zip([r % grid[0], r / grid[0]]).enumerate() {
                lower[a] = shape[a] * i as u64 / *g as u64;
                upper[a] = shape[a] * (i + 1) as u64 / *g as u64;
            }
            format!("[{lower:?}, {upper:?}]")
        })
        .collect();
    format!("{{ boxes = [{}] }}", boxes.join(", "))
}

fn cases(p: usize) -> Vec<Case> {
    let s3 = vec![30u64, 27, 33];
    let s2 = vec![30u64, 27];
    let base = |kind, dtype, shape: &Vec<u64>, dist: &str| Case {
        kind,
        dtype,
        shape: shape.clone(),
        out_last: None,
        input_dist: dist.to_string(),
        out_dist: None,
        inverse: false,
        norm: "backward",
        reshape: true,
        in_place: false,
        batches: None,
    };
    let mut all = Vec::new();
    for (norm, inverse, reshape) in [
        ("backward", false, false),
        ("ortho", false, true),
        ("forward", true, false),
        ("none", true, true),
    ] {
        let mut c = base("c2c", DType::C128, &s3, "{ slab = 0 }");
        c.norm = norm;
        c.inverse = inverse;
        c.reshape = reshape;
        all.push(c);
    }
    all.push(base("c2c", DType::C64, &s3, "{ slab = \"y\" }"));
    let mut c = base("c2c", DType::C64, &s2, "{ slab = 1 }");
    c.in_place = true;
    all.push(c);
    for (dtype, dist, reshape) in [
        (DType::F64, "{ slab = 0 }", false),
        (DType::F32, "{ slab = 1 }", true),
    ] {
        let mut c = base("r2c", dtype, &s3, dist);
        c.reshape = reshape;
        all.push(c);
    }
    let mut c = base("r2c", DType::F64, &s2, "{ slab = 0 }");
    c.reshape = false;
    all.push(c);
    // From y-slabs batch by batch of rows and back batch by batch of planes: a
    // c2c with its inverse norm, an r2c (its first phase reads real rows).
    let mut c = base("c2c", DType::C128, &s3, "{ slab = 1 }");
    (c.inverse, c.norm) = (true, "ortho");
    all.push(c);
    all.push(base("r2c", DType::F64, &vec![30, 27, 34], "{ slab = 1 }"));
    // Back to x-slabs batch by batch of rows: r2c, and a 2-D c2c with its norm.
    all.push(base("r2c", DType::F64, &s3, "{ slab = 0 }"));
    let mut c = base("c2c", DType::C128, &s2, "{ slab = 0 }");
    c.norm = "ortho";
    all.push(c);
    // c2r to odd and even real lengths, 3-D and 2-D.
    for (shape, last, dist) in [
        (vec![30u64, 27, 17], 33u64, "{ slab = 1 }"),
        (vec![30u64, 14], 27, "{ slab = 1 }"),
        (vec![30u64, 14], 26, "{ slab = 0 }"),
    ] {
        let mut c = base("c2r", DType::C128, &shape, dist);
        c.inverse = true;
        c.out_last = Some(last);
        c.reshape = false;
        all.push(c);
    }
    // Pencils: boxes in, other boxes out.
    let mut c = base("c2c", DType::C128, &s3, &boxes_along(&s3, 1, p));
    c.out_dist = Some(boxes_along(&s3, 2, p));
    all.push(c);
    // Pencils on a 2-D grid, in and out: c2c, r2c and c2r (the slabs' pieces ordered to keep
    // what stays on each rank).
    all.push(base("c2c", DType::C128, &s3, &pencils(&s3, p)));
    let mut c = base("r2c", DType::F64, &s3, &pencils(&s3, p));
    c.out_dist = Some(pencils(&[30, 27, 17], p));
    all.push(c);
    let mut c = base(
        "c2r",
        DType::C128,
        &vec![30u64, 27, 17],
        &pencils(&[30, 27, 17], p),
    );
    (c.inverse, c.out_last) = (true, Some(33));
    c.out_dist = Some(pencils(&s3, p));
    all.push(c);
    // Boxes that are slabs: worked on as the slabs, and back to the same or other such boxes.
    all.push(base("c2c", DType::C128, &s3, &slab_boxes(&s3, 0, p)));
    let mut c = base("r2c", DType::F64, &s3, &slab_boxes(&s3, 1, p));
    c.out_dist = Some(slab_boxes(&[30, 27, 17], 1, p));
    all.push(c);
    let mut c = base("c2c", DType::C64, &s2, &slab_boxes(&s2, 1, p));
    (c.out_dist, c.reshape) = (Some(slab_boxes(&s2, 0, p)), false);
    all.push(c);
    // 2-D from x-slabs down 8192-point columns, left in y-slabs: the y-slabs land transposed
    // (x contiguous) and go to C order after the second phase. Three columns leave a rank
    // of four none; an inverse with its norm; an r2c; y-boxes out.
    let long = vec![8192u64, 3];
    let mut c = base("c2c", DType::C64, &long, "{ slab = 0 }");
    (c.inverse, c.norm, c.reshape) = (true, "ortho", false);
    all.push(c);
    let mut c = base("r2c", DType::F64, &vec![8192, 10], "{ slab = 0 }");
    c.reshape = false;
    all.push(c);
    let wide = vec![8192u64, 6];
    let mut c = base("c2c", DType::C128, &wide, "{ slab = 0 }");
    c.out_dist = Some(boxes_along(&wide, 1, p));
    all.push(c);
    // 2-D from y-slabs down 8192-point columns: each batch of a rank's columns turned to rows
    // for its FFT, and back on the way to x-slabs. Three columns leave a rank of four none;
    // seven split unevenly, back to y-slabs with the inverse's norm; a c2r.
    let mut c = base("c2c", DType::C64, &long, "{ slab = 1 }");
    c.reshape = false;
    all.push(c);
    let mut c = base("c2c", DType::C128, &vec![8192, 7], "{ slab = 1 }");
    (c.inverse, c.norm) = (true, "forward");
    all.push(c);
    let mut c = base("c2r", DType::C128, &vec![8192, 5], "{ slab = 1 }");
    (c.inverse, c.out_last, c.reshape) = (true, Some(8), false);
    all.push(c);
    // Batches the step names: one exchange after the whole phase, three (the last small on two
    // or three ranks), more than the planes a rank holds; by planes, by rows, by columns, by
    // long columns turned.
    for (kind, dtype, shape, dist, reshape, n) in [
        ("c2c", DType::C128, &s3, "{ slab = 0 }", true, 1),
        ("c2c", DType::C64, &s3, "{ slab = 1 }", true, 3),
        ("r2c", DType::F64, &s3, "{ slab = 0 }", true, 100),
        ("c2c", DType::C64, &wide, "{ slab = 0 }", false, 3),
        ("c2c", DType::C64, &wide, "{ slab = 1 }", false, 2),
    ] {
        let mut c = base(kind, dtype, shape, dist);
        (c.reshape, c.batches) = (reshape, Some(n));
        all.push(c);
    }
    // A replicated input: every rank transforms all of it; the result replicated, or moved to
    // a declared distribution.
    let replicated = "\"replicated\"";
    all.push(base("c2c", DType::C128, &s3, replicated));
    let mut c = base("c2c", DType::C64, &s2, replicated);
    c.in_place = true;
    c.inverse = true;
    all.push(c);
    let mut c = base("r2c", DType::F64, &s3, replicated);
    c.out_dist = Some("{ slab = 1 }".to_string());
    all.push(c);
    let mut c = base("c2r", DType::C128, &vec![30u64, 27, 17], replicated);
    c.inverse = true;
    c.out_last = Some(33);
    all.push(c);
    // A declared output fixes the result's distribution, whatever the input's and reshape.
    for (kind, dtype, input, out, reshape) in [
        (
            "c2c",
            DType::C128,
            "{ slab = 1 }",
            "{ slab = 0 }".to_string(),
            true,
        ),
        (
            "r2c",
            DType::F64,
            "{ slab = 0 }",
            "\"replicated\"".to_string(),
            false,
        ),
        (
            "c2c",
            DType::C64,
            &boxes_along(&s3, 0, p)[..],
            "{ slab = 2 }".to_string(),
            true,
        ),
    ] {
        let mut c = base(kind, dtype, &s3, input);
        c.out_dist = Some(out);
        c.reshape = reshape;
        all.push(c);
    }
    all
}

fn write_spec(dir: &Path, cases: &[Case]) -> std::path::PathBuf {
    let mut s = String::from("[job]\nname = \"fft\"\n");
    let mut outs = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let n: u64 = c.shape.iter().product();
        let complex = c.dtype.is_complex();
        write_values(
            dir,
            &format!("x{i}"),
            c.dtype,
            &c.shape,
            &values(i as u64 + 1, n as usize, complex),
        );
        s += &format!(
            "[tensors.x{i}]\nshape = {:?}\ndtype = \"{}\"\ndistribution = {}\ninit = {{ npy = \"x{i}.npy\" }}\n",
            c.shape,
            c.dtype.name(),
            c.input_dist
        );
        let out_dtype = match (c.kind, c.dtype) {
            ("r2c", DType::F32) => "c64",
            ("r2c", _) => "c128",
            ("c2r", DType::C64) => "f32",
            ("c2r", _) => "f64",
            (_, d) => d.name(),
        };
        let mut out_shape = c.shape.clone();
        let last = out_shape.len() - 1;
        if c.kind == "r2c" {
            out_shape[last] = out_shape[last] / 2 + 1;
        }
        if let Some(l) = c.out_last {
            out_shape[last] = l;
        }
        let out_name = if c.in_place {
            format!("x{i}")
        } else {
            format!("y{i}")
        };
        if !c.in_place && (c.out_dist.is_some() || c.out_last.is_some()) {
            s += &format!("[tensors.y{i}]\nshape = {out_shape:?}\ndtype = \"{out_dtype}\"\n");
            if let Some(d) = &c.out_dist {
                s += &format!("distribution = {d}\n");
            }
        }
        s += &format!(
            "[[steps]]\nop = \"fft\"\ninput = \"x{i}\"\nkind = \"{}\"\ndirection = \"{}\"\nnorm = \"{}\"\nreshape = {}\ncheck = true\nwarmup = 0\niterations = 1\n",
            c.kind,
            if c.inverse { "inverse" } else { "forward" },
            c.norm,
            c.reshape
        );
        if !c.in_place {
            s += &format!("out = \"y{i}\"\n");
        }
        if let Some(n) = c.batches {
            s += &format!("batches = {n}\n");
        }
        outs.push(format!("\"{out_name}\""));
    }
    s += &format!("[output]\ngather = true\ntensors = [{}]\n", outs.join(", "));
    let path = dir.join("fft.toml");
    std::fs::write(&path, s).unwrap();
    path
}

/// The direct DFT of case i, from the values the test wrote.
fn reference(i: usize, c: &Case) -> Vec<C> {
    let shape: Vec<usize> = c.shape.iter().map(|&x| x as usize).collect();
    let n_in: usize = shape.iter().product();
    let round = |v: C| {
        if c.dtype == DType::F32 || c.dtype == DType::C64 {
            (v.0 as f32 as f64, v.1 as f32 as f64)
        } else {
            v
        }
    };
    let x: Vec<C> = values(i as u64 + 1, n_in, c.dtype.is_complex())
        .into_iter()
        .map(round)
        .collect();
    let last = shape.len() - 1;
    match c.kind {
        "c2c" => {
            let s = norm_scale(c.norm, c.inverse, n_in as f64);
            dft_all(&x, &shape, if c.inverse { 1.0 } else { -1.0 })
                .into_iter()
                .map(|v| (v.0 * s, v.1 * s))
                .collect()
        }
        "r2c" => {
            let full = dft_all(&x, &shape, -1.0);
            let s = norm_scale(c.norm, false, n_in as f64);
            let m = shape[last] / 2 + 1;
            full.chunks(shape[last])
                .flat_map(|line| line[..m].to_vec())
                .map(|v| (v.0 * s, v.1 * s))
                .collect()
        }
        _ => {
            // Rebuild the full Hermitian spectrum from the half one, then invert.
            let n = c.out_last.unwrap() as usize;
            let m = shape[last];
            let mut full_shape = shape.clone();
            full_shape[last] = n;
            let total: usize = full_shape.iter().product();
            let lead: Vec<usize> = full_shape[..last].to_vec();
            let full: Vec<C> = (0..total)
                .map(|idx| {
                    let k = idx % n;
                    let head = idx / n;
                    if k < m {
                        x[head * m + k]
                    } else {
                        // conj(X[-k0, -k1, n-k])
                        let mut rest = head;
                        let mut mirror = 0;
                        let mut stride = 1;
                        for a in (0..lead.len()).rev() {
                            let ka = rest % lead[a];
                            rest /= lead[a];
                            mirror += ((lead[a] - ka) % lead[a]) * stride;
                            stride *= lead[a];
                        }
                        let t = x[mirror * m + (n - k)];
                        (t.0, -t.1)
                    }
                })
                .collect();
            let s = norm_scale(c.norm, true, total as f64);
            // The real part: what a real signal keeps (numpy's irfftn does the same).
            dft_all(&full, &full_shape, 1.0)
                .into_iter()
                .map(|v| (v.0 * s, 0.0))
                .collect()
        }
    }
}

#[test]
fn every_kind_precision_norm_and_distribution_at_1_to_4_ranks() {
    for p in 1..=4usize {
        let dir = temp_dir(&format!("fft{p}"));
        let cases = cases(p);
        let spec = write_spec(&dir, &cases);
        let out = dir.join("run");
        let m = run_ok(p, &spec, &out, &[]);
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(
                m["steps"][i]["check"]["passed"], true,
                "{p} ranks, case {i}: {}",
                m["steps"][i]
            );
            let name = if c.in_place {
                format!("x{i}")
            } else {
                format!("y{i}")
            };
            // The manifest says how many batches each batched transpose ran in: the count
            // named where every rank has that many planes, never more.
            let batches = &m["steps"][i]["batches"];
            if let (Some(n), true) = (c.batches, p > 1) {
                let counts: Vec<u64> = (batches.as_array().expect("batches recorded").iter())
                    .map(|k| k.as_u64().unwrap())
                    .collect();
                let exact = c.shape == [30, 27, 33] && n <= 6;
                assert!(
                    !counts.is_empty()
                        && (counts.iter()).all(|&k| k >= 1 && k <= n as u64)
                        && (!exact || counts.iter().all(|&k| k == n as u64)),
                    "{p} ranks, case {i}: batches {batches} for {n} named"
                );
            } else if p == 1 {
                assert!(batches.is_null(), "one rank moves nothing: {batches}");
            }
            let (_, got) = read_npy_complex(&out.join(format!("{name}.npy")));
            let want = reference(i, c);
            assert_eq!(got.len(), want.len(), "case {i}");
            let scale = want.iter().map(|v| v.0.hypot(v.1)).fold(0.0, f64::max);
            let single = matches!(c.dtype, DType::F32 | DType::C64);
            let tol = if single { 2e-5 } else { 1e-10 } * scale.max(1.0);
            for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g.0 - w.0).hypot(g.1 - w.1) <= tol,
                    "{p} ranks, case {i} ({}), element {e}: {g:?} vs {w:?}",
                    c.kind
                );
            }
        }
    }
}

#[test]
fn the_references_radix_2_transform_is_the_direct_dft() {
    // dft_axis takes radix 2 along power-of-two axes from 64 points on: against the direct
    // sum, written here, both ways.
    for n in [64usize, 256] {
        let x = values(n as u64, n, true);
        for sign in [-1.0, 1.0] {
            let fast = dft_axis(&x, &[n], 0, sign);
            for (k, f) in fast.iter().enumerate() {
                let mut s = (0.0, 0.0);
                for (j, v) in x.iter().enumerate() {
                    let ph = sign * 2.0 * std::f64::consts::PI * ((k * j) % n) as f64 / n as f64;
                    s.0 += v.0 * ph.cos() - v.1 * ph.sin();
                    s.1 += v.0 * ph.sin() + v.1 * ph.cos();
                }
                assert!(
                    (f.0 - s.0).hypot(f.1 - s.1) < 1e-9,
                    "{n}, {k}: {f:?} vs {s:?}"
                );
            }
        }
    }
}

#[test]
fn a_corrupted_transform_fails_its_check() {
    let dir = temp_dir("fftcorrupt");
    let out = dir.join("run");
    let ran = mpirun(
        2,
        &[
            "run",
            "specs/fft3d.toml",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        &[("DISTRUN_CORRUPT_STEP", "0")],
        Duration::from_secs(120),
    );
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert_eq!(manifest(&out)["steps"][0]["check"]["passed"], false);
}

#[test]
fn c128_256_cubed_transforms_are_exact_and_pass_their_checks_at_1_to_4_ranks() {
    // 2^24 points in double precision, where eps is smallest: three plane waves, whose
    // transform is three spikes of N c_j (computed here, not by any FFT), and uniform noise,
    // whose check sums 2^24 energies (the sums must not be what fails it).
    const N: usize = 256;
    let waves: [([usize; 3], C); 3] = [
        ([3, 0, 250], (0.5, -0.25)),
        ([128, 17, 1], (-1.0, 0.75)),
        ([0, 255, 64], (0.125, 0.0)),
    ];
    let phase = |k: usize, n: usize| {
        let t = 2.0 * std::f64::consts::PI * ((k * n) % N) as f64 / N as f64;
        (t.cos(), t.sin())
    };
    let mul = |a: C, b: C| (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0);
    let mut x = vec![(0.0, 0.0); N * N * N];
    for (k, c) in waves {
        for i in 0..N {
            let a = mul(c, phase(k[0], i));
            for j in 0..N {
                let b = mul(a, phase(k[1], j));
                for l in 0..N {
                    let v = mul(b, phase(k[2], l));
                    let e = &mut x[(i * N + j) * N + l];
                    e.0 += v.0;
                    e.1 += v.1;
                }
            }
        }
    }
    let dir = temp_dir("c128-256");
    write_values(&dir, "waves", DType::C128, &[256, 256, 256], &x);
    drop(x);
    let spec = dir.join("c128.toml");
    std::fs::write(
        &spec,
        "[job]\nname = \"c128\"\n\
         [tensors.w]\nshape = [256, 256, 256]\ndtype = \"c128\"\ndistribution = { slab = 0 }\ninit = { npy = \"waves.npy\" }\n\
         [tensors.u]\nshape = [256, 256, 256]\ndtype = \"c128\"\ndistribution = { slab = 1 }\ninit = { uniform = { low = -1.0, high = 1.0 } }\n\
         [[steps]]\nop = \"fft\"\ninput = \"w\"\nout = \"spectrum\"\ncheck = true\nwarmup = 0\niterations = 1\n\
         [[steps]]\nop = \"fft\"\ninput = \"u\"\ndirection = \"inverse\"\nnorm = \"ortho\"\ncheck = true\nwarmup = 0\niterations = 1\n\
         [output]\ntensors = [\"spectrum\"]\ngather = true\n",
    )
    .unwrap();
    let volume = (N * N * N) as f64;
    for p in 1..=4usize {
        let out = dir.join(format!("run{p}"));
        let m = run_ok(p, &spec, &out, &[]);
        for s in m["steps"].as_array().unwrap() {
            assert_eq!(s["check"]["passed"], true, "{p} ranks: {s}");
        }
        let (_, got) = read_npy_complex(&out.join("spectrum.npy"));
        let mut want = vec![(0.0, 0.0); got.len()];
        for (k, c) in waves {
            want[(k[0] * N + k[1]) * N + k[2]] = (c.0 * volume, c.1 * volume);
        }
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g.0 - w.0).hypot(g.1 - w.1))
            .fold(0.0, f64::max);
        assert!(worst <= 1e-12 * volume, "{p} ranks: off by {worst}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}

/// A c2r's check on a spectrum no real signal has (random values on the planes whose imaginary
/// parts numpy's irfftn ignores): it compares those planes' Hermitian parts, so a correct result
/// passes and a corrupted one fails, also where the last axis is one bin (then every bin lies
/// on such a plane).
#[test]
fn a_c2r_check_compares_the_hermitian_planes() {
    let spec = temp_spec(
        "c2r-planes",
        "[job]\nname = \"c2r-planes\"\n\
         [tensors.x]\nshape = [6, 9, 1]\ndtype = \"c128\"\ndistribution = { slab = 1 }\ninit = { uniform = { low = -1.0, high = 1.0 } }\n\
         [tensors.y]\nshape = [6, 9, 1]\ndtype = \"f64\"\n\
         [tensors.z]\nshape = [5, 4]\ndtype = \"c64\"\ndistribution = { slab = 0 }\ninit = { uniform = { low = -1.0, high = 1.0 } }\n\
         [tensors.w]\nshape = [5, 6]\ndtype = \"f32\"\n\
         [[steps]]\nop = \"fft\"\ninput = \"x\"\nout = \"y\"\nkind = \"c2r\"\ndirection = \"inverse\"\ncheck = true\nwarmup = 0\niterations = 1\n\
         [[steps]]\nop = \"fft\"\ninput = \"z\"\nout = \"w\"\nkind = \"c2r\"\ndirection = \"inverse\"\nnorm = \"ortho\"\ncheck = true\nwarmup = 0\niterations = 1\n",
    );
    for p in 1..=4usize {
        let out = spec.parent().unwrap().join(format!("run{p}"));
        let m = run_ok(p, &spec, &out, &[]);
        for s in m["steps"].as_array().unwrap() {
            assert_eq!(s["check"]["passed"], true, "{p} ranks: {s}");
        }
        for step in ["0", "1"] {
            let bad = spec.parent().unwrap().join(format!("bad{p}-{step}"));
            let args = [
                "run",
                spec.to_str().unwrap(),
                "--out",
                bad.to_str().unwrap(),
                "-q",
            ];
            let ran = mpirun(
                p,
                &args,
                &[("DISTRUN_CORRUPT_STEP", step)],
                Duration::from_secs(120),
            );
            assert_eq!(ran.code, 3, "{p} ranks, step {step}: {}", ran.stderr);
        }
    }
}
