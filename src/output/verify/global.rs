//! A tensor's global checksum recomputed from its shard files.
//!
//! The writer hashes the global tensor's C-order bytes (a partial tensor's: the stack of every
//! rank's array, `[ranks, *shape]`). Here that stream is rebuilt tile by tile: a tile is a run of
//! the global C order no larger than a fixed budget, filled from each shard's part of it (the
//! shard's place from [`IndexMap`], as the init uses) and fed to the hasher. A C-order shard is
//! read front to back once; a Fortran-order one in runs along its first axis.

use crate::dist::{Region, TensorState};
use crate::init::IndexMap;
use crate::output::checksum::Hasher;
use crate::spec::model::Checksum;
use crate::spec::tensor::Distribution;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::ops::Range;

/// Bytes of the global tensor assembled at a time.
const TILE_BYTES: u64 = 16 << 20;

/// Read buffer of each shard: runs closer than this are served from one read.
const READ_BUFFER: usize = 1 << 16;

/// One rank's shard: its open file and where its array's data starts.
pub struct ShardFile<'a> {
    /// The shard, opened as a plain file.
    pub file: &'a File,
    /// The length of its `.npy` header.
    pub data_start: u64,
}

/// The checksum of the global tensor that `shards` (one per rank, in rank order, each checked to
/// hold its piece's header and size) hold, as the writer computes it.
pub fn global_checksum(
    state: &TensorState,
    shards: &[ShardFile],
    algorithm: Checksum,
) -> io::Result<String> {
    checksum_in_tiles(state, shards, algorithm, TILE_BYTES)
}

/// [`global_checksum`] with tiles of at most `tile_bytes` (one element at the least).
fn checksum_in_tiles(
    state: &TensorState,
    shards: &[ShardFile],
    algorithm: Checksum,
    tile_bytes: u64,
) -> io::Result<String> {
    let mut pieces = pieces(state, shards);
    let mut hasher = Hasher::new(algorithm);
    let Some(first) = pieces.first() else {
        return Ok(hasher.finish());
    };
    let global = first.map.global.clone();
    let size = state.dtype.size();
    let tiles = Tiles::new(&global, size, tile_bytes);
    let mut out = Vec::new();
    for t in 0..tiles.count() {
        let tile = tiles.tile(t);
        out.clear();
        out.resize((tile.volume() * size) as usize, 0);
        for piece in &mut pieces {
            piece.copy_into(&tile, &mut out, size as usize)?;
        }
        hasher.update(&out);
    }
    Ok(hasher.finish())
}

/// The shards that make up the global tensor: a replicated tensor's rank 0 (the others hold
/// copies), every rank's otherwise (a rank that holds nothing adds nothing).
fn pieces<'a>(state: &TensorState, shards: &[ShardFile<'a>]) -> Vec<Piece<'a>> {
    let ranks = shards.len() as u64;
    let counted = match state.dist {
        Distribution::Replicated => 1,
        _ => shards.len(),
    };
    shards[..counted]
        .iter()
        .enumerate()
        .filter_map(|(rank, shard)| {
            let map = IndexMap::new(state, ranks, rank as u64)?;
            Some(Piece {
                map,
                reader: BufReader::with_capacity(READ_BUFFER, shard.file),
                data_start: shard.data_start,
                pos: None,
            })
        })
        .collect()
}

/// The global C order cut into tiles: fixed indices on the axes before `axis`, a range of at most
/// `step` indices on `axis`, whole on the axes after it.
struct Tiles<'a> {
    global: &'a [u64],
    axis: usize,
    step: u64,
}

impl<'a> Tiles<'a> {
    /// Tiles of at most `budget` bytes (or one element) of elements of `size` bytes: cut on the
    /// first axis whose trailing axes fit.
    fn new(global: &'a [u64], size: u64, budget: u64) -> Self {
        let trailing = |axis: usize| global[axis + 1..].iter().product::<u64>() * size;
        let axis = (0..global.len())
            .find(|&a| trailing(a) <= budget)
            .unwrap_or(global.len() - 1);
        let step = (budget / trailing(axis).max(1)).max(1);
        Tiles { global, axis, step }
    }

    /// Ranges cut on the tiling axis.
    fn per_prefix(&self) -> u64 {
        self.global[self.axis].div_ceil(self.step)
    }

    /// How many tiles.
    fn count(&self) -> u64 {
        self.global[..self.axis].iter().product::<u64>() * self.per_prefix()
    }

    /// Tile `t`, in global C order.
    fn tile(&self, t: u64) -> Region {
        let (mut prefix, chunk) = (t / self.per_prefix(), t % self.per_prefix());
        let mut lower = vec![0; self.global.len()];
        let mut upper = self.global.to_vec();
        for a in (0..self.axis).rev() {
            lower[a] = prefix % self.global[a];
            upper[a] = lower[a] + 1;
            prefix /= self.global[a];
        }
        lower[self.axis] = chunk * self.step;
        upper[self.axis] = (lower[self.axis] + self.step).min(self.global[self.axis]);
        Region { lower, upper }
    }
}

/// One shard being read into tiles.
struct Piece<'a> {
    map: IndexMap,
    reader: BufReader<&'a File>,
    data_start: u64,
    /// The file offset the reader stands at (None before the first read).
    pos: Option<u64>,
}

impl Piece<'_> {
    /// Copies this piece's part of `tile` into `out` (the tile's elements in C order).
    fn copy_into(&mut self, tile: &Region, out: &mut [u8], size: usize) -> io::Result<()> {
        let nd = tile.lower.len();
        let local: Vec<_> = (0..nd)
            .map(|a| self.map.coords[a].within(tile.lower[a], tile.upper[a]))
            .collect();
        if local.iter().any(|r| r.is_empty()) {
            return Ok(());
        }
        let fast = self.map.order()[0];
        let lstride = storage_strides(&self.map.local, self.map.order());
        let tstride = c_strides(tile);
        let mut idx: Vec<u64> = local.iter().map(|r| r.start).collect();
        let mut run = vec![0u8; (local[fast].end - local[fast].start) as usize * size];
        loop {
            let offset: u64 = (0..nd).map(|a| idx[a] * lstride[a]).sum();
            self.read_at(self.data_start + offset * size as u64, &mut run)?;
            let base: u64 = (0..nd)
                .filter(|&a| a != fast)
                .map(|a| (self.map.coords[a].at(idx[a]) - tile.lower[a]) * tstride[a])
                .sum();
            for (k, element) in run.chunks_exact(size).enumerate() {
                let g = self.map.coords[fast].at(local[fast].start + k as u64);
                let at = (base + (g - tile.lower[fast]) * tstride[fast]) as usize * size;
                out[at..at + size].copy_from_slice(element);
            }
            if !advance(&mut idx, &self.map.order()[1..], &local) {
                return Ok(());
            }
        }
    }

    /// Reads `buf.len()` bytes at file offset `at`, through the buffer where it holds them.
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.pos {
            Some(pos) => self.reader.seek_relative(at as i64 - pos as i64)?,
            None => _ = self.reader.seek(SeekFrom::Start(at))?,
        }
        self.reader.read_exact(buf)?;
        self.pos = Some(at + buf.len() as u64);
        Ok(())
    }
}

/// Steps `idx` on `axes` (fastest first) within `ranges`, as an odometer: false once it has
/// gone through them all (and wrapped to their starts).
fn advance(idx: &mut [u64], axes: &[usize], ranges: &[Range<u64>]) -> bool {
    for &a in axes {
        idx[a] += 1;
        if idx[a] < ranges[a].end {
            return true;
        }
        idx[a] = ranges[a].start;
    }
    false
}

/// Element strides of a local array stored in `order` (its axes, fastest first).
fn storage_strides(shape: &[u64], order: &[usize]) -> Vec<u64> {
    let mut strides = vec![0; shape.len()];
    let mut stride = 1;
    for &a in order {
        strides[a] = stride;
        stride *= shape[a];
    }
    strides
}

/// C-order element strides of a tile.
fn c_strides(tile: &Region) -> Vec<u64> {
    let extents: Vec<u64> = (0..tile.lower.len())
        .map(|a| tile.upper[a] - tile.lower[a])
        .collect();
    let order: Vec<usize> = (0..extents.len()).rev().collect();
    storage_strides(&extents, &order)
}

#[cfg(test)]
mod tests;
