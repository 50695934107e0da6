//! What the data-movement ops (redistribute and the collectives) share: the [`Collective`] trait
//! each implements (its meaning, its kernel, its memory, its bandwidth, its check), which makes
//! it an [`Op`]; and the prepared step that runs a kernel over the backend, with its scratch
//! buffers made before the timed iterations, a change of layout after it, and NVSHMEM puts where
//! its result is symmetric.

use super::exchange::Side;
use super::movement::{Movement, PutPlan, Route, local_bytes, staged_bytes};
use super::{Op, movement_check};
use crate::backend::Backend;
use crate::backend::work::{Run, Runs};
use crate::dist::TensorState;
use crate::exec::{StepRun, pick_via};
use crate::plan::StepPlan;
use crate::plan::figures::Figures;
use crate::plan::memory::Needs;
use crate::plan::resolve::Resolver;
use crate::runtime::comm::Parts;
use crate::spec::model::CommBackend;
use crate::spec::step::{ReduceOp, StepCommon};
use crate::spec::tensor::{DType, Distribution};
use anyhow::Result;

/// The keys of a data-movement step.
pub struct Keys<'a> {
    /// The keys every step takes.
    pub common: &'a StepCommon,
    /// The tensor it reads.
    pub input: &'a str,
    /// The tensor it writes (None: in place, into `input`).
    pub out: Option<&'a str>,
}

impl<'a> Keys<'a> {
    /// The keys of a step reading `input` and writing `out` (None: in place).
    pub fn new(common: &'a StepCommon, input: &'a str, out: Option<&'a str>) -> Self {
        Keys { common, input, out }
    }
}

/// A movement's two ends and the rank count.
#[derive(Debug, Clone, Copy)]
pub struct Moving<'a> {
    /// The input's state.
    pub input: &'a TensorState,
    /// The result's state, as stored.
    pub output: &'a TensorState,
    /// The rank count.
    pub ranks: u64,
}

impl Moving<'_> {
    /// Bytes of `rank`'s piece of `state`.
    pub fn piece(&self, state: &TensorState, rank: u64) -> u64 {
        local_bytes(state, self.ranks, rank) as u64
    }

    /// The result in the input's layout: what a kernel that keeps the layout makes.
    pub fn kept_layout(&self) -> TensorState {
        TensorState {
            layout: self.input.layout,
            ..self.output.clone()
        }
    }

    /// Bytes of the result in the input's layout before its change of layout (none where the
    /// layouts agree).
    pub fn relayout_bytes(&self, rank: u64) -> u64 {
        match self.input.layout == self.output.layout {
            true => 0,
            false => self.piece(&self.kept_layout(), rank),
        }
    }

    /// Bytes of the f32 copies of both ends that the CPU reduces half types in.
    pub fn widened_bytes(&self, rank: u64) -> u64 {
        match self.input.dtype {
            DType::F16 | DType::Bf16 => {
                2 * (self.piece(self.input, rank) + self.piece(self.output, rank))
            }
            _ => 0,
        }
    }

    /// The exchange from the input to the result, planned for `rank`.
    pub fn movement(&self, rank: u64) -> Movement {
        Movement::new(self.input, self.output, self.ranks, rank)
    }

    /// Bytes of an exchange's scratch from the input to the result (see [`staged_bytes`]).
    pub fn exchange_bytes(&self, rank: u64) -> u64 {
        let to = Side::of(self.output);
        staged_bytes(self.input, &to, self.ranks, rank) - self.piece(self.output, rank)
    }

    /// Bytes of a whole tensor in a state.
    pub fn whole(state: &TensorState) -> f64 {
        state.shape.iter().product::<u64>() as f64 * state.dtype.size() as f64
    }

    /// nccl-tests' `(P - 1) / P`.
    pub fn spread(&self) -> f64 {
        (self.ranks as f64 - 1.0) / self.ranks as f64
    }
}

/// What a data-movement step's check compares.
pub enum Expect {
    /// The input's elements, moved exactly; for a send_recv the source row of every row of the
    /// result (None: nobody sends it, zeros).
    Moved(Option<Vec<Option<u64>>>),
    /// The input's pieces combined by the operator.
    Reduced(ReduceOp),
}

/// A data-movement op; implementing it makes the op an [`Op`].
pub trait Collective {
    /// Its keys.
    fn keys(&self) -> Keys<'_>;

    /// The meaning check of step `i`: the result's state from the input's `x`, or None (the
    /// problem reported to `r`).
    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState>;

    /// What moves this rank's piece (default: an exchange from the input's distribution and
    /// layout to the result's).
    fn kernel(&self, m: &Moving<'_>, rank: u64) -> Result<Kernel> {
        Ok(Kernel::Move(Box::new(m.movement(rank))))
    }

    /// Bytes the prepared step holds on a rank beyond its input and result, by rank (what every
    /// rank shares is worked out once; default: the exchange's scratch).
    fn workspace<'a>(&'a self, m: Moving<'a>) -> Box<dyn Fn(u64) -> u64 + 'a> {
        Box::new(move |rank| m.exchange_bytes(rank))
    }

    /// nccl-tests' bytes and bus factor for the step (`sent`: the most bytes a rank sent).
    fn bandwidth(&self, m: &Moving<'_>, sent: f64) -> (f64, f64);

    /// What its check compares (default: the input's elements, moved).
    fn expect(&self, _ranks: u64) -> Expect {
        Expect::Moved(None)
    }
}

impl<C: Collective> Op for C {
    fn common(&self) -> &StepCommon {
        self.keys().common
    }

    fn inputs(&self) -> Vec<(&'static str, &str)> {
        vec![("input", self.keys().input)]
    }

    fn output(&self) -> Option<(&'static str, &str)> {
        let keys = self.keys();
        Some(match keys.out {
            Some(out) => ("out", out),
            None => ("input", keys.input),
        })
    }

    fn resolve(
        &self,
        r: &mut Resolver<'_>,
        i: usize,
        ins: &[TensorState],
        _plan: &mut StepPlan,
    ) -> Option<TensorState> {
        self.result(r, i, &ins[0])
    }

    fn needs<'a>(&'a self, planned: &'a StepPlan, out: &'a TensorState, ranks: u64) -> Needs<'a> {
        let input = &planned.input_states[0];
        let m = Moving {
            input,
            output: out,
            ranks,
        };
        let reduces = matches!(self.expect(ranks), Expect::Reduced(_));
        Needs {
            run: self.workspace(m),
            check: Box::new(movement_check::workspace(reduces, input, out, ranks)),
            // A movement puts straight into its result, a tensor on the heap already.
            puts: Vec::new(),
        }
    }

    /// Its kernel: an exchange, or the backend's reduction, broadcast or rows.
    fn describe(&self, planned: &StepPlan, ranks: u64) -> Option<(String, String)> {
        let (input, output) = (
            planned.input_states.first()?,
            planned.output_state.as_ref()?,
        );
        let kernel = self
            .kernel(
                &Moving {
                    input,
                    output,
                    ranks,
                },
                0,
            )
            .ok()?;
        let (name, detail) = match kernel {
            Kernel::Move(_) => (
                "exchange",
                "one all-to-all-v of the pieces each rank needs (NCCL or puts on GPUs, MPI on \
                 CPUs)"
                    .to_string(),
            ),
            Kernel::AllReduce(op) => ("all_reduce", format!("{} over every rank", op.name())),
            Kernel::Reduce(op, root) => ("reduce", format!("{} to rank {root}", op.name())),
            Kernel::ReduceScatter { runs, op, .. } => (
                "reduce_scatter",
                format!(
                    "{}{} of each rank's block",
                    if runs.is_some() {
                        "packed in rank order, then "
                    } else {
                        ""
                    },
                    op.name()
                ),
            ),
            Kernel::Broadcast(root) => ("broadcast", format!("from rank {root}")),
            Kernel::SendRecv { .. } => ("send_recv", "whole rows, rank to rank".to_string()),
        };
        Some((name.to_string(), detail))
    }

    /// nccl-tests' size: what the step's algbw divides by.
    fn figures(&self, planned: &StepPlan, ranks: u64) -> Figures {
        let mut f = Figures::of_input(planned, ranks);
        if let (Some(input), Some(output)) = (planned.input_states.first(), &planned.output_state) {
            let (bytes, _) = self.bandwidth(
                &Moving {
                    input,
                    output,
                    ranks,
                },
                0.0,
            );
            f.set_bytes(bytes as u64, input.dtype);
        }
        f
    }

    fn run<B: Backend>(&self, run: &mut StepRun<'_, B>) -> Result<Option<B::Buf>> {
        run_collective(self, run).map(Some)
    }
}

/// The input's state with another distribution: a collective's result.
pub fn redistributed(x: &TensorState, dist: Distribution) -> TensorState {
    TensorState { dist, ..x.clone() }
}

/// A collective or redistribution into its symmetric place where it has one (unless in place):
/// by NCCL or puts (trials), its bytes for the bandwidth, and its check against its actual input
/// (an exact fingerprint for a move, the reduction recomputed for a reducing step).
fn run_collective<B: Backend, C: Collective>(c: &C, run: &mut StepRun<'_, B>) -> Result<B::Buf> {
    let (b, input) = (run.b, run.inputs[0]);
    let ranks = b.ranks() as u64;
    let m = Moving {
        input: run.input_state(0),
        output: run.out_state(),
        ranks,
    };
    let dest = match run.in_place() {
        true => None,
        false => run.dest.take(),
    };
    let kernel = c.kernel(&m, b.rank() as u64)?;
    let mut prepared = Prepared::new(b, kernel, m.input, m.output, dest)?;
    if prepared.can_put() {
        let trial = |p: &mut Prepared<B>| p.run(b, input);
        run.record.via = Some(pick_via(
            b,
            run.timing(),
            &mut prepared,
            Prepared::set_via,
            trial,
        )?);
    }
    run.record.times = run.timed(|| prepared.run(b, input))?;
    let sent = b.max_over_ranks(prepared.sent_bytes as f64)?;
    run.record.bandwidth = Some(c.bandwidth(&m, sent));
    let mut out = prepared.into_output();
    run.corrupt(&mut out)?;
    if run.check() {
        let (input, result) = ((m.input, input), (m.output, &out));
        run.record.check = Some(match c.expect(ranks) {
            Expect::Reduced(op) => movement_check::reduced(b, op, input, result)?,
            Expect::Moved(rows) => movement_check::moved(b, rows.as_deref(), input, result)?,
        });
    }
    Ok(out)
}

/// The primitive that moves a data-movement step's piece on one rank.
pub enum Kernel {
    /// An exchange.
    Move(Box<Movement>),
    /// The backend's all-reduce.
    AllReduce(ReduceOp),
    /// The backend's reduce, to the root rank.
    Reduce(ReduceOp, usize),
    /// The send buffer packing (rank q's block after those of the ranks before it; None where
    /// the input holds the blocks in that order already), then the reduction of blocks of
    /// `counts[q]` elements.
    ReduceScatter {
        /// The packing.
        runs: Option<Box<Runs>>,
        /// Every rank's block's elements.
        counts: Vec<usize>,
        /// The operator.
        op: ReduceOp,
    },
    /// The backend's broadcast from the root rank.
    Broadcast(usize),
    /// Rows of `row` elements to send to and receive from each rank (element counts); `keep`
    /// copies the rank's own row.
    SendRecv {
        /// Elements sent to each rank.
        send: Vec<usize>,
        /// Elements received from each rank.
        recv: Vec<usize>,
        /// The rank keeps its own row.
        keep: bool,
        /// Elements per row.
        row: usize,
    },
}

impl Kernel {
    /// Whether the kernel leaves its result in the input's layout (a change of layout follows
    /// where the result wants another).
    fn keeps_layout(&self) -> bool {
        match self {
            Kernel::Move(_) | Kernel::ReduceScatter { .. } => false,
            Kernel::AllReduce(_)
            | Kernel::Reduce(..)
            | Kernel::Broadcast(_)
            | Kernel::SendRecv { .. } => true,
        }
    }

    /// Bytes this rank sends to others per run (elements of `elem` bytes).
    fn sent_bytes(&self, elem: usize) -> usize {
        match self {
            Kernel::Move(m) => m.sent_bytes(),
            Kernel::SendRecv { send, .. } => send.iter().sum::<usize>() * elem,
            Kernel::AllReduce(_)
            | Kernel::Reduce(..)
            | Kernel::ReduceScatter { .. }
            | Kernel::Broadcast(_) => 0,
        }
    }
}

/// A data-movement step ready to run: its kernel, scratch buffers and output buffer.
pub struct Prepared<B: Backend> {
    kernel: Kernel,
    dtype: DType,
    scratch: Vec<B::Buf>,
    out: B::Buf,
    /// A local change of layout applied after the kernel, when the output's layout differs.
    relayout: Option<(Movement, B::Buf)>,
    /// Bytes this rank sends to others per run (for bus bandwidth).
    pub sent_bytes: usize,
    /// For a movement into a symmetric result: how this rank's parts go by puts.
    puts: Option<PutPlan>,
    /// How a movement travels.
    route: Route,
}

impl<B: Backend> Prepared<B> {
    /// Prepares `kernel` from its input's state to its output's, its result in `dest` where
    /// given (a symmetric tensor's place on the heap: an exchange may then go by puts;
    /// collective where it is given).
    pub fn new(
        b: &B,
        kernel: Kernel,
        input: &TensorState,
        output: &TensorState,
        dest: Option<B::Buf>,
    ) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let elem = input.dtype.size() as usize;
        let m = Moving {
            input,
            output,
            ranks,
        };
        let kept = m.kept_layout();
        let relayout = (kernel.keeps_layout() && input.layout != output.layout)
            .then(|| Movement::new(&kept, output, ranks, rank));
        let (mut scratch, mut puts) = (Vec::new(), None);
        match &kernel {
            Kernel::Move(mv) => {
                if dest.is_some() {
                    puts = mv.puts(b)?;
                }
                let (send, recv) = mv.buffers(b)?;
                scratch.extend([send, recv]);
            }
            Kernel::ReduceScatter {
                runs: Some(_),
                counts,
                ..
            } => scratch.push(b.zeros(counts.iter().sum::<usize>() * elem)?),
            Kernel::SendRecv { send, row, .. } => {
                let sends = send.iter().filter(|&&c| c > 0).count();
                scratch.push(b.zeros(sends * row * elem)?);
            }
            Kernel::ReduceScatter { runs: None, .. }
            | Kernel::AllReduce(_)
            | Kernel::Reduce(..)
            | Kernel::Broadcast(_) => {}
        }
        let out_bytes = local_bytes(output, ranks, rank);
        let kernel_out = match &relayout {
            Some(_) => local_bytes(&kept, ranks, rank),
            None => out_bytes,
        };
        // The result lands in `dest` where one is given.
        let mut dest = dest;
        let relayout = match relayout {
            Some(mv) => Some((mv, dest.take().map_or_else(|| b.zeros(out_bytes), Ok)?)),
            None => None,
        };
        Ok(Prepared {
            sent_bytes: kernel.sent_bytes(elem),
            kernel,
            dtype: input.dtype,
            scratch,
            out: dest.map_or_else(|| b.zeros(kernel_out), Ok)?,
            relayout,
            route: Route::new(puts.is_some()),
            puts,
        })
    }

    /// Whether puts can move this step (see [`Prepared::set_via`]).
    pub fn can_put(&self) -> bool {
        self.route.can_put()
    }

    /// Moves the step's data by NCCL's exchange or, where [`Prepared::can_put`], by NVSHMEM
    /// puts.
    pub fn set_via(&mut self, via: CommBackend) {
        self.route.set(via);
    }

    /// Runs the step once on `input`.
    pub fn run(&mut self, b: &B, input: &B::Buf) -> Result<()> {
        let dtype = self.dtype;
        let elem = dtype.size() as usize;
        match &self.kernel {
            Kernel::Move(m) => {
                let [send, recv] = &mut self.scratch[..] else {
                    unreachable!("a movement has two scratch buffers")
                };
                match &self.puts {
                    Some(plan) if self.route.puts() => {
                        m.run_puts(b, input, send, &mut self.out, plan)?
                    }
                    _ => m.run(b, input, send, recv, &mut self.out)?,
                }
            }
            Kernel::AllReduce(op) => b.all_reduce(input, &mut self.out, dtype, *op)?,
            Kernel::Reduce(op, root) => b.reduce(input, &mut self.out, dtype, *op, *root)?,
            Kernel::ReduceScatter { runs, counts, op } => match runs {
                None => b.reduce_scatter(input, &mut self.out, counts, dtype, *op)?,
                Some(runs) => {
                    let send = &mut self.scratch[0];
                    b.copy_runs(input, send, runs, elem)?;
                    b.reduce_scatter(send, &mut self.out, counts, dtype, *op)?;
                }
            },
            Kernel::Broadcast(root) => b.broadcast(Some(input), &mut self.out, *root)?,
            Kernel::SendRecv {
                send,
                recv,
                keep,
                row,
            } => {
                let staged = &mut self.scratch[0];
                let copies: Vec<Run> = (0..send.iter().filter(|&&c| c > 0).count())
                    .map(|k| Run::contiguous(0, k * row, *row))
                    .collect();
                b.copy_runs(input, staged, &copies.into(), elem)?;
                let (to, from) = (Parts::packed(send), Parts::packed(recv));
                b.all_to_all_v(staged, &to, &mut self.out, &from, elem)?;
                if *keep {
                    let own = Run::contiguous(0, 0, b.len(input) / elem);
                    b.copy_runs(input, &mut self.out, &own.into(), elem)?;
                }
            }
        }
        if let Some((m, out)) = &mut self.relayout {
            let mut none = (b.zeros(0)?, b.zeros(0)?);
            m.run(b, &self.out, &mut none.0, &mut none.1, out)?;
        }
        Ok(())
    }

    /// The output of the last run.
    pub fn into_output(self) -> B::Buf {
        match self.relayout {
            Some((_, out)) => out,
            None => self.out,
        }
    }
}
