//! `npy` inits: each rank's piece read from a file of the global array, C or Fortran order;
//! only the rank's own bytes are read; errors name the file.

use super::super::index::IndexMap;
use super::super::npy::read_piece;
use super::{c_linear, check_pieces, distributions, for_each_index, state};
use crate::init::fill_local;
use crate::output::fixtures::TestDir;
use crate::spec::tensor::*;
use npyz::WriterBuilder;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The bytes of element `i` (C-order global index) of the test arrays.
fn element(dtype: DType, i: u64) -> Vec<u8> {
    match dtype {
        DType::F32 => (i as f32 * 0.5).to_le_bytes().to_vec(),
        DType::C64 => [(i as f32).to_le_bytes(), (-(i as f32) - 0.25).to_le_bytes()].concat(),
        DType::I32 => (i as i32 - 50).to_le_bytes().to_vec(),
        DType::Bf16 => (0x3f80u16 + i as u16).to_le_bytes().to_vec(),
        other => panic!("no test data for {other}"),
    }
}

/// A .npy file of `shape` holding `element(i)`, in C or Fortran order.
fn npy_bytes(shape: &[u64], dtype: DType, descr: &str, fortran: bool) -> Vec<u8> {
    let order = if fortran {
        npyz::Order::Fortran
    } else {
        npyz::Order::C
    };
    let mut out = Vec::new();
    let w = npyz::WriteOptions::new_header_only()
        .dtype(npyz::DType::Plain(descr.parse().unwrap()))
        .shape(shape)
        .order(order)
        .writer(&mut out)
        .write_header_only()
        .unwrap();
    // Fortran order: the first axis fastest, i.e. C order over the reversed shape.
    let rev: Vec<u64> = shape.iter().rev().copied().collect();
    for_each_index(if fortran { &rev } else { shape }, |idx| {
        let i = if fortran {
            let g: Vec<u64> = idx.iter().rev().copied().collect();
            c_linear(&g, shape)
        } else {
            c_linear(idx, shape)
        };
        w.write_all(&element(dtype, i)).unwrap();
    });
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
fn every_rank_reads_its_piece_in_any_order_distribution_and_layout() {
    let dir = TestDir::new("init-pieces");
    let cases = [
        (DType::F32, "<f4"),
        (DType::C64, "<c8"),
        (DType::I32, "<i4"),
    ];
    for shape in [vec![7], vec![6, 5], vec![5, 4, 3]] {
        for ranks in 1..=4 {
            for dist in distributions(&shape, ranks) {
                let partial = dist == Distribution::Partial;
                let mut file_shape = shape.clone();
                if partial {
                    file_shape.insert(0, ranks);
                }
                for (k, (dtype, descr)) in cases.iter().enumerate() {
                    for fortran in [false, true] {
                        let name = format!("a{k}{}.npy", u8::from(fortran));
                        write(
                            dir.path(),
                            &name,
                            &npy_bytes(&file_shape, *dtype, descr, fortran),
                        );
                        let init = Init::Npy(name);
                        for layout in [Layout::C, Layout::F] {
                            let st = state(&shape, *dtype, layout, dist.clone());
                            let piece =
                                |r| fill_local(&init, 0, "a", dir.path(), &st, ranks, r).unwrap();
                            check_pieces(&st, ranks, piece, |i| element(*dtype, i));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn bf16_is_read_from_raw_u2_bits() {
    let dir = TestDir::new("init-bf16");
    write(
        dir.path(),
        "b.npy",
        &npy_bytes(&[4, 6], DType::Bf16, "<u2", true),
    );
    let st = state(
        &[4, 6],
        DType::Bf16,
        Layout::C,
        Distribution::Slab(Axis::Index(1)),
    );
    let piece = |r| fill_local(&Init::Npy("b.npy".into()), 0, "b", dir.path(), &st, 3, r).unwrap();
    check_pieces(&st, 3, piece, |i| element(DType::Bf16, i));
}

/// A reader that counts the bytes it hands out.
struct Counting {
    inner: Cursor<Vec<u8>>,
    read: u64,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl Seek for Counting {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

#[test]
fn a_rank_reads_only_its_own_elements() {
    let dist = Distribution::BlockCyclic(BlockCyclicSpec {
        grid: Some(vec![2, 2, 1]),
        blocks: vec![3, 2, 5],
        grid_layout: GridLayout::ColMajor,
        first: Some(vec![1, 0, 0]),
    });
    let shape = [9, 7, 4];
    for fortran in [false, true] {
        let file = npy_bytes(&shape, DType::F32, "<f4", fortran);
        let mut cursor = Cursor::new(file);
        npyz::NpyHeader::from_reader(&mut cursor).unwrap();
        let start = cursor.position();
        for layout in [Layout::C, Layout::F] {
            let st = state(&shape, DType::F32, layout, dist.clone());
            let mut total = 0;
            for rank in 0..4 {
                let map = IndexMap::new(&st, 4, rank).unwrap();
                let counting = Counting {
                    inner: cursor.clone(),
                    read: 0,
                };
                // A one-byte buffer passes every read through unbuffered.
                let mut reader = BufReader::with_capacity(1, counting);
                let piece = read_piece(&mut reader, start, fortran, 4, &map).unwrap();
                assert_eq!(reader.get_ref().read, piece.len() as u64, "rank {rank}");
                total += piece.len();
            }
            assert_eq!(total, 9 * 7 * 4 * 4);
        }
    }
}

#[test]
fn errors_name_the_file() {
    let dir = TestDir::new("init-errors");
    write(
        dir.path(),
        "f.npy",
        &npy_bytes(&[6, 5], DType::F32, "<f4", false),
    );
    let mut short = npy_bytes(&[6, 5], DType::F32, "<f4", false);
    short.truncate(short.len() - 3);
    write(dir.path(), "short.npy", &short);
    write(dir.path(), "junk.npy", b"not an npy file at all");
    let err = |file: &str, shape: &[u64], dtype: DType| {
        let st = state(shape, dtype, Layout::C, Distribution::Replicated);
        let init = Init::Npy(file.into());
        let e = fill_local(&init, 0, "t", dir.path(), &st, 2, 1).unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains(file), "{text}");
        text
    };
    assert!(err("missing.npy", &[6, 5], DType::F32).contains("cannot open"));
    assert!(err("f.npy", &[6, 5], DType::F64).contains("<f4"));
    assert!(err("f.npy", &[5, 6], DType::F32).contains("[6, 5]"));
    assert!(err("short.npy", &[6, 5], DType::F32).contains("is truncated: needs"));
    assert!(err("junk.npy", &[6, 5], DType::F32).contains("not a .npy"));
    // A partial tensor reads the stacked [ranks, *shape].
    let st = state(&[6, 5], DType::F32, Layout::C, Distribution::Partial);
    let e = fill_local(&Init::Npy("f.npy".into()), 0, "t", dir.path(), &st, 2, 0).unwrap_err();
    assert!(format!("{e:#}").contains("[2, 6, 5]"));
}
