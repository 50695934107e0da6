//! The FFT as an [`Op`]: its meaning check (`meaning.rs`), its memory (`memory.rs`), and its
//! run: its moves by NCCL or puts (trial runs choose), then the round trip and Parseval's
//! check.

use super::{Fft, FftKind, PreparedFft, check, memory};
use crate::backend::Backend;
use crate::backend::cuda::probe::Lib;
use crate::dist::TensorState;
use crate::exec::{StepRun, pick_via};
use crate::ops::{Op, out_or_input};
use crate::plan::StepPlan;
use crate::plan::figures::Figures;
use crate::plan::memory::Needs;
use crate::plan::resolve::Resolver;
use crate::spec::step::StepCommon;
use anyhow::Result;

impl Op for Fft {
    fn common(&self) -> &StepCommon {
        &self.common
    }

    fn inputs(&self) -> Vec<(&'static str, &str)> {
        vec![("input", &self.input)]
    }

    fn output(&self) -> Option<(&'static str, &str)> {
        Some(out_or_input(&self.out, &self.input))
    }

    fn resolve(
        &self,
        r: &mut Resolver<'_>,
        i: usize,
        ins: &[TensorState],
        _plan: &mut StepPlan,
    ) -> Option<TensorState> {
        r.fft(i, self, &ins[0])
    }

    fn needs<'a>(&'a self, planned: &'a StepPlan, out: &'a TensorState, ranks: u64) -> Needs<'a> {
        let input = &planned.input_states[0];
        Needs {
            run: memory::workspace(self, input, out, ranks),
            check: memory::check_workspace(self, input, out, ranks),
            puts: memory::puts_rooms(self, input, out, ranks),
        }
    }

    /// One local transform for one rank; else the slab decomposition (see the module's doc).
    fn describe(&self, planned: &StepPlan, ranks: u64) -> Option<(String, String)> {
        let (input, out) = (planned.input_states.first()?, planned.output_state.as_ref()?);
        let nd = input.shape.len();
        if super::holds_whole(input, ranks) {
            let every = if ranks > 1 { "on every rank, " } else { "" };
            let detail =
                format!("{every}one {nd}-D transform over every axis (one cuFFT plan on a GPU)");
            return Some(("local".into(), detail));
        }
        let [input, out] = &super::as_slabs(input, out, ranks);
        const SLABS: [&str; 3] = ["x", "y", "z"];
        let slabs = super::Slabs::of(self, input, out, ranks);
        let (s0, s1) = (slabs.s0, 1 - slabs.s0);
        let held: Vec<String> = (0..nd).filter(|&a| a != s0).map(|a| a.to_string()).collect();
        let moved_in = slabs.on(input, true) != *input;
        let middle = slabs.on(&super::middle(self, input, out, s0), true);
        let (moved, each) = if slabs.transposed {
            ("column batch by column batch to", " on each batch as it lands")
        } else if super::long_columns::applies(&middle, s0, ranks as usize) {
            ("column batch by column batch, turned to rows and back, to", "")
        } else {
            ("all-to-all (batch by batch where the phase splits) to", "")
        };
        let detail = format!(
            "{}FFT of axes {} on {}-slabs, {moved} {}-slabs, FFT of axis {s0}{each}{}",
            if moved_in { "moved to working slabs, " } else { "" },
            held.join(", "),
            SLABS[s0],
            SLABS[s1],
            if *out == slabs.natural(out) {
                ""
            } else {
                ", then to the result's distribution"
            },
        );
        Some((format!("slab_{}", SLABS[s0]), detail))
    }

    /// Its shape (the real side's for r2c and c2r) and kind.
    fn figures(&self, planned: &StepPlan, ranks: u64) -> Figures {
        let mut f = Figures::of_input(planned, ranks);
        let real = match (self.kind, &planned.output_state) {
            (FftKind::C2r, Some(out)) => out,
            _ => &planned.input_states[0],
        };
        f.shape = Some(real.shape.clone());
        f.kind = serde_json::to_value(self.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        f
    }

    fn library(&self) -> Option<Lib> {
        Some(Lib::Cufft)
    }

    fn run<B: Backend>(&self, run: &mut StepRun<'_, B>) -> Result<Option<B::Buf>> {
        let (b, input) = (run.b, run.inputs[0]);
        let (in_state, out_state) = (run.input_state(0), run.out_state());
        let mut prepared = PreparedFft::new(b, self, in_state, out_state)?;
        if prepared.can_put() {
            let trial = |p: &mut PreparedFft<B>| p.run(b, input);
            run.record.via = Some(pick_via(b, run.timing(), &mut prepared, PreparedFft::set_via, trial)?);
        }
        run.record.times = run.timed(|| prepared.run(b, input))?;
        run.record.batches = prepared.batches();
        run.record.flops = Some(self.flops(in_state, out_state));
        let mut out = prepared.into_output();
        run.corrupt(&mut out)?;
        if run.check() {
            let result = (out_state, &out);
            run.record.check = Some(check::check(b, self, (in_state, input), result)?);
        }
        Ok(Some(out))
    }
}

impl Fft {
    /// Floating-point operations of one run: 5 n log2 n per complex transform (real ones count
    /// half).
    fn flops(&self, input: &TensorState, out: &TensorState) -> f64 {
        let points: f64 = match self.kind {
            FftKind::C2r => out.shape.iter().map(|&x| x as f64).product(),
            FftKind::C2c | FftKind::R2c => input.shape.iter().map(|&x| x as f64).product(),
        };
        let real = if self.kind == FftKind::C2c { 1.0 } else { 0.5 };
        real * 5.0 * points * points.log2()
    }
}
