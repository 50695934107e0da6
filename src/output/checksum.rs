//! Streaming checksums (xxh3-64 or sha256), written as `"<algorithm>:<hex digest>"`.

use crate::spec::model::Checksum;
use sha2::Digest;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3Default;

/// Bytes read at a time by [`hash_file`].
const FILE_BUFFER: usize = 4 << 20;

/// A checksum being computed over bytes fed in pieces.
pub struct Hasher {
    state: State,
}

enum State {
    Xxh3(Box<Xxh3Default>),
    Sha256(sha2::Sha256),
}

impl Hasher {
    /// A hasher for `algorithm`, over no bytes yet.
    pub fn new(algorithm: Checksum) -> Hasher {
        let state = match algorithm {
            Checksum::Xxh3_64 => State::Xxh3(Box::new(Xxh3Default::new())),
            Checksum::Sha256 => State::Sha256(sha2::Sha256::new()),
        };
        Hasher { state }
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.state {
            State::Xxh3(h) => h.update(bytes),
            State::Sha256(h) => h.update(bytes),
        }
    }

    /// The checksum of everything fed: `"xxh3-64:<16 hex digits>"` or `"sha256:<64 hex digits>"`.
    pub fn finish(self) -> String {
        match self.state {
            State::Xxh3(h) => format!("xxh3-64:{:016x}", h.digest()),
            State::Sha256(h) => {
                let mut out = String::from("sha256:");
                for byte in h.finalize().iter() {
                    write!(out, "{byte:02x}").expect("writing to a String cannot fail");
                }
                out
            }
        }
    }
}

/// The bare sha256 hex digest of `bytes` (as the manifest's `spec_sha256` holds it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut h = Hasher::new(Checksum::Sha256);
    h.update(bytes);
    h.finish().trim_start_matches("sha256:").to_string()
}

/// The checksum of a file's bytes, read in large pieces.
pub fn hash_file(path: &Path, algorithm: Checksum) -> io::Result<String> {
    hash_reader(File::open(path)?, algorithm)
}

/// The checksum of everything `reader` gives, read in large pieces.
pub fn hash_reader(mut reader: impl Read, algorithm: Checksum) -> io::Result<String> {
    let mut hasher = Hasher::new(algorithm);
    let mut buf = vec![0u8; FILE_BUFFER];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(hasher.finish()),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::TestDir;

    fn hash(algorithm: Checksum, bytes: &[u8]) -> String {
        let mut h = Hasher::new(algorithm);
        h.update(bytes);
        h.finish()
    }

    #[test]
    fn xxh3_known_answers() {
        assert_eq!(hash(Checksum::Xxh3_64, b""), "xxh3-64:2d06800538d394c2");
        assert_eq!(hash(Checksum::Xxh3_64, b"abc"), "xxh3-64:78af5f94892f3950");
    }

    #[test]
    fn sha256_known_answers() {
        assert_eq!(
            hash(Checksum::Sha256, b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hash(Checksum::Sha256, b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn pieces_hash_like_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for algorithm in [Checksum::Xxh3_64, Checksum::Sha256] {
            let mut h = Hasher::new(algorithm);
            for piece in data.chunks(333) {
                h.update(piece);
            }
            assert_eq!(h.finish(), hash(algorithm, &data));
        }
    }

    #[test]
    fn file_hash_matches_bytes() {
        let dir = TestDir::new("hash-file");
        let data: Vec<u8> = (0..(FILE_BUFFER + 12345))
            .map(|i| (i % 256) as u8)
            .collect();
        let path = dir.path().join("data.bin");
        std::fs::write(&path, &data).unwrap();
        for algorithm in [Checksum::Xxh3_64, Checksum::Sha256] {
            assert_eq!(hash_file(&path, algorithm).unwrap(), hash(algorithm, &data));
        }
    }
}
