//! NCCL windows: buffers that NCCL 2.28 and later moves by the copy engines.
//!
//! A buffer from `ncclMemAlloc` (CUDA's virtual memory, which peers can map) registered with
//! `ncclCommWindowRegister` as symmetric (collective: every rank registers the same size at the
//! same point) is a window. On a communicator whose CTA policy is zero, NCCL runs an all-gather
//! (or all-to-all) within windows of GPUs that all reach each other directly (one node) by the
//! copy engines, each rank writing into its peers' windows, with no kernel: the SMs stay with
//! the GEMMs it overlaps. Elsewhere (peers not all direct, CUDA's virtual memory off in NCCL)
//! NCCL still moves windows correctly, by its kernels.
//!
//! Where NCCL maps every rank's window into every GPU's address space (GPUs that reach each
//! other directly), [`Window::map_peers`] finds where each rank's copy lies here, so that
//! distrun's puts (the copy engines into a peer's window, stream-ordered signals) run with NCCL
//! alone, as they do on NVSHMEM's heap: NCCL 2.29 and later says where
//! (`ncclGetPeerDevicePointer`); NCCL 2.28, which says it only to device code, keeps it in the
//! window's device-side record, read once (see [`Lsa`]).

use anyhow::{Result, anyhow, bail, ensure};
use cudarc::driver::CudaContext;
use cudarc::driver::sys::{
    CUmemorytype, CUpointer_attribute, cuMemGetAddressRange_v2, cuMemcpyDtoH_v2,
    cuPointerGetAttribute,
};
use cudarc::nccl::sys as nccl_sys;
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

/// NCCL's `NCCL_WIN_COLL_SYMMETRIC`: the offsets into a window are the same on every rank.
const WIN_COLL_SYMMETRIC: i32 = 0x01;
/// NCCL's `NCCL_CTA_POLICY_ZERO`: no CTA where NCCL can move without (the copy engines).
const CTA_POLICY_ZERO: i32 = 0x02;
/// The first NCCL (major * 10000 + minor * 100 + patch) with copy-engine collectives within
/// windows.
const FIRST_VERSION: i32 = 22800;

/// Whether the NCCL loaded takes windows (2.28 or later).
pub fn supported() -> bool {
    super::nccl_version() >= FIRST_VERSION
}

/// The configuration of a communicator that moves windows by the copy engines (NCCL's
/// `NCCL_CONFIG_INITIALIZER` with the CTA policy zero): every other field left to NCCL.
pub fn config() -> nccl_sys::ncclConfig_t {
    const UNDEF: i32 = i32::MIN;
    nccl_sys::ncclConfig_t {
        size: std::mem::size_of::<nccl_sys::ncclConfig_t>(),
        magic: 0xcafe_beef,
        // The struct as NCCL 2.28.3 lays it out (cudarc's has its fields, and a few later
        // ones that NCCL reads only from newer versions).
        version: FIRST_VERSION as u32 + 3,
        blocking: UNDEF,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: CTA_POLICY_ZERO,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
        graphUsageMode: UNDEF,
        numRmaCtx: UNDEF,
        maxP2pPeers: UNDEF,
    }
}

/// A registered window at `ptr`; deregistered and freed when dropped, once the GPU's queued
/// work is done (a local act: no peer waits for it).
pub struct Window {
    // The communicator, window and allocation, as addresses (a buffer may cross threads).
    comm: usize,
    win: usize,
    ptr: usize,
    bytes: usize,
    ctx: Arc<CudaContext>,
    /// Where every rank's copy lies in this GPU's address space, by rank, once mapped.
    peers: OnceLock<Vec<u64>>,
}

/// The head of NCCL 2.28's device-side window record (`struct ncclWindow_vidmem`, the same
/// in NCCL's published sources from 2.28.3 to 2.30.7): the first byte of the load/store-accessible (LSA) team's rank 0 copy, and
/// each next rank's copy `stride4G` x 4 GiB further on (NCCL's device `ncclGetPeerPointer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lsa {
    /// `lsaFlatBase`: rank 0's copy of the window in the team's flat mapping.
    pub flat_base: u64,
    /// `lsaRank`: this rank's place in the team.
    pub lsa_rank: i32,
    /// `worldRank`: this rank in the communicator.
    pub world_rank: i32,
    /// `stride4G`: units of 4 GiB from one rank's copy to the next.
    pub stride_4g: u32,
}

/// Bytes of the record's head that [`Lsa`] reads: `winHost` (a pointer), `lsaFlatBase`,
/// `lsaRank`, `worldRank`, `stride4G`.
const LSA_HEAD: usize = 28;

impl Lsa {
    /// The head as the record's first [`LSA_HEAD`] bytes hold it (little-endian, as on every
    /// CUDA host).
    pub fn parse(head: &[u8; LSA_HEAD]) -> Self {
        let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        Lsa {
            flat_base: u64_at(8),
            lsa_rank: u32_at(16) as i32,
            world_rank: u32_at(20) as i32,
            stride_4g: u32_at(24),
        }
    }

    /// Where rank `peer`'s copy lies here (NCCL's `ncclGetPeerPointer` at offset 0): None for a
    /// rank before the team's first or past the communicator's last (the record does not hold
    /// the team's size: callers check the address is mapped, and a probe reads through it).
    pub fn peer(&self, peer: usize, ranks: usize) -> Option<u64> {
        let i = i64::from(self.lsa_rank) + peer as i64 - i64::from(self.world_rank);
        let team_end = i64::from(self.lsa_rank) + ranks as i64 - i64::from(self.world_rank);
        if i < 0 || i >= team_end {
            return None;
        }
        let step = (i as u64).wrapping_mul(u64::from(self.stride_4g)) << 32;
        Some(self.flat_base.wrapping_add(step))
    }
}

/// NCCL's `ncclGetPeerDevicePointer` (2.29 and later), where the loaded NCCL has it.
type PeerPointer = unsafe extern "C" fn(
    nccl_sys::ncclWindow_t,
    usize,
    i32,
    *mut *mut c_void,
) -> nccl_sys::ncclResult_t;

/// The loaded NCCL's `ncclGetPeerDevicePointer`: the library cudarc loaded (the first of the
/// same names that loads) asked for it.
fn peer_pointer_fn() -> Option<PeerPointer> {
    static FOUND: OnceLock<Option<(libloading::Library, PeerPointer)>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let names = super::probe::Lib::Nccl.candidates();
        // SAFETY: NCCL is loaded already; loading it again runs no initializer.
        let lib = names
            .iter()
            .find_map(|n| unsafe { libloading::Library::new(n) }.ok())?;
        // SAFETY: the symbol's C signature, as NCCL's `nccl.h` declares it.
        let f = unsafe { lib.get::<PeerPointer>(b"ncclGetPeerDevicePointer\0") }.ok()?;
        let f = *f;
        Some((lib, f))
    });
    found.as_ref().map(|(_, f)| *f)
}

/// Whether `addr..addr + bytes` lies inside one mapping of this GPU's context.
fn mapped(addr: u64, bytes: usize) -> bool {
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: out-pointers; the driver only looks the address up.
    let found = unsafe { cuMemGetAddressRange_v2(&mut base, &mut size, addr) }.result();
    found.is_ok() && addr >= base && addr + bytes as u64 <= base + size as u64
}

fn check(what: &str, r: nccl_sys::ncclResult_t) -> Result<()> {
    match r {
        nccl_sys::ncclResult_t::ncclSuccess => Ok(()),
        e => Err(anyhow!("{what}: NCCL error {e:?}")),
    }
}

impl Window {
    /// Allocates `bytes` (at least one) and registers them on `comm` (collective: every rank
    /// of `comm` calls it with the same size, windows in the same order).
    pub fn new(comm: nccl_sys::ncclComm_t, bytes: usize, ctx: &Arc<CudaContext>) -> Result<Self> {
        let bytes = bytes.max(1);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: an out-pointer; NCCL allocates on the current GPU (this rank's context).
        check("ncclMemAlloc", unsafe {
            nccl_sys::ncclMemAlloc(&mut ptr, bytes)
        })?;
        let mut win = std::ptr::null_mut();
        // SAFETY: `bytes` of NCCL's memory at `ptr`, registered whole (offset 0 is aligned).
        let registered = check("ncclCommWindowRegister", unsafe {
            nccl_sys::ncclCommWindowRegister(comm, ptr, bytes, &mut win, WIN_COLL_SYMMETRIC)
        });
        if let Err(e) = registered {
            // SAFETY: the allocation above, unused.
            unsafe { nccl_sys::ncclMemFree(ptr) };
            return Err(e);
        }
        Ok(Window {
            comm: comm as usize,
            win: win as usize,
            ptr: ptr as usize,
            bytes,
            ctx: ctx.clone(),
            peers: OnceLock::new(),
        })
    }

    /// The window's device address.
    pub fn ptr(&self) -> u64 {
        self.ptr as u64
    }

    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Finds where each of the `ranks` ranks' copies of the window lies in this GPU's address
    /// space (this rank being `rank`), each checked to be mapped here whole: an error where NCCL
    /// maps some rank's copy nowhere here (another node, CUDA's virtual memory off in NCCL).
    /// Local: no peer takes part.
    pub fn map_peers(&self, rank: usize, ranks: usize) -> Result<()> {
        if self.peers.get().is_some() {
            return Ok(());
        }
        let peers = match peer_pointer_fn() {
            Some(f) => (0..ranks)
                .map(|p| {
                    let mut out = std::ptr::null_mut();
                    // SAFETY: this window's handle and an out-pointer.
                    check("ncclGetPeerDevicePointer", unsafe {
                        f(self.win as _, 0, p as i32, &mut out)
                    })?;
                    ensure!(!out.is_null(), "NCCL maps rank {p}'s window nowhere here");
                    Ok(out as u64)
                })
                .collect::<Result<Vec<_>>>()?,
            None => {
                let lsa = self.lsa()?;
                ensure!(
                    lsa.world_rank == rank as i32,
                    "NCCL's window record names rank {} for rank {rank}",
                    lsa.world_rank
                );
                (0..ranks)
                    .map(|p| {
                        lsa.peer(p, ranks)
                            .ok_or_else(|| anyhow!("rank {p} is outside NCCL's team here"))
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        for (p, &addr) in peers.iter().enumerate() {
            ensure!(
                mapped(addr, self.bytes),
                "rank {p}'s window is not mapped here whole ({:#x})",
                addr
            );
        }
        let _ = self.peers.set(peers);
        Ok(())
    }

    /// The head of NCCL 2.28's device-side record of the window (device memory NCCL filled at
    /// registration, which stays while the window does).
    fn lsa(&self) -> Result<Lsa> {
        let version = super::nccl_version();
        if !(FIRST_VERSION..22900).contains(&version) {
            bail!("NCCL {version} says where peers' windows lie only through its own call");
        }
        let mut kind = 0u32;
        // SAFETY: an out-pointer of the attribute's type (a `CUmemorytype`, 4 bytes).
        let asked = unsafe {
            cuPointerGetAttribute(
                (&mut kind as *mut u32).cast(),
                CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                self.win as u64,
            )
        };
        // A window NCCL made without symmetric memory is a host-side handle instead.
        ensure!(
            asked.result().is_ok() && kind == CUmemorytype::CU_MEMORYTYPE_DEVICE as u32,
            "NCCL's window has no device-side record (no symmetric memory)"
        );
        ensure!(
            mapped(self.win as u64, LSA_HEAD),
            "NCCL's window record is not mapped"
        );
        let mut head = [0u8; LSA_HEAD];
        // SAFETY: the record's first bytes, device memory checked above, into a host array.
        unsafe { cuMemcpyDtoH_v2(head.as_mut_ptr().cast(), self.win as u64, LSA_HEAD) }.result()?;
        Ok(Lsa::parse(&head))
    }

    /// Where byte `offset` of rank `peer`'s copy lies here, once [`Window::map_peers`] found it.
    pub fn peer(&self, peer: usize, offset: usize) -> Option<u64> {
        let base = *self.peers.get()?.get(peer)?;
        Some(base + offset as u64)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // Queued copies may still read or write it (a peer's writes into it are done once this
        // rank's all-to-all is: NCCL waits for every peer's copies before it completes).
        let _ = self.ctx.synchronize();
        // SAFETY: the window and allocation made in `new`, released once.
        unsafe {
            nccl_sys::ncclCommWindowDeregister(self.comm as _, self.win as _);
            nccl_sys::ncclMemFree(self.ptr as *mut c_void);
        }
    }
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Window({:#x})", self.ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of a record as NCCL 2.28 fills it (`symWindowCreate`).
    fn head(flat_base: u64, lsa_rank: u32, world_rank: u32, stride_4g: u32) -> [u8; LSA_HEAD] {
        let mut h = [0u8; LSA_HEAD];
        h[..8].copy_from_slice(&0x7fff_1234_5678u64.to_le_bytes());
        h[8..16].copy_from_slice(&flat_base.to_le_bytes());
        h[16..20].copy_from_slice(&lsa_rank.to_le_bytes());
        h[20..24].copy_from_slice(&world_rank.to_le_bytes());
        h[24..28].copy_from_slice(&stride_4g.to_le_bytes());
        h
    }

    #[test]
    fn the_record_head_is_read_field_by_field() {
        let lsa = Lsa::parse(&head(0x7f00_0020_0000, 2, 2, 3));
        assert_eq!(
            lsa,
            Lsa {
                flat_base: 0x7f00_0020_0000,
                lsa_rank: 2,
                world_rank: 2,
                stride_4g: 3
            }
        );
    }

    #[test]
    fn each_rank_lies_its_stride_of_4_gib_further_on() {
        // One node of 4: rank r's copy at the base plus r x 3 x 4 GiB.
        let lsa = Lsa::parse(&head(0x7f00_0020_0000, 1, 1, 3));
        let at = |p| lsa.peer(p, 4);
        assert_eq!(at(0), Some(0x7f00_0020_0000));
        assert_eq!(at(1), Some(0x7f00_0020_0000 + (3 << 32)));
        assert_eq!(at(3), Some(0x7f00_0020_0000 + (9 << 32)));
        assert_eq!(at(4), None);
    }

    #[test]
    fn a_team_of_one_node_among_several_counts_from_its_first_rank() {
        // Rank 5 is the second of a team that starts at world rank 4: ranks below it are not
        // here, and the team's 0th copy is world rank 4's.
        let lsa = Lsa::parse(&head(0x10_0000_0000, 1, 5, 1));
        assert_eq!(lsa.peer(3, 8), None);
        assert_eq!(lsa.peer(4, 8), Some(0x10_0000_0000));
        assert_eq!(lsa.peer(5, 8), Some(0x11_0000_0000));
    }
}
