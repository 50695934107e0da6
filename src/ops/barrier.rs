//! barrier: every rank waits for the others; it reads and writes no tensor.

use super::Op;
use crate::backend::Backend;
use crate::dist::TensorState;
use crate::exec::StepRun;
use crate::plan::StepPlan;
use crate::plan::memory::Needs;
use crate::plan::resolve::Resolver;
use crate::spec::step::StepCommon;
use anyhow::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// barrier step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Barrier {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Op for Barrier {
    fn common(&self) -> &StepCommon {
        &self.common
    }

    fn inputs(&self) -> Vec<(&'static str, &str)> {
        Vec::new()
    }

    fn output(&self) -> Option<(&'static str, &str)> {
        None
    }

    fn resolve(
        &self,
        _: &mut Resolver<'_>,
        _: usize,
        _: &[TensorState],
        _: &mut StepPlan,
    ) -> Option<TensorState> {
        None
    }

    fn needs<'a>(&'a self, _: &'a StepPlan, _: &'a TensorState, _: u64) -> Needs<'a> {
        Needs::none()
    }

    fn run<B: Backend>(&self, run: &mut StepRun<'_, B>) -> Result<Option<B::Buf>> {
        let b = run.b;
        run.record.times = run.timed(|| b.barrier())?;
        Ok(None)
    }
}
