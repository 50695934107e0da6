//! Random valid specs over the whole space the contract describes: every op and collective,
//! every distribution as an input and as a declared output, both layouts, every dtype an op
//! takes, transposes, conjugates, alpha/beta/c, epilogs and biases, FFT kinds, norms,
//! directions, reshapes and batches, uneven and tiny shapes, chains of 1-5 steps where one
//! step's result feeds the next; with each written tensor's reference value (model.rs).

use crate::layout::{Dist, list};
use crate::model::{self, ALL, C, Dt, E, FLOATS, FftOp, MatmulOp, Value};
use indexmap::IndexMap;

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// lo..=hi.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())].clone()
    }

    /// A small axis length: mostly 1-7, sometimes up to 19, now and then up to 64 (odd and
    /// prime lengths included).
    fn len(&mut self) -> usize {
        if self.chance(0.03) {
            self.range(20, 64)
        } else if self.chance(0.15) {
            self.range(8, 19)
        } else {
            self.range(1, 7)
        }
    }
}

/// One tensor as the spec and the reference know it.
struct Tensor {
    shape: Vec<usize>,
    dt: Dt,
    /// The current distribution (None: chosen by distrun, not declared; never partial).
    dist: Option<Dist>,
    value: Value,
}

/// A generated case: the spec, the files beside it, and what each written tensor must hold.
pub struct Case {
    pub ranks: usize,
    pub spec: String,
    pub files: Vec<(String, Vec<u8>)>,
    pub expect: Vec<(String, Value)>,
    /// The ops of the steps, in order (for the coverage summary).
    pub ops: Vec<String>,
    /// Run without mpiexec (one rank only).
    pub no_launcher: bool,
}

struct Gen {
    rng: Rng,
    p: usize,
    seed: u64,
    tensors: IndexMap<String, Tensor>,
    /// `[tensors.NAME]` tables, in order.
    decls: Vec<String>,
    steps: Vec<String>,
    ops: Vec<String>,
    files: Vec<(String, Vec<u8>)>,
    next_name: usize,
}

/// A distribution's kind, for choosing.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Replicated,
    Root,
    Slab,
    Block,
    Cyclic,
    Boxes,
}

impl Gen {
    fn name(&mut self) -> String {
        self.next_name += 1;
        format!("t{}", self.next_name)
    }

    /// A random float value exactly representable in every float dtype: k/64, |k| <= 64.
    fn float(&mut self, complex: bool) -> C {
        let mut one = || (self.rng.below(129) as f64 - 64.0) / 64.0;
        (one(), if complex { one() } else { 0.0 })
    }

    fn int(&mut self, dt: Dt) -> i128 {
        let (lo, hi) = dt.int_range();
        let span = (hi - lo) as u128 + 1;
        lo + ((u128::from(self.rng.next()) << 64 | u128::from(self.rng.next())) % span) as i128
    }

    /// A random distribution of `kind` for `shape` on P ranks.
    fn dist_of(&mut self, kind: Kind, shape: &[usize]) -> Dist {
        let p = self.p;
        let nd = shape.len();
        let grid = |g: &mut Gen| -> Option<Vec<usize>> {
            if g.rng.chance(0.3) {
                return None;
            }
            // A random factorization of P over the axes.
            let mut grid = vec![1; nd];
            let mut rest = p;
            while rest > 1 {
                let f = (2..=rest).find(|f| rest.is_multiple_of(*f)).unwrap();
                let a = g.rng.below(nd);
                grid[a] *= f;
                rest /= f;
            }
            Some(grid)
        };
        match kind {
            Kind::Replicated => Dist::Replicated,
            Kind::Root => Dist::Root(self.rng.below(p)),
            Kind::Slab => Dist::Slab(self.rng.below(nd)),
            Kind::Block => Dist::Block {
                grid: grid(self),
                row_major: self.rng.chance(0.5),
            },
            Kind::Cyclic => {
                let g = grid(self);
                let actual = g
                    .clone()
                    .unwrap_or_else(|| crate::layout::dims_create(p, nd));
                let blocks = shape.iter().map(|&s| self.rng.range(1, s.max(1))).collect();
                let first = self
                    .rng
                    .chance(0.4)
                    .then(|| actual.iter().map(|&d| self.rng.below(d)).collect());
                Dist::BlockCyclic {
                    grid: g,
                    row_major: self.rng.chance(0.5),
                    blocks,
                    first,
                }
            }
            Kind::Boxes => Dist::Boxes(self.boxes(shape)),
        }
    }

    /// P boxes covering `shape` exactly once: cut along random axes, some boxes empty where the
    /// shape is smaller than the rank count.
    fn boxes(&mut self, shape: &[usize]) -> Vec<(Vec<usize>, Vec<usize>)> {
        let mut boxes = vec![(vec![0; shape.len()], shape.to_vec())];
        while boxes.len() < self.p {
            let i = self.rng.below(boxes.len());
            let (lo, hi) = boxes[i].clone();
            let a = self.rng.below(shape.len());
            let cut = lo[a] + self.rng.range(0, hi[a] - lo[a]);
            let (mut lo2, mut hi1) = (lo.clone(), hi.clone());
            hi1[a] = cut;
            lo2[a] = cut;
            boxes[i] = (lo, hi1);
            boxes.insert(i + 1, (lo2, hi));
        }
        // Any order of the boxes over the ranks.
        for i in (1..boxes.len()).rev() {
            let j = self.rng.below(i + 1);
            boxes.swap(i, j);
        }
        boxes
    }

    fn any_dist(&mut self, shape: &[usize]) -> Dist {
        let kinds = [
            Kind::Replicated,
            Kind::Root,
            Kind::Slab,
            Kind::Block,
            Kind::Cyclic,
            Kind::Boxes,
        ];
        // Process grids take at most three axes.
        let kinds: Vec<Kind> = (kinds.into_iter())
            .filter(|k| shape.len() <= 3 || !matches!(k, Kind::Block | Kind::Cyclic))
            .collect();
        let k = self.rng.pick(&kinds);
        self.dist_of(k, shape)
    }

    /// A new initialized tensor.
    fn input(&mut self, shape: Vec<usize>, dt: Dt, dist: Dist) -> String {
        let name = self.name();
        let rows = if dist == Dist::Partial { self.p } else { 1 };
        let n: usize = shape.iter().product();
        let layout = if self.rng.chance(0.5) { "F" } else { "C" };
        let choice = self.rng.below(10);
        let (init, data): (String, Vec<Vec<E>>) = match choice {
            // A file of random values: the global array ([P, *S] for partial).
            0..=5 => {
                let data: Vec<Vec<E>> = (0..rows)
                    .map(|_| {
                        (0..n)
                            .map(|_| match dt.is_float() {
                                true => E::F(self.float(dt.is_complex())),
                                false => E::I(self.int(dt)),
                            })
                            .collect()
                    })
                    .collect();
                let mut npy_shape = shape.clone();
                if dist == Dist::Partial {
                    npy_shape.insert(0, rows);
                }
                let file = format!("{name}.npy");
                let flat: Vec<E> = data.concat();
                self.files
                    .push((file.clone(), crate::npy::write(dt, &npy_shape, &flat)));
                (format!("{{ npy = \"{file}\" }}"), data)
            }
            6 => {
                let (start, step) = if dt.is_float() {
                    let start = self.rng.range(0, 16) as f64 / 8.0 - 1.0;
                    (start, self.rng.range(1, 8) as f64 / 16.0)
                } else {
                    let signed = dt.int_range().0 < 0;
                    let start = self.rng.range(0, 20) as f64 - if signed { 5.0 } else { 0.0 };
                    // The last element must stay in the dtype (validation refuses a saturating
                    // arange): a step below 1 truncates to repeated values.
                    let last = (rows * n).saturating_sub(1).max(1) as f64;
                    let most = (dt.int_range().1 as f64 - start) / last;
                    (start, (self.rng.range(1, 3) as f64).min(most))
                };
                let data = (0..rows)
                    .map(|r| {
                        (0..n)
                            .map(|i| value_of(dt, start + step * (r * n + i) as f64))
                            .collect()
                    })
                    .collect();
                (
                    format!("{{ arange = {{ start = {start:?}, step = {step:?} }} }}"),
                    data,
                )
            }
            7 if dt.is_float() => {
                let (low, high) = (
                    self.rng.range(0, 8) as f64 / 4.0 - 2.0,
                    self.rng.range(1, 8) as f64 / 4.0,
                );
                let key = xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), self.seed);
                let part = |c: u64| low + (high - low) * unit(key, c);
                let data = (0..rows)
                    .map(|r| {
                        (0..n)
                            .map(|i| {
                                let g = (r * n + i) as u64;
                                let v = if dt.is_complex() {
                                    (part(2 * g), part(2 * g + 1))
                                } else {
                                    (part(g), 0.0)
                                };
                                E::F(model::round(dt, v))
                            })
                            .collect()
                    })
                    .collect();
                (
                    format!("{{ uniform = {{ low = {low:?}, high = {high:?} }} }}"),
                    data,
                )
            }
            _ => {
                let (text, v) = match self.rng.below(3) {
                    0 => ("\"zeros\"".to_string(), 0.0),
                    1 => ("\"ones\"".to_string(), 1.0),
                    _ if dt.is_float() => {
                        let v = self.rng.range(0, 16) as f64 / 4.0 - 2.0;
                        (format!("{{ fill = {v:?} }}"), v)
                    }
                    _ => {
                        let (lo, hi) = dt.int_range();
                        let v = self.rng.range(0, 255) as i128 + lo.max(-100);
                        let v = v.min(hi) as f64;
                        (format!("{{ fill = {v:?} }}"), v)
                    }
                };
                (text, vec![vec![value_of(dt, v); n]; rows])
            }
        };
        let symmetric = self.rng.chance(0.15);
        self.decls.push(format!(
            "[tensors.{name}]\nshape = {}\ndtype = \"{}\"\nlayout = \"{layout}\"\ndistribution = {}\ninit = {init}\n{}",
            list(&shape),
            dt.name(),
            dist.toml(self.rng.chance(0.3)),
            if symmetric { "symmetric = true\n" } else { "" }
        ));
        let value = Value::exact(shape.clone(), dt, data);
        self.tensors.insert(
            name.clone(),
            Tensor {
                shape,
                dt,
                dist: Some(dist),
                value,
            },
        );
        name
    }

    /// Declares a step's result (`dist` None: no distribution key, the op's own).
    fn declare(&mut self, name: &str, shape: &[usize], dt: Dt, dist: Option<&Dist>) {
        let mut t = format!(
            "[tensors.{name}]\nshape = {}\ndtype = \"{}\"\nlayout = \"{}\"\n",
            list(shape),
            dt.name(),
            if self.rng.chance(0.5) { "F" } else { "C" }
        );
        if let Some(d) = dist {
            t += &format!("distribution = {}\n", d.toml(self.rng.chance(0.3)));
        }
        if self.rng.chance(0.15) {
            t += "symmetric = true\n";
        }
        self.decls.push(t);
    }

    /// The keys every step may take.
    fn common(&mut self) -> String {
        let mut s = String::new();
        // A few runs, or one (the defaults, nccl-tests' 5 and 20, now and then).
        if self.rng.chance(0.3) {
            s += &format!("warmup = {}\n", self.rng.range(1, 2));
        } else if self.rng.chance(0.9) {
            s += "warmup = 0\n";
        }
        if self.rng.chance(0.3) {
            s += &format!("iterations = {}\n", self.rng.range(2, 3));
        } else if self.rng.chance(0.9) {
            s += "iterations = 1\n";
        }
        if self.rng.chance(0.2) {
            s += "timing = \"queued\"\n";
        }
        if self.rng.chance(0.85) {
            s += "check = true\n";
        }
        s
    }

    fn step(&mut self, op: &str, keys: String) {
        let common = self.common();
        self.steps
            .push(format!("[[steps]]\nop = \"{op}\"\n{keys}{common}"));
        self.ops.push(op.to_string());
    }

    /// A tensor to use as an input: `last` where `fits`, else a new one from `make`.
    fn reuse(&self, last: &Option<String>, fits: impl Fn(&Tensor) -> bool) -> Option<String> {
        last.clone()
            .filter(|n| self.tensors.get(n).is_some_and(&fits))
    }

    fn set(&mut self, name: &str, shape: Vec<usize>, dist: Option<Dist>, value: Value) {
        let dt = value.dt;
        self.tensors.insert(
            name.to_string(),
            Tensor {
                shape,
                dt,
                dist,
                value,
            },
        );
    }

    fn matmul(&mut self, last: &Option<String>) -> String {
        let transpose = (self.rng.chance(0.35), self.rng.chance(0.35));
        let reused = self.reuse(last, |t| {
            t.shape.len() == 2 && t.dt.is_float() && t.dist != Some(Dist::Partial)
        });
        let dt = match &reused {
            Some(n) => self.tensors[n].dt,
            None => self.rng.pick(&FLOATS),
        };
        // Often the splits an algorithm takes as they are (how op(a) and op(b) are split:
        // whole, by rows, by columns), so that every algorithm runs, not only redistribution.
        let patterns = [
            ("rows", "whole"),
            ("whole", "cols"),
            ("whole", "whole"),
            ("rows", "cols"),
            ("rows", "rows"),
            ("cols", "cols"),
            ("cols", "rows"),
        ];
        let pattern = self.rng.chance(0.6).then(|| self.rng.pick(&patterns));
        // The distribution that splits op(x) as `how` (slab 0 of op(x) is slab 1 of x^T).
        let split = |how: &str, transposed: bool| match (how, transposed) {
            ("whole", _) => Dist::Replicated,
            ("rows", false) | ("cols", true) => Dist::Slab(0),
            _ => Dist::Slab(1),
        };
        let a = match reused {
            Some(a) => a,
            None => {
                let (m, k) = (self.rng.len(), self.rng.len());
                let shape = if transpose.0 { vec![k, m] } else { vec![m, k] };
                let d = match pattern {
                    Some((how, _)) => split(how, transpose.0),
                    None => self.any_dist(&shape),
                };
                self.input(shape, dt, d)
            }
        };
        let ashape = self.tensors[&a].shape.clone();
        let (m, k) = if transpose.0 {
            (ashape[1], ashape[0])
        } else {
            (ashape[0], ashape[1])
        };
        let n = self.rng.len();
        let bshape = if transpose.1 { vec![n, k] } else { vec![k, n] };
        // Often b on a's grid, its row blocks a's column blocks: SUMMA's case.
        let bdist = match self.tensors[&a].dist.clone() {
            Some(Dist::Block { grid, row_major }) if self.rng.chance(0.5) => {
                Dist::Block { grid, row_major }
            }
            Some(Dist::BlockCyclic {
                grid,
                row_major,
                blocks,
                first,
            }) if self.rng.chance(0.5) => Dist::BlockCyclic {
                grid,
                row_major,
                blocks: vec![blocks[1], self.rng.range(1, n)],
                first,
            },
            _ => match pattern {
                Some((_, how)) => split(how, transpose.1),
                None => self.any_dist(&bshape),
            },
        };
        let b = self.input(bshape, dt, bdist);
        let conjugate = (
            transpose.0 && dt.is_complex() && self.rng.chance(0.5),
            transpose.1 && dt.is_complex() && self.rng.chance(0.5),
        );
        let mut keys = format!("a = \"{a}\"\nb = \"{b}\"\n");
        let alpha = self.rng.pick(&[1.0, 1.0, 0.5, -2.0, 1.5]);
        if alpha != 1.0 || self.rng.chance(0.2) {
            keys += &format!("alpha = {alpha:?}\n");
        }
        let mut beta = 0.0;
        let c = self.rng.chance(0.25).then(|| {
            beta = self.rng.pick(&[0.5, -1.0, 2.0]);
            let d = self.any_dist(&[m, n]);
            self.input(vec![m, n], dt, d)
        });
        if let Some(c) = &c {
            keys += &format!("c = \"{c}\"\nbeta = {beta:?}\n");
        }
        // The result: declared in any distribution (partial: each rank's slice of k), or left
        // to the algorithm.
        let out = self.name();
        let declared = self.rng.chance(0.65);
        let out_dist = declared.then(|| {
            if self.rng.chance(0.2) {
                Dist::Partial
            } else {
                self.any_dist(&[m, n])
            }
        });
        let partial = out_dist == Some(Dist::Partial);
        let epilogs: &[&'static str] = if dt.is_complex() || partial {
            &["bias"]
        } else {
            &["relu", "gelu", "bias", "relu_bias", "gelu_bias"]
        };
        let epilog = self.rng.chance(0.4).then(|| self.rng.pick(epilogs));
        let per_column = self.rng.chance(0.5);
        let bias = epilog.filter(|e| e.ends_with("bias")).map(|_| {
            let len = if per_column { n } else { m };
            let d = self.any_dist(&[len]);
            self.input(vec![len], dt, d)
        });
        if let Some(e) = epilog {
            keys += &format!("epilog = \"{e}\"\n");
        }
        if let Some(bias) = &bias {
            keys += &format!("bias = \"{bias}\"\n");
            if per_column || self.rng.chance(0.3) {
                keys += &format!(
                    "bias_per = \"{}\"\n",
                    if per_column { "column" } else { "row" }
                );
            }
        }
        keys += &format!(
            "transpose_a = {}\ntranspose_b = {}\n",
            transpose.0, transpose.1
        );
        if conjugate.0 || conjugate.1 {
            keys += &format!(
                "conjugate_a = {}\nconjugate_b = {}\n",
                conjugate.0, conjugate.1
            );
        }
        let possible = algorithms(
            self.tensors[&a].dist.as_ref(),
            self.tensors[&b].dist.as_ref(),
            transpose,
            partial,
        );
        if self.rng.chance(0.4) {
            keys += &format!("algorithm = \"{}\"\n", self.rng.pick(&possible));
        }
        if self.rng.chance(0.3) {
            keys += &format!(
                "pipeline = \"{}\"\n",
                self.rng.pick(&["auto", "rounds", "whole"])
            );
        }
        if self.rng.chance(0.3) {
            keys += &format!(
                "product_layout = \"{}\"\n",
                self.rng.pick(&["auto", "C", "F"])
            );
        }
        keys += &format!("out = \"{out}\"\n");
        if declared {
            self.declare(&out, &[m, n], dt, out_dist.as_ref());
        }
        let op = MatmulOp {
            transpose,
            conjugate,
            alpha,
            beta,
            epilog,
            bias_per_column: per_column,
            partial: partial.then_some(self.p),
        };
        let value = model::matmul(
            &self.tensors[&a].value,
            &self.tensors[&b].value,
            c.as_ref().map(|c| &self.tensors[c].value),
            bias.as_ref().map(|b| &self.tensors[b].value),
            &op,
        );
        self.step("matmul", keys);
        self.set(&out, vec![m, n], out_dist, value);
        out
    }

    fn fft(&mut self, last: &Option<String>) -> String {
        let kind = self.rng.pick(&["c2c", "c2c", "r2c", "c2r"]);
        let fits_dist = |d: &Option<Dist>| {
            matches!(
                d,
                Some(Dist::Slab(0 | 1)) | Some(Dist::Boxes(_)) | Some(Dist::Replicated)
            )
        };
        let want_dt = |dt: Dt| match kind {
            "r2c" => matches!(dt, Dt::F32 | Dt::F64),
            _ => dt.is_complex(),
        };
        let reused = self.reuse(last, |t| {
            (2..=3).contains(&t.shape.len()) && want_dt(t.dt) && fits_dist(&t.dist)
        });
        let x = match reused {
            Some(x) => x,
            None => {
                let nd = self.rng.range(2, 3);
                let mut shape: Vec<usize> = (0..nd).map(|_| self.rng.range(1, 9)).collect();
                // Now and then 2-D down long columns: from x-slabs, exchanged column batch by
                // column batch.
                if nd == 2 && self.rng.chance(0.15) {
                    shape[0] = 8192;
                }
                // Now and then a Bluestein length (a prime factor above 127), which a GPU plans
                // apart: a long axis 0 under rows of 8 complex values or more, or a 2-D r2c's
                // real axis.
                if self.rng.chance(0.06) {
                    shape = match kind {
                        "r2c" if self.rng.chance(0.5) => vec![self.rng.range(1, 9), 131],
                        "r2c" => vec![8209, 16],
                        _ => vec![8209, 8],
                    };
                }
                let dt = match kind {
                    "r2c" => self.rng.pick(&[Dt::F32, Dt::F64]),
                    _ => self.rng.pick(&[Dt::C64, Dt::C128]),
                };
                let d = match self.rng.below(4) {
                    0 => Dist::Slab(0),
                    1 => Dist::Slab(1),
                    2 => Dist::Replicated,
                    _ => Dist::Boxes(self.boxes(&shape)),
                };
                self.input(shape, dt, d)
            }
        };
        let (xshape, xdt, xdist) = {
            let t = &self.tensors[&x];
            (t.shape.clone(), t.dt, t.dist.clone().unwrap())
        };
        let last_axis = xshape.len() - 1;
        let inverse = match kind {
            "r2c" => false,
            "c2r" => true,
            _ => self.rng.chance(0.5),
        };
        let norm = self.rng.pick(&["backward", "forward", "ortho", "none"]);
        let reshape = self.rng.chance(0.6);
        // In place there is no result to declare: boxes in must keep their boxes (reshape).
        let boxes_in = matches!(xdist, Dist::Boxes(_));
        let in_place = kind == "c2c" && (reshape || !boxes_in) && self.rng.chance(0.3);
        let mut out_shape = xshape.clone();
        let mut c2r_last = 0;
        match kind {
            "r2c" => out_shape[last_axis] = xshape[last_axis] / 2 + 1,
            "c2r" => {
                let m = xshape[last_axis];
                c2r_last = if m == 1 || self.rng.chance(0.4) {
                    2 * m - 1
                } else {
                    2 * (m - 1)
                };
                out_shape[last_axis] = c2r_last;
            }
            _ => {}
        }
        let out_dt = match kind {
            "r2c" => xdt.to_complex(),
            "c2r" => xdt.to_real(),
            _ => xdt,
        };
        let mut keys = format!("input = \"{x}\"\n");
        if kind != "c2c" || self.rng.chance(0.3) {
            keys += &format!("kind = \"{kind}\"\n");
        }
        if inverse || self.rng.chance(0.2) {
            keys += &format!(
                "direction = \"{}\"\n",
                if inverse { "inverse" } else { "forward" }
            );
        }
        keys += &format!("norm = \"{norm}\"\nreshape = {reshape}\n");
        // The transposes' batches named, now and then: one exchange, or more than the planes.
        if self.rng.chance(0.25) {
            keys += &format!("batches = {}\n", 1 + self.rng.below(6));
        }
        let (out, dist) = if in_place {
            let dist = match (&xdist, reshape) {
                (Dist::Slab(a), false) => Dist::Slab(1 - a),
                _ => xdist.clone(),
            };
            (x.clone(), dist)
        } else {
            let out = self.name();
            keys += &format!("out = \"{out}\"\n");
            // Boxes need the result's distribution, but for a c2c that keeps them; a c2r's
            // odd length needs its declared shape.
            let must = (boxes_in && !(kind == "c2c" && reshape))
                || (kind == "c2r" && c2r_last != 2 * (xshape[last_axis] - 1));
            let dist = if must || self.rng.chance(0.5) {
                let d = self.any_dist(&out_shape);
                self.declare(&out, &out_shape, out_dt, Some(&d));
                d
            } else {
                if self.rng.chance(0.3) {
                    self.declare(&out, &out_shape, out_dt, None);
                }
                match (&xdist, reshape) {
                    (Dist::Slab(a), false) => Dist::Slab(1 - a),
                    _ => xdist.clone(),
                }
            };
            (out, dist)
        };
        let op = FftOp {
            kind,
            inverse,
            norm,
        };
        let value = model::fft(&self.tensors[&x].value, &op, c2r_last);
        self.step("fft", keys);
        self.set(&out, out_shape, Some(dist), value);
        out
    }

    fn redistribute(&mut self, last: &Option<String>) -> String {
        let x = match self.reuse(last, |t| t.dist != Some(Dist::Partial)) {
            Some(x) => x,
            None => {
                let shape = if self.rng.chance(0.2) {
                    self.long_shape()
                } else if self.rng.chance(0.15) {
                    self.deep_shape()
                } else {
                    self.shape(3)
                };
                let dt = self.rng.pick(&ALL);
                let d = self.any_dist(&shape);
                self.input(shape, dt, d)
            }
        };
        let (shape, value) = (
            self.tensors[&x].shape.clone(),
            self.tensors[&x].value.clone(),
        );
        let out = self.name();
        let dist = self.any_dist(&shape);
        let mut keys = format!(
            "input = \"{x}\"\nout = \"{out}\"\ndistribution = {}\n",
            dist.toml(self.rng.chance(0.3))
        );
        if self.rng.chance(0.5) {
            keys += &format!(
                "layout = \"{}\"\n",
                if self.rng.chance(0.5) { "F" } else { "C" }
            );
        }
        if self.rng.chance(0.2) {
            self.declare(&out, &shape, value.dt, Some(&dist));
        }
        self.step("redistribute", keys);
        self.set(&out, shape, Some(dist), value);
        out
    }

    /// 2 or 3 axes, one of them (the first or the last) 257 to 1100 elements long, the others 1
    /// to 7: pieces of rows of hundreds of elements, which the GPU moves with kernels of their
    /// own (a warp a row, few rows with gaps between).
    fn long_shape(&mut self) -> Vec<usize> {
        let short = self.rng.range(1, 2);
        let mut shape: Vec<usize> = (0..short).map(|_| self.rng.range(1, 7)).collect();
        let long = self.rng.range(257, 1100);
        if self.rng.chance(0.5) {
            shape.push(long);
        } else {
            shape.insert(0, long);
        }
        shape
    }

    /// 4 or 5 axes of 1 to 9 elements: layout changes whose runs nest grids in levels (the
    /// axes between a side's contiguous one and the other's), which the GPU moves in one launch.
    fn deep_shape(&mut self) -> Vec<usize> {
        let nd = self.rng.range(4, 5);
        (0..nd).map(|_| self.rng.range(1, 9)).collect()
    }

    /// 1 to `max_nd` axes of small, uneven lengths.
    fn shape(&mut self, max_nd: usize) -> Vec<usize> {
        let nd = self.rng.range(1, max_nd);
        (0..nd).map(|_| self.rng.len()).collect()
    }

    /// A partial tensor to reduce: `last` where it is one, else a new one.
    fn partial(&mut self, last: &Option<String>, op: &str) -> String {
        let ordered = matches!(op, "min" | "max");
        match self.reuse(last, |t| {
            t.dist == Some(Dist::Partial) && !(ordered && t.dt.is_complex())
        }) {
            Some(x) => x,
            None => {
                let shape = self.shape(3);
                let dts: Vec<Dt> = ALL
                    .iter()
                    .copied()
                    .filter(|d| !(ordered && d.is_complex()))
                    .collect();
                let dt = self.rng.pick(&dts);
                self.input(shape, dt, Dist::Partial)
            }
        }
    }

    fn reduction(&mut self, last: &Option<String>, which: &str) -> String {
        let op = self.rng.pick(&["sum", "sum", "prod", "min", "max", "avg"]);
        let x = self.partial(last, op);
        let shape = self.tensors[&x].shape.clone();
        let value = model::reduce(&self.tensors[&x].value, op);
        let mut keys = format!("input = \"{x}\"\n");
        if op != "sum" || self.rng.chance(0.3) {
            keys += &format!("reduce = \"{op}\"\n");
        }
        let (dist, in_place) = match which {
            "all_reduce" => (Dist::Replicated, self.rng.chance(0.4)),
            "reduce" => {
                let root = self.rng.below(self.p);
                if root != 0 || self.rng.chance(0.3) {
                    keys += &format!("root = {root}\n");
                }
                (Dist::Root(root), self.rng.chance(0.4))
            }
            _ => {
                let axis = self.rng.below(shape.len());
                if axis != 0 || self.rng.chance(0.3) {
                    keys += &format!("axis = {axis}\n");
                }
                (Dist::Slab(axis), false)
            }
        };
        self.finish(which, keys, (x, in_place), shape, dist, value)
    }

    /// A move from a tensor in `from` to the op's result `to` (the same global value).
    fn collective(&mut self, last: &Option<String>, which: &str) -> String {
        let p = self.p;
        let x = match which {
            "broadcast" | "scatter" => self.reuse(last, |t| matches!(t.dist, Some(Dist::Root(_)))),
            "all_gather" | "gather" => self.reuse(last, |t| matches!(t.dist, Some(Dist::Slab(_)))),
            "all_to_all" => self.reuse(last, |t| {
                t.shape.len() >= 2
                    && t.shape[0] == p
                    && t.shape[1] == p
                    && t.dist == Some(Dist::Slab(0))
            }),
            _ => self.reuse(last, |t| t.shape[0] == p && t.dist == Some(Dist::Slab(0))),
        };
        let x = match x {
            Some(x) => x,
            None => {
                let dt = self.rng.pick(&ALL);
                let (shape, dist) = match which {
                    "broadcast" | "scatter" => {
                        let s = self.shape(3);
                        (s, Dist::Root(self.rng.below(p)))
                    }
                    "all_gather" | "gather" => {
                        let s = self.shape(3);
                        let a = self.rng.below(s.len());
                        (s, Dist::Slab(a))
                    }
                    "all_to_all" => {
                        let mut s = vec![p, p];
                        if self.rng.chance(0.6) {
                            s.push(self.rng.len());
                        }
                        (s, Dist::Slab(0))
                    }
                    _ => {
                        let mut s = vec![p];
                        s.extend(self.shape(2));
                        (s, Dist::Slab(0))
                    }
                };
                self.input(shape, dt, dist)
            }
        };
        let (shape, xdist) = {
            let t = &self.tensors[&x];
            (t.shape.clone(), t.dist.clone().unwrap())
        };
        let mut value = self.tensors[&x].value.clone();
        let mut keys = format!("input = \"{x}\"\n");
        let mut may_be_in_place = false;
        let dist = match which {
            "broadcast" => {
                let Dist::Root(r) = xdist else { unreachable!() };
                if self.rng.chance(0.4) {
                    keys += &format!("root = {r}\n");
                }
                may_be_in_place = true;
                Dist::Replicated
            }
            "scatter" => {
                let Dist::Root(r) = xdist else { unreachable!() };
                if self.rng.chance(0.4) {
                    keys += &format!("root = {r}\n");
                }
                let axis = self.rng.below(shape.len());
                keys += &format!("axis = {axis}\n");
                Dist::Slab(axis)
            }
            "all_gather" => Dist::Replicated,
            "gather" => {
                let root = self.rng.below(p);
                keys += &format!("root = {root}\n");
                Dist::Root(root)
            }
            "all_to_all" => Dist::Slab(1),
            _ => {
                // send_recv: the ring, or pairs (each rank receives at most once).
                let pairs: Vec<(usize, usize)> = if self.rng.chance(0.4) {
                    (0..p).map(|r| (r, (r + 1) % p)).collect()
                } else {
                    let mut pairs = Vec::new();
                    for dst in 0..p {
                        if self.rng.chance(0.7) {
                            pairs.push((self.rng.below(p), dst));
                        }
                    }
                    let text: Vec<String> =
                        pairs.iter().map(|(s, d)| format!("[{s}, {d}]")).collect();
                    keys += &format!("pairs = [{}]\n", text.join(", "));
                    pairs
                };
                value = model::send_recv(&value, &pairs);
                Dist::Slab(0)
            }
        };
        let in_place = may_be_in_place && self.rng.chance(0.4);
        self.finish(which, keys, (x, in_place), shape, dist, value)
    }

    /// Ends a collective's step: its result replaces the input (in place) or gets a new name,
    /// sometimes declared (in the op's own distribution, any layout).
    fn finish(
        &mut self,
        op: &str,
        mut keys: String,
        (x, in_place): (String, bool),
        shape: Vec<usize>,
        dist: Dist,
        value: Value,
    ) -> String {
        let out = if in_place {
            x
        } else {
            let out = self.name();
            keys += &format!("out = \"{out}\"\n");
            if self.rng.chance(0.3) {
                self.declare(&out, &shape, value.dt, Some(&dist));
            }
            out
        };
        self.step(op, keys);
        self.set(&out, shape, Some(dist), value);
        out
    }
}

/// The algorithms that can run a matmul (the planner's rules, from the README): `local`,
/// `ag_gemm`, `gemm_rs`/`gemm_ar`, `summa`, `redistribute`; `k_split` alone into a partial
/// result.
fn algorithms(
    a: Option<&Dist>,
    b: Option<&Dist>,
    t: (bool, bool),
    partial: bool,
) -> Vec<&'static str> {
    if partial {
        return vec!["auto", "k_split"];
    }
    // How op(x) is split: whole, by its rows, by its columns, over a grid, or otherwise.
    let split = |d: Option<&Dist>, transposed: bool| -> &str {
        let s = match d {
            Some(Dist::Replicated) => "whole",
            Some(Dist::Slab(0)) => "rows",
            Some(Dist::Slab(_)) => "cols",
            Some(Dist::Block { .. } | Dist::BlockCyclic { .. }) => "grid",
            _ => "other",
        };
        match (s, transposed) {
            ("rows", true) => "cols",
            ("cols", true) => "rows",
            (s, _) => s,
        }
    };
    let (sa, sb) = (split(a, t.0), split(b, t.1));
    let mut v = vec!["auto", "redistribute"];
    if matches!(
        (sa, sb),
        ("rows", "whole") | ("whole", "cols") | ("whole", "whole")
    ) {
        v.push("local");
    }
    if matches!(
        (sa, sb),
        ("rows", "cols") | ("rows", "rows") | ("cols", "cols")
    ) {
        v.push("ag_gemm");
    }
    if (sa, sb) == ("cols", "rows") {
        v.extend(["gemm_rs", "gemm_ar"]);
    }
    let summa = t == (false, false)
        && match (a, b) {
            (
                Some(Dist::Block {
                    grid: ga,
                    row_major: la,
                }),
                Some(Dist::Block {
                    grid: gb,
                    row_major: lb,
                }),
            ) => ga == gb && la == lb && ga.as_ref().is_none_or(|g| g.len() == 2),
            (
                Some(Dist::BlockCyclic {
                    grid: ga,
                    row_major: la,
                    blocks: ba,
                    first: fa,
                }),
                Some(Dist::BlockCyclic {
                    grid: gb,
                    row_major: lb,
                    blocks: bb,
                    first: fb,
                }),
            ) => {
                ga == gb && la == lb && fa == fb && ba.len() == 2 && bb.len() == 2 && ba[1] == bb[0]
            }
            _ => false,
        };
    if summa {
        v.push("summa");
    }
    v
}

/// A value from an init formula's f64 (arange, fill), stored in the dtype: floats rounded to
/// nearest, integers truncated toward zero and saturated (Rust's `as`).
fn value_of(dt: Dt, x: f64) -> E {
    if dt.is_float() {
        return E::F(model::round(dt, (x, 0.0)));
    }
    let (lo, hi) = dt.int_range();
    let t = x.trunc();
    E::I(if t <= lo as f64 {
        lo
    } else if t >= hi as f64 {
        hi
    } else {
        t as i128
    })
}

/// The init's uniform [0, 1) for counter `c` of stream `key` (the README's formula).
fn unit(key: u64, c: u64) -> f64 {
    let mut z = (key ^ c.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The case of `seed` for `p` ranks (on `device` where given).
pub fn case(seed: u64, p: usize, device: Option<&str>) -> Case {
    let mut rng = Rng::new(seed);
    let job_seed = rng.next() % 1000;
    let mut g = Gen {
        rng,
        p,
        seed: job_seed,
        tensors: IndexMap::new(),
        decls: Vec::new(),
        steps: Vec::new(),
        ops: Vec::new(),
        files: Vec::new(),
        next_name: 0,
    };
    let n_steps = if g.rng.chance(0.15) {
        1
    } else {
        g.rng.range(2, 5)
    };
    let mut last: Option<String> = None;
    for _ in 0..n_steps {
        let op = g.rng.pick(&[
            "matmul",
            "matmul",
            "matmul",
            "fft",
            "fft",
            "redistribute",
            "redistribute",
            "all_reduce",
            "reduce",
            "reduce_scatter",
            "broadcast",
            "all_gather",
            "all_to_all",
            "gather",
            "scatter",
            "send_recv",
            "barrier",
        ]);
        let out = match op {
            "matmul" => g.matmul(&last),
            "fft" => g.fft(&last),
            "redistribute" => g.redistribute(&last),
            "all_reduce" | "reduce" | "reduce_scatter" => g.reduction(&last, op),
            "barrier" => {
                g.step("barrier", String::new());
                continue;
            }
            _ => g.collective(&last, op),
        };
        last = Some(out);
    }
    let written: Vec<String> = g.tensors.keys().cloned().collect();
    let mut spec = format!("[job]\nname = \"diff\"\nseed = {}\n", g.seed);
    let mut runtime = Vec::new();
    if g.rng.chance(0.3) {
        runtime.push(format!("ranks = {p}\n"));
    }
    if let Some(d) = device {
        runtime.push(format!("device = \"{d}\"\n"));
    }
    if !runtime.is_empty() {
        spec += &format!("[runtime]\n{}", runtime.concat());
    }
    spec += &g.decls.join("");
    spec += &g.steps.join("");
    spec += &format!(
        "[output]\ngather = true\nchecksum = \"{}\"\ntensors = [{}]\n",
        if g.rng.chance(0.2) {
            "sha256"
        } else {
            "xxh3-64"
        },
        written
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let no_launcher = p == 1 && g.rng.chance(0.5);
    Case {
        ranks: p,
        spec,
        files: g.files,
        expect: g.tensors.into_iter().map(|(n, t)| (n, t.value)).collect(),
        ops: g.ops,
        no_launcher,
    }
}
