//! The spec target: an input is a spec's text, run through what `distrun validate` and `plan`
//! do (TOML, schema, the repair and meaning pass of a refused spec, the meaning pass and the
//! plan at rank counts drawn from the input, every error rendered against the text). Text-aware
//! mutations make numbers extreme, keys and values other valid words, and lines move.

use distrun::{plan, spec};
use std::path::PathBuf;

/// Rank counts a spec is planned for: small, odd, large, the most there may be, one past it.
const RANKS: [u64; 9] = [1, 2, 3, 4, 7, 64, 4096, plan::resolve::MAX_RANKS, u64::MAX];

/// Runs one input; a panic is the failure the driver looks for.
pub fn run(input: &[u8], dir: &PathBuf) {
    let text = String::from_utf8_lossy(input);
    // Two rank counts per input, chosen by its bytes, so the corpus covers them all.
    let h = input.iter().fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b));
    let ranks = [RANKS[(h % 9) as usize], RANKS[((h >> 8) % 9) as usize]];
    match spec::load_str("fuzz.toml", &text, dir.clone()) {
        Ok(loaded) => {
            for p in ranks {
                if let Err(d) = plan::plan(&loaded, p) {
                    let _ = loaded.invalid(&d).to_string();
                }
            }
        }
        Err(invalid) => {
            let _ = invalid.to_string();
            let repaired = invalid.schema.and_then(|s| s.repaired);
            if let Some(boxed) = repaired {
                let (loaded, repair) = *boxed;
                for p in ranks {
                    if let Err(d) = plan::resolve(&loaded, Some(p)) {
                        let kept: Vec<_> = d.into_iter().filter(|d| repair.independent(d)).collect();
                        let _ = loaded.invalid(&kept).to_string();
                    }
                }
            }
        }
    }
}

/// Words a spec is made of: keys, values and tokens that often break things.
const WORDS: &[&str] = &[
    "shape", "dtype", "distribution", "layout", "init", "symmetric", "slab", "block",
    "block_cyclic", "grid", "blocks", "boxes", "root", "replicated", "partial", "fill", "arange",
    "uniform", "normal", "npy", "zeros", "ones", "op", "input", "out", "a", "b", "c", "bias",
    "bias_per", "matmul", "fft", "redistribute", "all_reduce", "reduce", "broadcast",
    "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "send_recv", "barrier",
    "transpose_a", "transpose_b", "conj_a", "alpha", "beta", "epilog", "relu", "gelu", "kind",
    "c2c", "r2c", "c2r", "direction", "inverse", "norm", "reshape", "axes", "algorithm",
    "k_split", "summa", "ag_gemm", "gemm_rs", "iterations", "warmup", "check", "timing",
    "queued", "ranks", "device", "cuda", "cpu", "backends", "nccl", "nvshmem", "process_group",
    "device_map", "tensors", "output", "gather", "checksum", "sha256", "f16", "bf16", "f32",
    "f64", "c64", "c128", "i8", "u8", "i32", "u32", "i64", "u64", "C", "F", "x", "y", "z",
    "pattern", "ring", "[[steps]]", "[tensors.x]", "[runtime]", "[output]", "[job]", "=", "{",
    "}", "[", "]", ",", "\"", "'''", "\\u0000", "#", "\n",
];

/// Numbers at the edges of what fields hold.
const NUMBERS: &[&str] = &[
    "0", "-1", "1", "2", "3", "7", "255", "256", "65504", "65536", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "18446744073709551615",
    "18446744073709551616", "-9223372036854775809", "1e300", "-1e308", "1e-320", "nan", "inf",
    "-inf", "0.5", "1048576", "1048577", "[]", "[0]", "[1, 1]", "[1000000, 1000000]",
    "[4294967296, 4294967296, 16]", "[[0, 0], [1, 1]]",
];

/// A text-aware mutation of `input`, with `next` as the source of randomness.
pub fn mutate(input: &[u8], next: &mut dyn FnMut() -> u64) -> Vec<u8> {
    let text = String::from_utf8_lossy(input).into_owned();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let pick = |next: &mut dyn FnMut() -> u64, n: usize| (next() % n.max(1) as u64) as usize;
    let i = pick(next, lines.len());
    match next() % 6 {
        // A number becomes an edge value.
        0 => {
            let line = &lines[i];
            let digits: Vec<usize> = (line.char_indices())
                .filter(|(_, c)| c.is_ascii_digit())
                .map(|(j, _)| j)
                .collect();
            if let Some(&start) = digits.get(pick(next, digits.len())) {
                let end = line[start..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                    .map_or(line.len(), |e| start + e);
                let number = NUMBERS[pick(next, NUMBERS.len())];
                lines[i] = format!("{}{number}{}", &line[..start], &line[end..]);
            }
        }
        // A quoted word becomes another word.
        1 => {
            let line = lines[i].clone();
            if let Some(open) = line.find('"')
                && let Some(close) = line[open + 1..].find('"')
            {
                let word = WORDS[pick(next, WORDS.len())];
                lines[i] = format!("{}\"{word}\"{}", &line[..open], &line[open + 2 + close..]);
            }
        }
        // A line is copied elsewhere, removed, or two lines swap.
        2 => {
            let line = lines[i].clone();
            let j = pick(next, lines.len() + 1);
            lines.insert(j, line);
        }
        3 => {
            if lines.len() > 1 {
                lines.remove(i);
            }
        }
        4 => {
            let j = pick(next, lines.len());
            lines.swap(i, j);
        }
        // A new key or value line from the words.
        _ => {
            let key = WORDS[pick(next, WORDS.len())];
            let value = match next() % 2 {
                0 => NUMBERS[pick(next, NUMBERS.len())].to_string(),
                _ => format!("\"{}\"", WORDS[pick(next, WORDS.len())]),
            };
            lines.insert(i, format!("{key} = {value}"));
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out.into_bytes()
}
