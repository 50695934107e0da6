//! Frames on the connections of ranks joined over TCP: a tag byte, the length of the bytes that
//! follow (u64, little-endian), the bytes.

use std::io::{self, Read, Write};

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// A rank's greeting to rank 0: [`HELLO_MAGIC`], its rank and the rank count (u64 each).
    Hello = 1,
    /// Rank 0 to a rank: every rank has arrived.
    Welcome = 2,
    /// Rank 0 to a rank: the job cannot start; the bytes say why (already said by rank 0).
    Refused = 3,
    /// A coordinating message.
    Data = 4,
    /// The job ends now: a rank failed (rank 0 tells every other rank).
    Abort = 5,
    /// This rank is done, and closes its connection next.
    Bye = 6,
}

/// The first bytes of a hello: a connection that starts otherwise is not a distrun rank's.
pub const HELLO_MAGIC: &[u8; 8] = b"distrun1";

/// The longest frame read: anything longer is not a rank's (the messages are ids, flags and
/// timings, and host-side broadcasts).
const MAX_FRAME: u64 = 1 << 32;

impl Tag {
    fn from_byte(b: u8) -> Option<Tag> {
        [
            Tag::Hello,
            Tag::Welcome,
            Tag::Refused,
            Tag::Data,
            Tag::Abort,
            Tag::Bye,
        ]
        .into_iter()
        .find(|t| *t as u8 == b)
    }
}

/// Writes one frame (with one write call where it is small, so that it leaves as one segment).
pub fn send(w: &mut impl Write, tag: Tag, bytes: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(9 + bytes.len().min(1 << 16));
    frame.push(tag as u8);
    frame.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    if bytes.len() <= 1 << 16 {
        frame.extend_from_slice(bytes);
        return w.write_all(&frame);
    }
    w.write_all(&frame)?;
    w.write_all(bytes)
}

/// Reads one frame. An unknown tag or a length past [`MAX_FRAME`] is `InvalidData`.
pub fn receive(r: &mut impl Read) -> io::Result<(Tag, Vec<u8>)> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head)?;
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let tag = Tag::from_byte(head[0]).ok_or_else(|| bad(format!("unknown frame {}", head[0])))?;
    let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
    if len > MAX_FRAME {
        return Err(bad(format!("a frame of {len} bytes")));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    Ok((tag, bytes))
}

/// Byte strings end to end, each after its length (u64, little-endian).
pub fn pack(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| 8 + p.len()).sum());
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The `n` byte strings of [`pack`]; None where `bytes` holds anything else.
pub fn unpack(mut bytes: &[u8], n: usize) -> Option<Vec<Vec<u8>>> {
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, rest) = bytes.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        let part = rest.get(..len)?;
        parts.push(part.to_vec());
        bytes = &rest[len..];
    }
    bytes.is_empty().then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_packs_round_trip() {
        let mut buf = Vec::new();
        send(&mut buf, Tag::Data, b"abc").unwrap();
        let big = vec![7u8; 70_000];
        send(&mut buf, Tag::Bye, &big).unwrap();
        let mut r = &buf[..];
        assert_eq!(receive(&mut r).unwrap(), (Tag::Data, b"abc".to_vec()));
        assert_eq!(receive(&mut r).unwrap(), (Tag::Bye, big));
        assert!(receive(&mut r).is_err());
        let parts = vec![b"x".to_vec(), Vec::new(), b"yz".to_vec()];
        assert_eq!(unpack(&pack(&parts), 3), Some(parts.clone()));
        assert_eq!(unpack(&pack(&parts), 2), None);
        assert_eq!(unpack(&pack(&parts)[..5], 3), None);
    }

    #[test]
    fn garbage_is_refused() {
        let mut r: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(
            receive(&mut r).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut huge = vec![Tag::Data as u8];
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            receive(&mut &huge[..]).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
