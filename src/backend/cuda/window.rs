//! NCCL windows: buffers that NCCL 2.28 and later moves by the copy engines.
//!
//! A buffer from `ncclMemAlloc` (CUDA's virtual memory, which peers can map) registered with
//! `ncclCommWindowRegister` as symmetric (collective: every rank registers the same size at the
//! same point) is a window. On a communicator whose CTA policy is zero, NCCL runs an all-gather
//! (or all-to-all) within windows of GPUs that all reach each other directly (one node) by the
//! copy engines, each rank writing into its peers' windows, with no kernel: the SMs stay with
//! the GEMMs it overlaps. Elsewhere (peers not all direct, CUDA's virtual memory off in NCCL)
//! NCCL still moves windows correctly, by its kernels.

use anyhow::{Result, anyhow};
use cudarc::driver::CudaContext;
use cudarc::nccl::sys as nccl_sys;
use std::ffi::c_void;
use std::sync::Arc;

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
    ctx: Arc<CudaContext>,
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
            ctx: ctx.clone(),
        })
    }

    /// The window's device address.
    pub fn ptr(&self) -> u64 {
        self.ptr as u64
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
