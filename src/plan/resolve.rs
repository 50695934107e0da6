//! The meaning pass: follows the steps in order, resolving every tensor a step makes or changes
//! (shape, dtype, layout, distribution) and reporting every inconsistency at once.

use super::matmul::{self, MatmulCase, MatmulChoice};
use crate::dist;
use crate::spec::Loaded;
use crate::spec::diag::{Diagnostic, KeyPath, did_you_mean};
use crate::spec::model::{CommBackend, Device, DeviceMap, ProcessGroup};
use crate::spec::step::{FftDirection, FftKind, ReduceOp, Step};
use crate::spec::tensor::{Axis, DType, Distribution, Init, Layout, TensorSpec};
use indexmap::IndexMap;

/// A tensor's shape, type, layout and distribution at one point of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorState {
    /// Global shape.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DType,
    /// Local storage order.
    pub layout: Layout,
    /// Layout over the ranks.
    pub dist: Distribution,
}

/// Everything known of one tensor.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Its states: as created, then after each in-place step that changed its distribution.
    pub states: Vec<TensorState>,
    /// Lives on the symmetric heap.
    pub symmetric: bool,
    /// Has an init (exists from the start).
    pub init: bool,
    /// The step that first writes it, for tensors without an init.
    pub producer: Option<usize>,
    /// Every step that reads or writes it.
    pub used_by: Vec<usize>,
}

/// One step, resolved.
#[derive(Debug, Clone)]
pub struct StepInfo {
    /// The op name.
    pub op: &'static str,
    /// The step's name (given, or `op#index`).
    pub name: String,
    /// Tensors read.
    pub inputs: Vec<String>,
    /// Tensors written.
    pub outputs: Vec<String>,
    /// The matmul algorithm chosen.
    pub matmul: Option<MatmulChoice>,
    /// The states of the tensors the step reads, in `inputs` order.
    pub input_states: Vec<TensorState>,
    /// The state of the result it writes, as stored.
    pub output_state: Option<TensorState>,
}

/// The result of the meaning pass.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Every tensor that exists at some point, in declaration then creation order.
    pub tensors: IndexMap<String, TensorInfo>,
    /// Every step.
    pub steps: Vec<StepInfo>,
}

struct Resolver<'a> {
    loaded: &'a Loaded,
    ranks: Option<u64>,
    tensors: IndexMap<String, TensorInfo>,
    /// The state of each tensor now (tensors not yet written are absent).
    current: IndexMap<String, TensorState>,
    diags: Vec<Diagnostic>,
}

/// Runs the meaning checks for a rank count (None: the checks that do not depend on it).
pub fn resolve(loaded: &Loaded, ranks: Option<u64>) -> Result<Resolved, Vec<Diagnostic>> {
    let mut r = Resolver {
        loaded,
        ranks,
        tensors: IndexMap::new(),
        current: IndexMap::new(),
        diags: Vec::new(),
    };
    r.check_runtime();
    r.declare_tensors();
    let steps = loaded
        .spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| r.step(i, s))
        .collect();
    r.check_output();
    if r.diags.is_empty() {
        Ok(Resolved {
            tensors: r.tensors,
            steps,
        })
    } else {
        Err(r.diags)
    }
}

fn dist_name(d: &Distribution) -> String {
    match d {
        Distribution::Replicated => "replicated".into(),
        Distribution::Partial => "partial".into(),
        Distribution::Root(r) => format!("{{ root = {r} }}"),
        Distribution::Slab(a) => format!("{{ slab = {} }}", a.index()),
        Distribution::Block(_) => "block".into(),
        Distribution::BlockCyclic(_) => "block_cyclic".into(),
        Distribution::Boxes(_) => "boxes".into(),
    }
}

/// The byte size of a shape, None when it overflows.
pub fn byte_size(shape: &[u64], dtype: DType) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &n| acc.checked_mul(n))
}

impl Resolver<'_> {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn check_runtime(&mut self) {
        let rt = &self.loaded.spec.runtime;
        let here = KeyPath::root().key("runtime");
        if let (Some(given), Some(p)) = (rt.ranks, self.ranks)
            && u64::from(given) != p
        {
            self.err(
                Diagnostic::value(
                    here.key("ranks"),
                    format!("the spec requires {given} ranks, but {p} were asked for"),
                )
                .help(format!(
                    "plan with --ranks {given}, or change runtime.ranks"
                )),
            );
        }
        if rt.process_group == ProcessGroup::Single && self.ranks.is_some_and(|p| p > 1) {
            self.err(
                Diagnostic::value(
                    here.key("process_group"),
                    format!(
                        "a single process group has one rank, not {}",
                        self.ranks.unwrap_or(1)
                    ),
                )
                .help("use process_group = \"mpi\" or \"auto\" to run on several ranks"),
            );
        }
        if let (DeviceMap::List(list), Some(p)) = (&rt.device_map, self.ranks)
            && (list.len() as u64) < p
        {
            self.err(
                Diagnostic::value(
                    here.key("device_map"),
                    format!("device_map lists {} GPUs for {p} ranks", list.len()),
                )
                .help("give one GPU ordinal per rank, indexed by rank"),
            );
        }
        if let Some(backends) = &rt.backends {
            let gpu = backends
                .iter()
                .position(|b| matches!(b, CommBackend::Nccl | CommBackend::Nvshmem));
            let cpu = backends.iter().position(|b| *b == CommBackend::Mpi);
            let bad = match rt.device {
                Device::Cpu => gpu.map(|i| (i, "the cpu device communicates through mpi only")),
                Device::Cuda => {
                    cpu.map(|i| (i, "the cuda device communicates through nccl and nvshmem"))
                }
                Device::Auto => match (gpu, cpu) {
                    (Some(_), Some(i)) => Some((
                        i,
                        "mpi (cpu) cannot be mixed with nccl or nvshmem (cuda) in one run",
                    )),
                    _ => None,
                },
            };
            if let Some((i, why)) = bad {
                self.err(
                    Diagnostic::value(
                        here.key("backends").index(i),
                        format!("backend `{}` does not fit: {why}", backends[i].name()),
                    )
                    .help("cuda takes [\"nccl\"] or [\"nccl\", \"nvshmem\"]; cpu takes [\"mpi\"]"),
                );
            }
        }
    }

    fn declare_tensors(&mut self) {
        for (name, t) in &self.loaded.spec.tensors {
            // A declaration with errors still exists for the steps, so that they report their own
            // problems and not a cascade of "no such tensor"; nothing is planned while any error
            // stands.
            self.check_tensor(t, &KeyPath::root().key("tensors").key(name));
            let state = t.init.as_ref().map(|_| TensorState {
                shape: t.shape.clone(),
                dtype: t.dtype,
                layout: t.layout,
                dist: t.distribution.clone().unwrap_or(Distribution::Replicated),
            });
            if let Some(state) = &state {
                self.current.insert(name.clone(), state.clone());
            }
            self.tensors.insert(
                name.clone(),
                TensorInfo {
                    states: state.into_iter().collect(),
                    symmetric: t.symmetric,
                    init: t.init.is_some(),
                    producer: None,
                    used_by: Vec::new(),
                },
            );
        }
    }

    /// Checks one declaration.
    fn check_tensor(&mut self, t: &TensorSpec, here: &KeyPath) {
        if byte_size(&t.shape, t.dtype).is_none() {
            self.err(
                Diagnostic::value(
                    here.key("shape"),
                    format!(
                        "shape {:?} of {} holds more bytes than 64 bits can count",
                        t.shape, t.dtype
                    ),
                )
                .help("use a smaller shape"),
            );
        }
        if let Some(d) = &t.distribution {
            let found = dist::check(d, &t.shape, self.ranks, &here.key("distribution"));
            self.diags.extend(found);
        }
        if let Some(Init::Npy(file)) = &t.init {
            self.check_npy(t, file, &here.key("init").key("npy"));
        }
        if matches!(t.init, Some(Init::Uniform(_) | Init::Normal(_))) && !t.dtype.is_float() {
            self.err(
                Diagnostic::value(
                    here.key("init"),
                    format!("random init needs a floating-point dtype, not {}", t.dtype),
                )
                .help("use fill, arange, zeros or ones for integer tensors"),
            );
        }
    }

    fn check_npy(&mut self, t: &TensorSpec, file: &str, here: &KeyPath) {
        let path = self.loaded.dir.join(file);
        let header = match crate::spec::npy::read_header(&path) {
            Ok(h) => h,
            Err(e) => {
                self.err(
                    Diagnostic::value(here.clone(), e)
                        .help("the path is relative to the spec file's directory"),
                );
                return;
            }
        };
        let partial = t.distribution == Some(Distribution::Partial);
        let expected: Vec<String> = if partial {
            let lead = self.ranks.map_or("P".to_string(), |p| p.to_string());
            std::iter::once(lead)
                .chain(t.shape.iter().map(u64::to_string))
                .collect()
        } else {
            t.shape.iter().map(u64::to_string).collect()
        };
        let matches = if partial {
            header.shape.len() == t.shape.len() + 1
                && header.shape[1..] == t.shape[..]
                && self.ranks.is_none_or(|p| header.shape[0] == p)
        } else {
            header.shape == t.shape
        };
        if !matches {
            self.err(
                Diagnostic::value(
                    here.clone(),
                    format!(
                        "{} holds shape {:?}, but the tensor needs [{}]",
                        path.display(),
                        header.shape,
                        expected.join(", ")
                    ),
                )
                .help(if partial {
                    "a partial tensor's file holds every rank's piece stacked: [P, *shape]"
                } else {
                    "the file must hold the global array"
                }),
            );
        }
        let descrs = crate::spec::npy::descrs(t.dtype);
        if !descrs.contains(&header.descr.as_str()) {
            self.err(
                Diagnostic::value(
                    here.clone(),
                    format!(
                        "{} holds dtype {}, but the tensor is {} ({})",
                        path.display(),
                        header.descr,
                        t.dtype,
                        descrs.join(" or ")
                    ),
                )
                .help("save the array with the tensor's dtype, little-endian"),
            );
        }
    }

    /// The current state of an input, or a diagnostic saying why there is none.
    fn input(&mut self, step: usize, key: &str, name: &str) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(step).key(key);
        if let Some(state) = self.current.get(name) {
            let state = state.clone();
            self.tensors[name].used_by.push(step);
            return Some(state);
        }
        let writes = |s: &Step| s.output().is_some_and(|(_, o)| o == name);
        // An earlier step that writes it has errors of its own: no second report.
        if self.loaded.spec.steps[..step].iter().any(writes) {
            return None;
        }
        let later = self.loaded.spec.steps[step + 1..]
            .iter()
            .position(writes)
            .map(|j| j + step + 1);
        let d = if self.loaded.spec.tensors.contains_key(name) {
            match later {
                Some(j) => Diagnostic::value(
                    here,
                    format!("tensor `{name}` is used before step {j} writes it"),
                ),
                None => Diagnostic::value(
                    here,
                    format!("tensor `{name}` has no init and no earlier step writes it"),
                )
                .help(format!(
                    "give tensors.{name} an init, or write it in an earlier step"
                )),
            }
        } else if let Some(j) = later {
            Diagnostic::value(
                here,
                format!("tensor `{name}` is used before step {j} writes it"),
            )
            .help("steps run in order: move this step after the one that writes it")
        } else {
            let mut known: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
            known.extend(
                self.current
                    .keys()
                    .map(String::as_str)
                    .filter(|n| !self.tensors.contains_key(*n)),
            );
            let d = Diagnostic::value(here, format!("no tensor named `{name}`"));
            let list = known.join(", ");
            match did_you_mean(name, &known) {
                Some(best) => d.help(format!("did you mean `{best}`? known tensors: {list}")),
                None if known.is_empty() => d.help("declare it under [tensors]"),
                None => d.help(format!("known tensors: {list}")),
            }
        };
        self.err(d);
        None
    }

    /// Records a step's result under `name`, checking it against the name's declaration (an
    /// in-place result keeps the tensor's declaration and only changes its state).
    fn write(
        &mut self,
        step: usize,
        key: &str,
        name: &str,
        mut state: TensorState,
        in_place: bool,
    ) {
        let here = KeyPath::root().key("steps").index(step).key(key);
        let declared = self.loaded.spec.tensors.get(name).cloned();
        if let Some(decl) = &declared {
            let tpath = KeyPath::root().key("tensors").key(name);
            if !in_place {
                if decl.shape != state.shape {
                    self.err(Diagnostic::value(
                        here.clone(),
                        format!(
                            "{} makes shape {:?}, but tensors.{name} declares {:?}",
                            self.loaded.spec.steps[step].op(),
                            state.shape,
                            decl.shape
                        ),
                    ));
                }
                if decl.dtype != state.dtype {
                    self.err(Diagnostic::value(
                        here.clone(),
                        format!(
                            "{} makes {}, but tensors.{name} declares {}",
                            self.loaded.spec.steps[step].op(),
                            state.dtype,
                            decl.dtype
                        ),
                    ));
                }
                if let Some(d) = &decl.distribution
                    && *d != state.dist
                {
                    self.err(
                        Diagnostic::value(
                            tpath.key("distribution"),
                            format!(
                                "step {step} ({}) makes `{name}` {}, but it is declared {}",
                                self.loaded.spec.steps[step].op(),
                                dist_name(&state.dist),
                                dist_name(d)
                            ),
                        )
                        .help(format!(
                            "declare tensors.{name}.distribution = {}, or leave it out",
                            dist_name(&state.dist)
                        )),
                    );
                }
                state.layout = decl.layout;
            }
        } else if !in_place && let Some(prev) = self.tensors.get(name).and_then(|t| t.producer) {
            self.err(
                Diagnostic::value(
                    here.clone(),
                    format!("step {step} writes `{name}`, which step {prev} already wrote"),
                )
                .help(format!(
                    "use another name, or declare [tensors.{name}] to write it more than once"
                )),
            );
            return;
        }
        let symmetric = declared.as_ref().map(|d| d.symmetric).unwrap_or_else(|| {
            let inputs = self.loaded.spec.steps[step].inputs();
            !inputs.is_empty()
                && inputs
                    .iter()
                    .all(|(_, n)| self.tensors.get(*n).is_some_and(|t| t.symmetric))
        });
        let info = self.tensors.entry(name.to_string()).or_insert(TensorInfo {
            states: Vec::new(),
            symmetric,
            init: false,
            producer: None,
            used_by: Vec::new(),
        });
        if info.producer.is_none() && !info.init {
            info.producer = Some(step);
        }
        if info.used_by.last() != Some(&step) {
            info.used_by.push(step);
        }
        if info.states.last() != Some(&state) {
            info.states.push(state.clone());
        }
        self.current.insert(name.to_string(), state);
    }

    fn expect_dist(
        &mut self,
        step: usize,
        key: &str,
        name: &str,
        got: &Distribution,
        want: &str,
        ok: bool,
    ) -> bool {
        if !ok {
            let op = self.loaded.spec.steps[step].op();
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(step).key(key),
                    format!(
                        "{op} needs a {want} input, but `{name}` is {} here",
                        dist_name(got)
                    ),
                )
                .help(format!(
                    "give `{name}` a {want} distribution, or redistribute it first"
                )),
            );
        }
        ok
    }

    fn check_reduce(&mut self, step: usize, op: ReduceOp, dtype: DType) {
        let bad = match op {
            ReduceOp::Min | ReduceOp::Max if dtype.is_complex() => {
                Some("complex numbers have no order")
            }
            _ => None,
        };
        if let Some(why) = bad {
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(step).key("reduce"),
                    format!("reduce = {:?} does not apply to {dtype}: {why}", op).to_lowercase(),
                )
                .help("use sum, prod or avg"),
            );
        }
    }

    fn check_root(&mut self, step: usize, key: &str, root: u32) -> bool {
        match self.ranks {
            Some(p) if u64::from(root) >= p => {
                self.err(
                    Diagnostic::value(
                        KeyPath::root().key("steps").index(step).key(key),
                        format!("root rank {root} does not exist with {p} ranks"),
                    )
                    .help(format!("use a rank from 0 to {}", p - 1)),
                );
                false
            }
            _ => true,
        }
    }

    fn check_divisible(&mut self, step: usize, axis: Axis, state: &TensorState) -> bool {
        let here = KeyPath::root().key("steps").index(step).key("axis");
        let a = axis.index();
        if a >= state.shape.len() {
            self.err(
                Diagnostic::value(
                    here,
                    format!("axis {a} does not exist in shape {:?}", state.shape),
                )
                .help(format!("use an axis from 0 to {}", state.shape.len() - 1)),
            );
            return false;
        }
        if let Some(p) = self.ranks.filter(|p| !state.shape[a].is_multiple_of(*p)) {
            self.err(
                Diagnostic::value(
                    here,
                    format!(
                        "axis {a} has {} elements, which {p} ranks cannot share equally",
                        state.shape[a]
                    ),
                )
                .help(format!("make shape[{a}] a multiple of {p}")),
            );
            return false;
        }
        true
    }

    fn step(&mut self, i: usize, step: &Step) -> StepInfo {
        let info = StepInfo {
            op: step.op(),
            name: step
                .common()
                .name
                .clone()
                .unwrap_or_else(|| format!("{}#{i}", step.op())),
            inputs: step.inputs().iter().map(|(_, n)| n.to_string()).collect(),
            outputs: step
                .output()
                .map(|(_, n)| vec![n.to_string()])
                .unwrap_or_default(),
            matmul: None,
            input_states: Vec::new(),
            output_state: None,
        };
        let ins: Vec<Option<TensorState>> = step
            .inputs()
            .iter()
            .map(|(key, name)| self.input(i, key, name))
            .collect();
        if ins.iter().any(Option::is_none) {
            return info;
        }
        let ins: Vec<TensorState> = ins.into_iter().flatten().collect();
        let mut info = info;
        info.input_states = ins.clone();
        let result = match step {
            Step::Matmul(m) => return self.matmul(i, m, &ins, info),
            Step::Fft(f) => self.fft(i, f, &ins[0]),
            Step::Redistribute(r) => self.redistribute(i, r, &ins[0]),
            Step::Barrier(_) => None,
            _ => self.collective(i, step, &ins[0]).map(|dist| TensorState {
                dist,
                ..ins[0].clone()
            }),
        };
        if let (Some(out), Some((key, name))) = (result, step.output()) {
            self.write(i, key, name, out.clone(), key == "input");
            // The result as stored: a declared output keeps its declared layout.
            info.output_state = Some(self.current.get(name).cloned().unwrap_or(out));
        }
        info
    }

    fn redistribute(
        &mut self,
        i: usize,
        r: &crate::spec::step::Redistribute,
        x: &TensorState,
    ) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(i).key("distribution");
        if r.distribution == Distribution::Partial {
            self.err(
                Diagnostic::value(here, "redistribute cannot make a partial tensor").help(
                    "partial tensors come from an init; reduce them with all_reduce or reduce_scatter",
                ),
            );
            return None;
        }
        let moved = x.dist != Distribution::Partial;
        if !self.expect_dist(i, "input", &r.input, &x.dist, "non-partial", moved) {
            return None;
        }
        let found = dist::check(&r.distribution, &x.shape, self.ranks, &here);
        let ok = found.is_empty();
        self.diags.extend(found);
        ok.then(|| TensorState {
            dist: r.distribution.clone(),
            layout: r.layout.unwrap_or(x.layout),
            ..x.clone()
        })
    }

    /// The root holding `x` when the step's own `root` (if given) agrees with it.
    fn root_of(
        &mut self,
        i: usize,
        given: Option<u32>,
        input: &str,
        x: &TensorState,
    ) -> Option<u32> {
        let Distribution::Root(r) = x.dist else {
            self.expect_dist(i, "input", input, &x.dist, "root", false);
            return None;
        };
        if let Some(given) = given.filter(|&g| g != r) {
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(i).key("root"),
                    format!("root = {given} but `{input}` is held by rank {r}"),
                )
                .help(format!("leave root out, or set it to {r}")),
            );
            return None;
        }
        Some(r)
    }

    /// Checks a collective and returns the distribution of its result.
    fn collective(&mut self, i: usize, step: &Step, x: &TensorState) -> Option<Distribution> {
        let here = KeyPath::root().key("steps").index(i);
        let partial = x.dist == Distribution::Partial;
        let is_slab = matches!(x.dist, Distribution::Slab(_));
        let slab0 = matches!(x.dist, Distribution::Slab(a) if a.index() == 0);
        match step {
            Step::AllReduce(s) => {
                self.check_reduce(i, s.reduce, x.dtype);
                self.expect_dist(i, "input", &s.input, &x.dist, "partial", partial)
                    .then_some(Distribution::Replicated)
            }
            Step::Reduce(s) => {
                self.check_reduce(i, s.reduce, x.dtype);
                let root = self.check_root(i, "root", s.root);
                (self.expect_dist(i, "input", &s.input, &x.dist, "partial", partial) && root)
                    .then_some(Distribution::Root(s.root))
            }
            Step::Broadcast(s) => self
                .root_of(i, s.root, &s.input, x)
                .map(|_| Distribution::Replicated),
            Step::AllGather(s) => self
                .expect_dist(i, "input", &s.input, &x.dist, "slab", is_slab)
                .then_some(Distribution::Replicated),
            Step::ReduceScatter(s) => {
                self.check_reduce(i, s.reduce, x.dtype);
                let even = self.check_divisible(i, s.axis, x);
                (self.expect_dist(i, "input", &s.input, &x.dist, "partial", partial) && even)
                    .then(|| Distribution::slab(s.axis.index()))
            }
            Step::AllToAll(s) => {
                let p = self.ranks;
                let square = x.shape.len() >= 2
                    && x.shape[0] == x.shape[1]
                    && p.is_none_or(|p| x.shape[0] == p);
                if !square {
                    let want = p.map_or("P".to_string(), |p| p.to_string());
                    self.err(
                        Diagnostic::value(
                            here.key("input"),
                            format!(
                                "all_to_all needs shape [{want}, {want}, ...], but `{}` has {:?}",
                                s.input, x.shape
                            ),
                        )
                        .help("row j of rank r's piece goes to rank j: the first two axes are the rank count"),
                    );
                    return None;
                }
                self.expect_dist(i, "input", &s.input, &x.dist, "{ slab = 0 }", slab0)
                    .then(|| Distribution::slab(1))
            }
            Step::Gather(s) => {
                let root = self.check_root(i, "root", s.root);
                (self.expect_dist(i, "input", &s.input, &x.dist, "slab", is_slab) && root)
                    .then_some(Distribution::Root(s.root))
            }
            Step::Scatter(s) => {
                self.root_of(i, s.root, &s.input, x)?;
                self.check_divisible(i, s.axis, x)
                    .then(|| Distribution::slab(s.axis.index()))
            }
            Step::SendRecv(s) => {
                let pairs_ok = self.check_send_recv(i, s, x);
                (self.expect_dist(i, "input", &s.input, &x.dist, "{ slab = 0 }", slab0) && pairs_ok)
                    .then(|| x.dist.clone())
            }
            _ => None,
        }
    }

    fn check_send_recv(
        &mut self,
        i: usize,
        s: &crate::spec::step::SendRecv,
        x: &TensorState,
    ) -> bool {
        let here = KeyPath::root().key("steps").index(i);
        let mut ok = true;
        if let Some(p) = self.ranks.filter(|&p| x.shape[0] != p) {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("input"),
                    format!(
                        "send_recv needs shape [{p}, ...] (one row per rank), but `{}` has {:?}",
                        s.input, x.shape
                    ),
                )
                .help("rank r holds row r"),
            );
        }
        let mut receivers = std::collections::HashMap::new();
        for (j, [src, dst]) in s.pairs.iter().flatten().enumerate() {
            if let Some(p) = self.ranks.filter(|&p| u64::from(*src.max(dst)) >= p) {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key("pairs").index(j),
                        format!(
                            "pair [{src}, {dst}] names a rank that does not exist with {p} ranks"
                        ),
                    )
                    .help(format!("use ranks 0 to {}", p - 1)),
                );
            }
            if let Some(k) = receivers.insert(*dst, j) {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key("pairs").index(j),
                        format!("rank {dst} receives twice (pairs {k} and {j})"),
                    )
                    .help("each rank receives at most one row"),
                );
            }
        }
        ok
    }

    fn matmul(
        &mut self,
        i: usize,
        m: &crate::spec::step::Matmul,
        ins: &[TensorState],
        mut info: StepInfo,
    ) -> StepInfo {
        let here = KeyPath::root().key("steps").index(i);
        let (a, b) = (&ins[0], &ins[1]);
        let c = m.c.as_ref().map(|_| &ins[2]);
        let bias = m.bias.as_ref().map(|_| ins.last().expect("bias is read"));
        let mut ok = true;
        for (key, name, t) in [("a", &m.a, a), ("b", &m.b, b)] {
            if t.shape.len() != 2 {
                ok = false;
                self.err(Diagnostic::value(
                    here.key(key),
                    format!(
                        "matmul needs a matrix, but `{name}` has shape {:?}",
                        t.shape
                    ),
                ));
            }
        }
        if !a.dtype.is_float() {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("a"),
                    format!("matmul does not take {} tensors", a.dtype),
                )
                .help("use f16, bf16, f32, f64, c64 or c128"),
            );
        }
        for (key, name, t) in [
            ("b", Some(&m.b), Some(b)),
            ("c", m.c.as_ref(), c),
            ("bias", m.bias.as_ref(), bias),
        ] {
            if let (Some(name), Some(t)) = (name, t)
                && t.dtype != a.dtype
            {
                ok = false;
                self.err(Diagnostic::value(
                    here.key(key),
                    format!(
                        "`{name}` is {} but `{}` is {}: matmul operands share one dtype",
                        t.dtype, m.a, a.dtype
                    ),
                ));
            }
        }
        for (key, t) in [
            ("conjugate_a", m.conjugate_a && !m.transpose_a),
            ("conjugate_b", m.conjugate_b && !m.transpose_b),
        ] {
            if t {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key(key),
                        format!("{key} needs transpose_{}", &key[10..]),
                    )
                    .help("cuBLASMp conjugates only transposed operands: set both"),
                );
            }
        }
        if (m.conjugate_a || m.conjugate_b) && !a.dtype.is_complex() {
            ok = false;
            let key = if m.conjugate_a {
                "conjugate_a"
            } else {
                "conjugate_b"
            };
            self.err(Diagnostic::value(
                here.key(key),
                format!("conjugation applies to complex dtypes, not {}", a.dtype),
            ));
        }
        match (m.epilog.map(|e| e.needs_bias()), &m.bias) {
            (Some(true), None) => {
                ok = false;
                self.err(Diagnostic::value(
                    here.key("epilog"),
                    "this epilog adds a bias: name a `bias` tensor",
                ));
            }
            (Some(false) | None, Some(_)) => {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key("bias"),
                        "a bias is read only by the bias, relu_bias and gelu_bias epilogs",
                    )
                    .help("set epilog, or remove bias"),
                );
            }
            _ => {}
        }
        if a.dtype.is_complex() && crate::ops::matmul::epilog::nonlinear(m.epilog) {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("epilog"),
                    format!("relu and gelu apply to real dtypes, not {}", a.dtype),
                )
                .help("complex matmuls take the bias epilog only"),
            );
        }
        if m.beta != 0.0 && m.c.is_none() {
            ok = false;
            self.err(
                Diagnostic::value(here.key("beta"), "beta scales c, but there is no c")
                    .help("name a `c` tensor, or remove beta"),
            );
        }
        for (key, name, t) in [
            ("a", Some(&m.a), Some(a)),
            ("b", Some(&m.b), Some(b)),
            ("c", m.c.as_ref(), c),
        ] {
            if let (Some(name), Some(t)) = (name, t)
                && t.dist == Distribution::Partial
            {
                ok = false;
                self.expect_dist(i, key, name, &t.dist, "non-partial", false);
            }
        }
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return info;
        }
        let (m_, k_a) = if m.transpose_a {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (k_b, n_) = if m.transpose_b {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        if k_a != k_b {
            self.err(
                Diagnostic::value(
                    here.key("b"),
                    format!(
                        "inner dimensions differ: op(a) is {m_}x{k_a} ({}{:?}) and op(b) is {k_b}x{n_} ({}{:?})",
                        if m.transpose_a { "transposed " } else { "" },
                        a.shape,
                        if m.transpose_b { "transposed " } else { "" },
                        b.shape
                    ),
                )
                .help("set transpose_a or transpose_b, or fix the shapes"),
            );
            return info;
        }
        if let Some(c) = c
            && c.shape != [m_, n_]
        {
            ok = false;
            self.err(Diagnostic::value(
                here.key("c"),
                format!(
                    "c must be {m_}x{n_} like the result, but has shape {:?}",
                    c.shape
                ),
            ));
        }
        if let Some(bias) = bias
            && bias.shape != [m_]
        {
            ok = false;
            self.err(Diagnostic::value(
                here.key("bias"),
                format!(
                    "bias must be a vector of {m_} (one per row of the result), but has shape {:?}",
                    bias.shape
                ),
            ));
        }
        // The algorithm depends on the distributions alone: it is checked (and a forced one
        // refused) even when the errors above keep the step from resolving.
        let declared = self
            .loaded
            .spec
            .tensors
            .get(&m.out)
            .and_then(|t| t.distribution.clone());
        if let Some(d) = &declared {
            let found = dist::check(
                d,
                &[m_, n_],
                self.ranks,
                &KeyPath::root()
                    .key("tensors")
                    .key(&m.out)
                    .key("distribution"),
            );
            if !found.is_empty() {
                return info;
            }
        }
        let out_bytes = byte_size(&[m_, n_], a.dtype).unwrap_or(u64::MAX);
        let case = MatmulCase {
            a: &a.dist,
            b: &b.dist,
            c: c.map(|c| &c.dist),
            out: declared.as_ref(),
            transpose: (m.transpose_a, m.transpose_b),
            bytes: (
                byte_size(&a.shape, a.dtype).unwrap_or(u64::MAX),
                byte_size(&b.shape, b.dtype).unwrap_or(u64::MAX),
                out_bytes,
            ),
            ranks: self.ranks,
            pipeline: m.pipeline,
        };
        match matmul::choose(&case, m.algorithm) {
            Ok(_) if !ok => {}
            Ok(choice) => {
                let out = TensorState {
                    shape: vec![m_, n_],
                    dtype: a.dtype,
                    layout: a.layout,
                    dist: choice.out.clone(),
                };
                self.write(i, "out", &m.out, out.clone(), false);
                info.output_state = Some(self.current.get(&m.out).cloned().unwrap_or(out));
                info.matmul = Some(choice);
            }
            Err(e) => self.err(Diagnostic::value(here.key("algorithm"), e)),
        }
        info
    }

    fn fft(
        &mut self,
        i: usize,
        f: &crate::spec::step::Fft,
        x: &TensorState,
    ) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(i);
        let nd = x.shape.len();
        if !(2..=3).contains(&nd) {
            self.err(Diagnostic::value(
                here.key("input"),
                format!(
                    "fft transforms 2-D or 3-D tensors, but `{}` has shape {:?}",
                    f.input, x.shape
                ),
            ));
            return None;
        }
        let (want, out_dtype) = match f.kind {
            FftKind::C2c => (x.dtype.is_complex(), Some(x.dtype)),
            FftKind::R2c => (
                matches!(x.dtype, DType::F32 | DType::F64),
                x.dtype.to_complex(),
            ),
            FftKind::C2r => (x.dtype.is_complex(), x.dtype.to_real()),
        };
        if !want {
            let need = match f.kind {
                FftKind::R2c => "f32 or f64",
                _ => "c64 or c128",
            };
            self.err(
                Diagnostic::value(
                    here.key("input"),
                    format!(
                        "a {:?} fft takes {need}, but `{}` is {}",
                        f.kind, f.input, x.dtype
                    )
                    .to_lowercase(),
                )
                .help("kind = \"c2c\" takes complex, \"r2c\" real, \"c2r\" complex input"),
            );
            return None;
        }
        let out_dtype = out_dtype.expect("kind and dtype agree");
        let needed = match f.kind {
            FftKind::R2c => Some(FftDirection::Forward),
            FftKind::C2r => Some(FftDirection::Inverse),
            FftKind::C2c => None,
        };
        if let Some(d) = needed.filter(|&d| d != f.direction) {
            let name = if d == FftDirection::Forward {
                "forward"
            } else {
                "inverse"
            };
            self.err(
                Diagnostic::value(
                    here.key("direction"),
                    format!("a {:?} fft runs {name}", f.kind).to_lowercase(),
                )
                .help(format!(
                    "set direction = \"{name}\", or leave it out for r2c"
                )),
            );
            return None;
        }
        if f.kind != FftKind::C2c && f.out.is_none() {
            self.err(
                Diagnostic::value(
                    here.clone(),
                    format!("{:?} changes the dtype, so it cannot run in place", f.kind)
                        .to_lowercase(),
                )
                .help("name an `out` tensor"),
            );
            return None;
        }
        let mut shape = x.shape.clone();
        let last = nd - 1;
        let declared = f.out.as_ref().and_then(|o| self.loaded.spec.tensors.get(o));
        match f.kind {
            FftKind::C2c => {}
            FftKind::R2c => shape[last] = x.shape[last] / 2 + 1,
            FftKind::C2r => {
                shape[last] = match declared {
                    Some(d) if d.shape.len() == nd && d.shape[last] / 2 + 1 == x.shape[last] => {
                        d.shape[last]
                    }
                    _ => 2 * x.shape[last].saturating_sub(1),
                }
            }
        }
        // A declared output fixes its distribution: the result moves there after the
        // transform (not partial: every rank would need the whole result).
        let declared_dist = declared
            .and_then(|d| d.distribution.clone())
            .filter(|d| *d != Distribution::Partial);
        let slab_input = matches!(&x.dist, Distribution::Slab(a) if a.index() < 2);
        let dist = match (&x.dist, f.reshape) {
            _ if (slab_input || matches!(x.dist, Distribution::Boxes(_)))
                && let Some(d) = declared_dist =>
            {
                d
            }
            (Distribution::Slab(_), true) if slab_input => x.dist.clone(),
            (Distribution::Slab(a), false) if slab_input => Distribution::slab(1 - a.index()),
            (Distribution::Boxes(_), true) if f.kind == FftKind::C2c => x.dist.clone(),
            (Distribution::Boxes(_), _) => {
                self.err(
                    Diagnostic::value(here.clone(), "an fft of boxes needs the output's distribution: declare the out tensor (boxes, as nvmath-python pairs them, or any other)")
                        .help("a c2c fft with reshape = true may leave it undeclared: the result keeps the input's boxes"),
                );
                return None;
            }
            _ => {
                self.expect_dist(
                    i,
                    "input",
                    &f.input,
                    &x.dist,
                    "{ slab = 0 }, { slab = 1 } or boxes",
                    false,
                );
                return None;
            }
        };
        if let Some(p) = self.ranks
            && matches!(x.dist, Distribution::Slab(_))
            && (x.shape[0] < p || x.shape[1] < p)
        {
            self.err(
                Diagnostic::value(
                    here.key("input"),
                    format!(
                        "a slab fft of shape {:?} on {p} ranks leaves a rank without rows",
                        x.shape
                    ),
                )
                .help(format!(
                    "the first two axes need at least {p} elements each"
                )),
            );
            return None;
        }
        Some(TensorState {
            shape,
            dtype: out_dtype,
            layout: x.layout,
            dist,
        })
    }

    fn check_output(&mut self) {
        let here = KeyPath::root().key("output").key("tensors");
        let names: Vec<String> = self.tensors.keys().cloned().collect();
        for (j, name) in self.loaded.spec.output.tensors.iter().enumerate() {
            if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
                self.err(
                    Diagnostic::value(
                        here.index(j),
                        format!("tensor `{name}` cannot be written: its name is not a plain, visible file name"),
                    )
                    .help("its files are NAME.npy and NAME.rankR.npy: rename it without `/`, `\\` or a leading `.`"),
                );
                continue;
            }
            let written = self.tensors.get(name).is_some_and(|t| !t.states.is_empty());
            // A tensor whose writing step has errors of its own needs no second report.
            let attempted = self
                .loaded
                .spec
                .steps
                .iter()
                .any(|s| s.output().is_some_and(|(_, o)| o == name));
            if written || attempted {
                continue;
            }
            let d = if self.tensors.contains_key(name) {
                Diagnostic::value(
                    here.index(j),
                    format!(
                        "tensor `{name}` is never written: it has no init and no step writes it"
                    ),
                )
            } else {
                Diagnostic::value(here.index(j), format!("no tensor named `{name}`"))
                    .choices(name, &names)
            };
            self.err(d);
        }
    }
}
