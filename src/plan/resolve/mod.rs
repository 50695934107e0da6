//! The meaning pass: follows the steps in order, resolving every tensor a step makes or changes
//! (shape, dtype, layout, distribution) and reporting every inconsistency at once. Here: the
//! runtime, the tensors, the steps' inputs and outputs and the written tensors; each op's own
//! check is its [`Op::resolve`](crate::ops::Op::resolve), with the rules several share in `rules`.

use super::StepPlan;
use crate::dist::{self, TensorState};
use crate::ops::Step;
use crate::spec::Loaded;
use crate::spec::diag::{Diagnostic, KeyPath, did_you_mean};
use crate::spec::model::{CommBackend, Device, DeviceMap, ProcessGroup};
use crate::spec::step::ReduceOp;
use crate::spec::tensor::{Axis, DType, Distribution, Init, TensorSpec};
use indexmap::IndexMap;
use std::collections::HashMap;

mod rules;
mod values;

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

/// The result of the meaning pass.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Every tensor that exists at some point, in declaration then creation order.
    pub tensors: IndexMap<String, TensorInfo>,
    /// Every step.
    pub steps: Vec<StepPlan>,
}

/// How many errors naming no tensor get a guess at the name meant.
const GUESSES: usize = 20;

/// The meaning pass as it follows the steps: what each op's check reads (the spec, the rank
/// count, the tensors' states so far) and where it reports problems.
pub struct Resolver<'a> {
    /// The spec.
    pub(crate) loaded: &'a Loaded,
    /// Guesses left (see [`GUESSES`]).
    guesses: usize,
    /// The steps that write each name, in order (some may have errors of their own).
    writers: HashMap<&'a str, Vec<usize>>,
    /// The rank count (None: the checks that do not depend on it).
    pub(crate) ranks: Option<u64>,
    tensors: IndexMap<String, TensorInfo>,
    /// The state of each tensor now (tensors not yet written are absent).
    current: IndexMap<String, TensorState>,
    /// The problems found so far.
    pub(crate) diags: Vec<Diagnostic>,
}

/// The most ranks a spec is planned or run for: 2^17 (131,072), more than the largest machines
/// have GPUs (Frontier: 75,264 GCDs), and a plan that takes a fraction of a second.
pub const MAX_RANKS: u64 = 1 << 17;

/// Runs the meaning checks for a rank count (None: the checks that do not depend on it).
pub fn resolve(loaded: &Loaded, ranks: Option<u64>) -> Result<Resolved, Vec<Diagnostic>> {
    let mut writers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, step) in loaded.spec.steps.iter().enumerate() {
        if let Some((_, name)) = step.output() {
            writers.entry(name).or_default().push(i);
        }
    }
    let mut r = Resolver {
        loaded,
        guesses: GUESSES,
        writers,
        ranks,
        tensors: IndexMap::new(),
        current: IndexMap::new(),
        diags: Vec::new(),
    };
    if let Some(p) = ranks.filter(|&p| p > MAX_RANKS) {
        // Nothing is resolved for such a count: a plan holds every rank's pieces.
        r.ranks = None;
        // The spec's own runtime.ranks is reported at its key.
        if loaded.spec.runtime.ranks.map(u64::from) != Some(p) {
            r.err(too_many_ranks(KeyPath::root(), p));
        }
    }
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

/// A distribution as a spec writes it, for messages.
pub(crate) fn dist_name(d: &Distribution) -> String {
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

/// The error for a rank count above [`MAX_RANKS`].
fn too_many_ranks(at: KeyPath, p: u64) -> Diagnostic {
    Diagnostic::value(
        at,
        format!("rank count too large: {p} (at most {MAX_RANKS})"),
    )
    .help("a plan holds every rank's pieces: plan or run for fewer ranks")
}

impl Resolver<'_> {
    /// Reports a problem.
    pub(crate) fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn check_runtime(&mut self) {
        let rt = &self.loaded.spec.runtime;
        let here = KeyPath::root().key("runtime");
        if let Some(p) = rt.ranks.map(u64::from).filter(|&p| p > MAX_RANKS) {
            self.err(too_many_ranks(here.key("ranks"), p));
        }
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
        if rt.process_group == ProcessGroup::Tcp && rt.device == Device::Cpu {
            self.err(
                Diagnostic::value(
                    here.key("process_group"),
                    "ranks joined over tcp only coordinate: the cpu device moves data through mpi",
                )
                .help("use process_group = \"mpi\" (start with mpiexec), or device = \"cuda\""),
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
            self.check_tensor(name, t, &KeyPath::root().key("tensors").key(name));
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
    fn check_tensor(&mut self, name: &str, t: &TensorSpec, here: &KeyPath) {
        if let Some(message) = values::control_character("tensor", name) {
            self.err(Diagnostic::key(here.clone(), message));
        }
        // A partial tensor's init numbers the stacked [P, *shape].
        let stacked = match (&t.distribution, self.ranks) {
            (Some(Distribution::Partial), Some(p)) => p,
            _ => 1,
        };
        let count = t.shape.iter().try_fold(stacked, |n, &s| n.checked_mul(s));
        self.diags
            .extend(values::init_problems(t, count.unwrap_or(u64::MAX), here));
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
                self.err(Diagnostic::value(here.clone(), e.message).help(e.help));
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
        let writers = self.writers.get(name).map_or(&[][..], Vec::as_slice);
        // An earlier step that writes it has errors of its own: no second report.
        if writers.first().is_some_and(|&j| j < step) {
            return None;
        }
        let later = writers.iter().copied().find(|&j| j > step);
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
            let d = Diagnostic::value(here, format!("no tensor named `{name}`"));
            match self.tensors.is_empty() {
                true => d.help("declare it under [tensors]"),
                false => self.name_hint(d, name),
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
            if !in_place {
                self.check_declared(step, (key, name), &state, decl);
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

    /// Checks step `step`'s result `state` against the declaration of the tensor it writes
    /// (named at `key`): the same shape, dtype and, where declared, distribution.
    fn check_declared(
        &mut self,
        step: usize,
        (key, name): (&str, &str),
        state: &TensorState,
        decl: &TensorSpec,
    ) {
        let here = KeyPath::root().key("steps").index(step).key(key);
        let op = self.loaded.spec.steps[step].op();
        if decl.shape != state.shape {
            let message = format!(
                "{op} makes shape {:?}, but tensors.{name} declares {:?}",
                state.shape, decl.shape
            );
            self.err(Diagnostic::value(here.clone(), message));
        }
        if decl.dtype != state.dtype {
            let message = format!(
                "{op} makes {}, but tensors.{name} declares {}",
                state.dtype, decl.dtype
            );
            self.err(Diagnostic::value(here, message));
        }
        if let Some(d) = &decl.distribution
            && *d != state.dist
        {
            let at = KeyPath::root().key("tensors").key(name).key("distribution");
            let message = format!(
                "step {step} ({op}) makes `{name}` {}, but it is declared {}",
                dist_name(&state.dist),
                dist_name(d)
            );
            let help = format!(
                "declare tensors.{name}.distribution = {}, or leave it out",
                dist_name(&state.dist)
            );
            self.err(Diagnostic::value(at, message).help(help));
        }
    }

    fn step(&mut self, i: usize, step: &Step) -> StepPlan {
        if let Some(name) = &step.common().name
            && let Some(message) = values::control_character("step name", name)
        {
            let at = KeyPath::root().key("steps").index(i).key("name");
            self.err(Diagnostic::value(at, message));
        }
        let info = StepPlan {
            step: step.clone(),
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
            memory: Default::default(),
            figures: Default::default(),
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
        let result = step.as_op().resolve(self, i, &ins, &mut info);
        if let (Some(out), Some((key, name))) = (result, step.output()) {
            self.write(i, key, name, out.clone(), key == "input");
            // The result as stored: a declared output keeps its declared layout.
            info.output_state = Some(self.current.get(name).cloned().unwrap_or(out));
        }
        info
    }

    /// The hint of an error naming no tensor: a guess among the tensors (for the first
    /// [`GUESSES`] such errors: a guess reads every name) and the first of their names.
    fn name_hint(&mut self, d: Diagnostic, name: &str) -> Diagnostic {
        let names = self.tensors.keys().map(String::as_str);
        let guess = match self.guesses {
            0 => None,
            _ => {
                self.guesses -= 1;
                let all: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
                did_you_mean(name, &all).map(str::to_string)
            }
        };
        d.listing(guess.as_deref(), names, self.tensors.len(), "known tensors")
    }

    /// A written tensor (at `at`) whose name is too long for its files: the last rank's shard
    /// (rank 0 where the rank count is unknown), under its temporary name while written, must
    /// fit the file name limit of common filesystems.
    fn too_long(&self, name: &str, at: KeyPath) -> Option<Diagnostic> {
        use crate::output::rundir::{NAME_MAX, abbreviate, written_name_len};
        let file = crate::output::shard_file(name, self.ranks.map_or(0, |p| p - 1));
        let over = written_name_len(&file)
            .checked_sub(NAME_MAX)
            .filter(|&n| n > 0)?;
        let message = format!(
            "tensor `{}` cannot be written: its name is {} bytes, too long for its files' names \
             (`NAME.rankR.npy`, written as `.NAME.rankR.npy.tmp-PID`: at most {NAME_MAX} bytes)",
            abbreviate(name),
            name.len()
        );
        let most = name.len().saturating_sub(over);
        Some(Diagnostic::value(at, message).help(format!("shorten it to at most {most} bytes")))
    }

    fn check_output(&mut self) {
        let here = KeyPath::root().key("output").key("tensors");
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
            if let Some(d) = self.too_long(name, here.index(j)) {
                self.err(d);
                continue;
            }
            let written = self.tensors.get(name).is_some_and(|t| !t.states.is_empty());
            // A tensor whose writing step has errors of its own needs no second report.
            if written || self.writers.contains_key(name.as_str()) {
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
                let d = Diagnostic::value(here.index(j), format!("no tensor named `{name}`"));
                self.name_hint(d, name)
            };
            self.err(d);
        }
    }
}
