//! Mutations of an input, for any target: byte-level ones (flip a bit, set, insert or delete
//! bytes, duplicate a slice, splice in another corpus entry, write an interesting integer or
//! token) and text-aware ones (replace a number with a huge, negative or NaN-ish one, duplicate a
//! line, nest brackets deeply). [`mutate`] stacks a few of them, each drawn at random.

use rand::RngExt;
use rand::seq::IndexedRandom;
use std::ops::Range;

/// The fuzzer's random numbers: fast, and the same for the same seed.
pub type Rand = rand_xorshift::XorShiftRng;

/// The longest input a mutation leaves: longer ones are cut.
pub const MAX_LEN: usize = 1 << 18;

/// What mutations draw on besides their input.
pub struct Pool<'a> {
    /// The seed inputs, for splices.
    pub corpus: &'a [Vec<u8>],
    /// The target's own tokens, inserted as they are.
    pub dictionary: &'a [&'a [u8]],
}

type Mutation = fn(&mut Vec<u8>, &mut Rand, &Pool);

const MUTATIONS: &[Mutation] = &[
    flip_bit,
    set_byte,
    insert_bytes,
    delete,
    duplicate,
    splice,
    integer,
    token,
    number,
    duplicate_line,
    nest,
];

/// Integers worth writing over bytes (as 1, 2, 4 or 8 bytes, either byte order).
const INTEGERS: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    i64::MAX as u64,
    u64::MAX,
];

/// Tokens worth inserting into any input.
const TOKENS: &[&[u8]] = &[
    b"\0",
    b"\n",
    b"\r\n",
    b"\t",
    b" ",
    b"'",
    b"\"",
    b"\\",
    b",",
    b":",
    b"=",
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b"#",
    b"True",
    b"False",
    b"None",
    b"\xff",
    b"\xc3",
    b"\xe2\x80\xae",
];

/// Numbers that replace a number of the input.
const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "255",
    "65536",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "1e309",
    "-1e309",
    "1.5",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "1_000",
    "00",
];

/// Applies one to eight mutations, each drawn at random, each result cut to [`MAX_LEN`] bytes.
pub fn mutate(input: &mut Vec<u8>, rng: &mut Rand, pool: &Pool) {
    for _ in 0..rng.random_range(1..=8) {
        let mutation = MUTATIONS.choose(rng).unwrap();
        mutation(input, rng, pool);
        input.truncate(MAX_LEN);
    }
}

/// A position in `0..=len`.
fn position(rng: &mut Rand, len: usize) -> usize {
    rng.random_range(0..=len)
}

/// A non-empty slice of `0..len` (`len` > 0), mostly short.
fn span(rng: &mut Rand, len: usize) -> Range<usize> {
    let start = rng.random_range(0..len);
    let longest = if rng.random_bool(0.9) { 16 } else { len };
    start..start + rng.random_range(1..=longest.min(len - start))
}

fn flip_bit(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    if input.is_empty() {
        input.push(0);
    }
    let at = rng.random_range(0..input.len());
    input[at] ^= 1 << rng.random_range(0..8);
}

fn set_byte(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    if input.is_empty() {
        input.push(0);
    }
    let at = rng.random_range(0..input.len());
    input[at] = rng.random();
}

fn insert_bytes(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    let at = position(rng, input.len());
    let bytes: Vec<u8> = (0..rng.random_range(1..=8)).map(|_| rng.random()).collect();
    input.splice(at..at, bytes);
}

fn delete(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    if !input.is_empty() {
        input.drain(span(rng, input.len()));
    }
}

/// Copies a slice, one to 64 times, to a place of the input.
fn duplicate(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    if input.is_empty() {
        return;
    }
    let slice = input[span(rng, input.len())].to_vec();
    let times = if rng.random_bool(0.8) {
        1
    } else {
        rng.random_range(2..=64)
    };
    let at = position(rng, input.len());
    input.splice(at..at, slice.repeat(times));
}

/// Joins a head of the input to a tail of a corpus entry, or inserts a slice of one.
fn splice(input: &mut Vec<u8>, rng: &mut Rand, pool: &Pool) {
    let Some(other) = pool.corpus.choose(rng).filter(|o| !o.is_empty()) else {
        return;
    };
    if rng.random_bool(0.5) {
        input.truncate(position(rng, input.len()));
        input.extend_from_slice(&other[position(rng, other.len())..]);
    } else {
        let at = position(rng, input.len());
        input.splice(at..at, other[span(rng, other.len())].iter().copied());
    }
}

/// Writes an interesting integer over (and past) a place of the input.
fn integer(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    let value = *INTEGERS.choose(rng).unwrap();
    let value = if rng.random_bool(0.2) {
        value.wrapping_neg()
    } else {
        value
    };
    let width = *[1, 2, 4, 8].choose(rng).unwrap();
    let bytes = if rng.random_bool(0.8) {
        value.to_le_bytes()[..width].to_vec()
    } else {
        value.to_be_bytes()[8 - width..].to_vec()
    };
    let at = position(rng, input.len());
    let end = (at + width).min(input.len());
    input.splice(at..end, bytes);
}

/// Inserts a token (the target's or a general one), or puts it in place of a slice.
fn token(input: &mut Vec<u8>, rng: &mut Rand, pool: &Pool) {
    let token = match pool.dictionary.choose(rng) {
        Some(t) if rng.random_bool(0.6) => t,
        _ => TOKENS.choose(rng).unwrap(),
    };
    let at = if input.is_empty() || rng.random_bool(0.7) {
        let at = position(rng, input.len());
        at..at
    } else {
        span(rng, input.len())
    };
    input.splice(at, token.iter().copied());
}

/// Replaces a run of digits (with its sign) by a huge, negative or NaN-ish number; inserts
/// one where there is none.
fn number(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    let runs = digit_runs(input);
    let at = match runs.choose(rng) {
        Some(run) => run.clone(),
        None => {
            let at = position(rng, input.len());
            at..at
        }
    };
    input.splice(at, NUMBERS.choose(rng).unwrap().bytes());
}

/// The runs of ASCII digits of `input`, each with a `-` before it.
fn digit_runs(input: &[u8]) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < input.len() {
        if !input[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = if i > 0 && input[i - 1] == b'-' {
            i - 1
        } else {
            i
        };
        while i < input.len() && input[i].is_ascii_digit() {
            i += 1;
        }
        runs.push(start..i);
    }
    runs
}

/// Copies a line (with its newline) after itself.
fn duplicate_line(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            input
                .iter()
                .enumerate()
                .filter(|&(_, &c)| c == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|&s| s < input.len())
        .collect();
    let Some(&start) = starts.choose(rng) else {
        return;
    };
    let end = input[start..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(input.len(), |n| start + n + 1);
    let line = input[start..end].to_vec();
    input.splice(end..end, line);
}

/// Wraps a slice of the input in brackets of one kind, nested a few or thousands of times;
/// now and then the closing ones are left out.
fn nest(input: &mut Vec<u8>, rng: &mut Rand, _: &Pool) {
    let (open, close) = *[(b'[', b']'), (b'(', b')'), (b'{', b'}')]
        .choose(rng)
        .unwrap();
    let depth = match rng.random_range(0..10) {
        0 => rng.random_range(1_000..=50_000),
        1..=3 => rng.random_range(20..=200),
        _ => rng.random_range(1..=20),
    };
    let start = position(rng, input.len());
    let end = rng.random_range(start..=input.len());
    if rng.random_bool(0.9) {
        input.splice(end..end, std::iter::repeat_n(close, depth));
    }
    input.splice(start..start, std::iter::repeat_n(open, depth));
}
