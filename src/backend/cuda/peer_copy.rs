//! Copies and signals into a peer GPU's memory mapped into this GPU's address space (NVSHMEM's
//! symmetric heap, NCCL's windows): queued on a stream, run by the copy engines and the stream's
//! memory operations, so they need no SM.

use crate::backend::Rows;
use anyhow::Result;
use cudarc::driver::CudaStream;
use cudarc::driver::sys::{
    CUDA_MEMCPY2D, CUdevice_attribute, CUmemorytype, CUstreamWaitValue_flags,
    cuMemcpy2DAsync_v2 as cuMemCpy2D, cuMemcpyDtoDAsync_v2, cuStreamWaitValue32_v2,
    cuStreamWriteValue32_v2,
};
use std::sync::OnceLock;

/// The driver's description of a copy of `rows` between two device addresses.
pub fn copy_2d(src: u64, dst: u64, rows: Rows) -> CUDA_MEMCPY2D {
    let device = CUmemorytype::CU_MEMORYTYPE_DEVICE;
    CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: device,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: rows.src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: device,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: rows.dst_pitch,
        WidthInBytes: rows.width,
        Height: rows.height,
    }
}

/// The device's largest pitch of a 2-D copy, asked once per `cache`.
pub fn max_pitch(stream: &CudaStream, cache: &OnceLock<usize>) -> Result<usize> {
    if let Some(&p) = cache.get() {
        return Ok(p);
    }
    let attribute = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_PITCH;
    let p = stream.context().attribute(attribute)? as usize;
    Ok(*cache.get_or_init(|| p))
}

/// Whether `rows` go in one 2-D copy (both pitches within the device's largest).
pub fn one_copy(rows: Rows, max_pitch: usize) -> bool {
    rows.is_flat() || rows.src_pitch.max(rows.dst_pitch) <= max_pitch
}

/// Queues on `stream` the copy of `rows` from `src` into `dst` (device addresses of this GPU's
/// address space, a peer's mapped memory included): one copy where [`one_copy`], else one per
/// row.
///
/// # Safety
///
/// Both rows' spans must be device memory that stays valid until the stream has passed the copy,
/// and `stream` must be a live stream of this GPU's context.
pub unsafe fn copy_rows(
    stream: &CudaStream,
    src: u64,
    dst: u64,
    rows: Rows,
    max: usize,
) -> Result<()> {
    let raw = stream.cu_stream();
    if rows.width == 0 || rows.height == 0 {
        return Ok(());
    }
    if rows.is_flat() {
        // SAFETY: the caller vouches for both spans and the stream.
        return Ok(
            unsafe { cuMemcpyDtoDAsync_v2(dst, src, rows.width * rows.height, raw) }.result()?,
        );
    }
    if one_copy(rows, max) {
        let copy = copy_2d(src, dst, rows);
        // SAFETY: as above.
        return Ok(unsafe { cuMemCpy2D(&copy, raw) }.result()?);
    }
    for i in 0..rows.height {
        let (s, d) = ((i * rows.src_pitch) as u64, (i * rows.dst_pitch) as u64);
        // SAFETY: one row of each span.
        unsafe { cuMemcpyDtoDAsync_v2(dst + d, src + s, rows.width, raw) }.result()?;
    }
    Ok(())
}

/// Queues on `stream` the write of `value` into the u32 at `addr` (a peer's mapped memory) once
/// the work queued before it is done and visible (the driver's default: a memory fence first).
///
/// # Safety
///
/// `addr` must address four bytes of device memory mapped into this GPU's context, and `stream`
/// be a live stream of it.
pub unsafe fn write_u32(stream: &CudaStream, addr: u64, value: u32) -> Result<()> {
    // SAFETY: the caller vouches for the address and the stream.
    Ok(unsafe { cuStreamWriteValue32_v2(stream.cu_stream(), addr, value, 0) }.result()?)
}

/// Makes `stream` wait until the u32 at `addr` (this GPU's memory) is at least `value`, in
/// wrapping order.
///
/// # Safety
///
/// `addr` must address four bytes of this GPU's device memory, and `stream` be a live stream of
/// its context.
pub unsafe fn wait_u32(stream: &CudaStream, addr: u64, value: u32) -> Result<()> {
    let geq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: the caller vouches for the address and the stream.
    Ok(unsafe { cuStreamWaitValue32_v2(stream.cu_stream(), addr, value, geq) }.result()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_copies_describe_both_pitches() {
        let rows = Rows {
            width: 4096,
            height: 64,
            src_pitch: 8192,
            dst_pitch: 4096,
        };
        let c = copy_2d(0x1000, 0x9000, rows);
        assert_eq!((c.srcDevice, c.dstDevice), (0x1000, 0x9000));
        assert_eq!((c.srcPitch, c.dstPitch), (8192, 4096));
        assert_eq!((c.WidthInBytes, c.Height), (4096, 64));
        assert_eq!((c.srcXInBytes, c.srcY, c.dstXInBytes, c.dstY), (0, 0, 0, 0));
        assert_eq!(rows.span(rows.src_pitch), 63 * 8192 + 4096);
        assert!(!rows.is_flat() && Rows::flat(10).is_flat());
    }

    #[test]
    fn rows_wider_apart_than_the_device_takes_go_one_by_one() {
        let rows = |src_pitch, dst_pitch| Rows {
            width: 16,
            height: 3,
            src_pitch,
            dst_pitch,
        };
        assert!(one_copy(rows(1 << 20, 16), 1 << 21));
        assert!(!one_copy(rows(1 << 22, 16), 1 << 21));
        assert!(!one_copy(rows(16, 1 << 22), 1 << 21));
        assert!(one_copy(Rows::flat(1 << 30), 1 << 21));
    }
}
