//! The global checksum from shard files against the hash of the global tensor built
//! independently (each rank's piece placed element by element with `Placement::to_global`), for
//! every kind of distribution, both layouts and tiles down to one element.

use super::*;
use crate::dist::tests::for_each_index;
use crate::dist::{Placement, linear_offset};
use crate::output::fixtures::TestDir;
use crate::output::npy::{header, write_npy};
use crate::spec::tensor::{DType, Layout};
use serde_json::json;

/// Element `g`'s value: its C-order index, plus 1000 times the rank for a partial tensor's rows.
fn value(shape: &[u64], g: &[u64], row: u64) -> i32 {
    (linear_offset(g, shape, Layout::C) + 1000 * row) as i32
}

/// Rank `rank`'s piece of the tensor, in its layout.
fn piece(state: &TensorState, ranks: u64, rank: u64) -> (Vec<u64>, Vec<u8>) {
    let placement = Placement::new(&state.dist, &state.shape, ranks);
    let Some(local) = placement.local_shape(rank) else {
        return (vec![0; state.shape.len()], Vec::new());
    };
    let row = u64::from(state.dist == Distribution::Partial) * rank;
    let mut data = vec![0u8; local.iter().product::<u64>() as usize * 4];
    for_each_index(&local, |l| {
        let at = linear_offset(l, &local, state.layout) as usize * 4;
        let g = placement.to_global(rank, l);
        data[at..at + 4].copy_from_slice(&value(&state.shape, &g, row).to_le_bytes());
    });
    (local, data)
}

/// The global tensor's C-order bytes (a partial tensor's rows stacked).
fn global_bytes(state: &TensorState, ranks: u64) -> Vec<u8> {
    let rows = match state.dist {
        Distribution::Partial => ranks,
        _ => 1,
    };
    let mut out = Vec::new();
    for row in 0..rows {
        for_each_index(&state.shape, |g| {
            out.extend_from_slice(&value(&state.shape, g, row).to_le_bytes())
        });
    }
    out
}

/// Writes every rank's shard and compares the checksum from them, at several tile sizes, with
/// the hash of the global tensor.
fn check(shape: &[u64], dist: serde_json::Value, ranks: u64) {
    let dist: Distribution = serde_json::from_value(dist).unwrap();
    for layout in [Layout::C, Layout::F] {
        let state = TensorState {
            shape: shape.to_vec(),
            dtype: DType::I32,
            layout,
            dist: dist.clone(),
        };
        let dir = TestDir::new("global-checksum");
        let mut files = Vec::new();
        for rank in 0..ranks {
            let (local, data) = piece(&state, ranks, rank);
            let path = dir.path().join(format!("x.rank{rank}.npy"));
            write_npy(&path, DType::I32, &local, layout, &data).unwrap();
            let start = header(DType::I32, &local, layout).unwrap().len() as u64;
            files.push((File::open(&path).unwrap(), start));
        }
        let shards: Vec<ShardFile> = files
            .iter()
            .map(|(file, data_start)| ShardFile {
                file,
                data_start: *data_start,
            })
            .collect();
        let mut h = Hasher::new(Checksum::Xxh3_64);
        h.update(&global_bytes(&state, ranks));
        let want = h.finish();
        for tile in [1, 4, 12, 44, 1 << 20] {
            let got = checksum_in_tiles(&state, &shards, Checksum::Xxh3_64, tile).unwrap();
            assert_eq!(
                got, want,
                "{dist:?} {layout} at {ranks} ranks, tiles of {tile}"
            );
        }
    }
}

#[test]
fn slabs_even_and_uneven() {
    for ranks in 1..=4 {
        check(&[7, 5], json!({"slab": 0}), ranks);
        check(&[7, 5], json!({"slab": 1}), ranks);
    }
    check(&[2, 3, 4], json!({"slab": 2}), 3);
    check(&[2, 5], json!({"slab": 0}), 4);
}

#[test]
fn blocks_and_block_cyclic() {
    check(&[5, 3], json!({"block": {"grid": [2, 2]}}), 4);
    check(
        &[5, 3],
        json!({"block": {"grid": [3, 1], "grid_layout": "row-major"}}),
        3,
    );
    check(
        &[9, 7],
        json!({"block_cyclic": {"grid": [2, 2], "blocks": [2, 3], "first": [1, 0]}}),
        4,
    );
    check(
        &[5, 4, 3],
        json!({"block_cyclic": {"grid": [2, 1, 2], "blocks": [2, 3, 1], "first": [1, 0, 1],
            "grid_layout": "row-major"}}),
        4,
    );
}

#[test]
fn whole_tensors_and_boxes() {
    for ranks in 1..=3 {
        check(&[4, 3], json!("replicated"), ranks);
        check(&[4, 3], json!("partial"), ranks);
    }
    check(&[4, 3], json!({"root": 2}), 3);
    check(
        &[4, 3],
        json!({"boxes": [[[0, 1], [4, 3]], [[0, 0], [4, 1]]]}),
        2,
    );
}

#[test]
fn tiles_cover_the_c_order_once() {
    let global = [3, 4, 5];
    for budget in [1, 4, 20, 24, 80, 200, 1000] {
        let tiles = Tiles::new(&global, 4, budget);
        let mut next = vec![0u64; 3];
        let mut seen = 0;
        for t in 0..tiles.count() {
            let tile = tiles.tile(t);
            assert!(tile.volume() * 4 <= budget.max(4), "{tile:?}");
            assert_eq!(tile.lower, next, "budget {budget}");
            seen += tile.volume();
            // The element after the tile's last, in C order.
            next = tile.upper.iter().map(|u| u - 1).collect();
            for a in (0..3).rev() {
                next[a] += 1;
                if next[a] < global[a] || a == 0 {
                    break;
                }
                next[a] = 0;
            }
        }
        assert_eq!(seen, 60);
    }
}
