//! The `spec` target: an input is a spec's text, run through what `distrun validate` and
//! `plan` do (TOML, schema, the repair and meaning pass of a refused spec, the meaning pass and
//! the plan at rank counts drawn from the input, every error rendered against the text). It
//! must not panic or hang; the dictionary holds the words and edge numbers specs are made of.

use super::Target;
use distrun::{plan, spec};

/// Rank counts a spec is planned for: small, odd, large, one past the most there may be, and
/// the largest count there is. (A plan at the most, 2^17 ranks, takes up to about a second in
/// a debug build: linear, but the reason the fuzzer's limit for a hang is 3 s.)
const RANKS: [u64; 9] = [
    1,
    2,
    3,
    4,
    7,
    64,
    4096,
    plan::resolve::MAX_RANKS + 1,
    u64::MAX,
];

/// See the module's doc.
pub struct Spec;

impl Target for Spec {
    fn name(&self) -> &'static str {
        "spec"
    }

    fn default_inputs(&self) -> usize {
        20_000
    }

    fn dictionary(&self) -> &'static [&'static [u8]] {
        DICTIONARY
    }

    fn run(&self, input: &[u8]) {
        let text = String::from_utf8_lossy(input);
        // Two rank counts per input, chosen by its bytes, so that mutants cover them all.
        let h = input
            .iter()
            .fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b));
        let ranks = [RANKS[(h % 9) as usize], RANKS[((h >> 8) % 9) as usize]];
        // npy inits resolve against the corpus, which holds none: only their absence is seen.
        match spec::load_str("fuzz.toml", &text, self.corpus()) {
            Ok(loaded) => {
                for p in ranks {
                    if let Err(d) = plan::plan(&loaded, p) {
                        let _ = loaded.invalid(&d).to_string();
                    }
                }
            }
            Err(invalid) => {
                let _ = invalid.to_string();
                let Some(boxed) = invalid.schema.and_then(|s| s.repaired) else {
                    return;
                };
                let (loaded, repair) = *boxed;
                for p in ranks {
                    if let Err(d) = plan::resolve(&loaded, Some(p)) {
                        let kept: Vec<_> =
                            d.into_iter().filter(|d| repair.independent(d)).collect();
                        let _ = loaded.invalid(&kept).to_string();
                    }
                }
            }
        }
    }
}

/// Keys, values, tables and numbers at the edges of what fields hold.
const DICTIONARY: &[&[u8]] = &[
    b"shape",
    b"dtype",
    b"distribution",
    b"layout",
    b"init",
    b"symmetric",
    b"slab",
    b"block",
    b"block_cyclic",
    b"grid",
    b"blocks",
    b"boxes",
    b"root",
    b"\"replicated\"",
    b"\"partial\"",
    b"fill",
    b"arange",
    b"uniform",
    b"normal",
    b"npy",
    b"\"zeros\"",
    b"op",
    b"input",
    b"out",
    b"bias",
    b"bias_per",
    b"\"matmul\"",
    b"\"fft\"",
    b"\"redistribute\"",
    b"\"all_reduce\"",
    b"\"reduce_scatter\"",
    b"\"all_to_all\"",
    b"\"scatter\"",
    b"\"send_recv\"",
    b"transpose_a",
    b"alpha",
    b"epilog",
    b"\"gelu\"",
    b"kind",
    b"\"c2r\"",
    b"norm",
    b"reshape",
    b"algorithm",
    b"\"k_split\"",
    b"\"summa\"",
    b"iterations",
    b"warmup",
    b"check = true",
    b"timing",
    b"\"queued\"",
    b"ranks",
    b"device",
    b"\"cuda\"",
    b"backends",
    b"\"nvshmem\"",
    b"device_map",
    b"gather = true",
    b"\"c64\"",
    b"\"c128\"",
    b"\"bf16\"",
    b"\"i8\"",
    b"\"u64\"",
    b"\"F\"",
    b"\"x\"",
    b"\"z\"",
    b"[[steps]]\n",
    b"[tensors.x]\n",
    b"[runtime]\n",
    b"[output]\n",
    b"tensors = [\"x\"]",
    b"0",
    b"-1",
    b"255",
    b"65504",
    b"4294967296",
    b"9223372036854775808",
    b"18446744073709551616",
    b"1e300",
    b"-1e308",
    b"nan",
    b"inf",
    b"131073",
    b"[]",
    b"[0]",
    b"[1000000, 1000000]",
    b"[4294967296, 4294967296, 16]",
    b"[[0, 0], [1, 1]]",
    b"\"a\\nb\"",
];
