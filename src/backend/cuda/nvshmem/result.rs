//! The NVSHMEM host calls distrun makes, one thin function each over the bindings in [`sys`]:
//! a status code becomes a `Result` whose error names the call, and a pointer NVSHMEM returns as
//! NULL for "none" becomes an `Option` (as cudarc's `result` modules do over its `sys`).

use super::sys;
use std::ffi::c_void;
use std::ptr::NonNull;

/// An NVSHMEM call that returned a status other than 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvshmemError {
    /// The call's name, as NVSHMEM spells it.
    pub call: &'static str,
    /// The status it returned.
    pub status: i32,
}

impl std::fmt::Display for NvshmemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed (status {})", self.call, self.status)
    }
}

impl std::error::Error for NvshmemError {}

/// `Ok` for status 0, otherwise the error naming `call` and the status (also for a status
/// that arrived from another rank).
pub fn check(call: &'static str, status: i32) -> Result<(), NvshmemError> {
    match status {
        0 => Ok(()),
        status => Err(NvshmemError { call, status }),
    }
}

/// The library's version: major, minor, patch (`nvshmemx_vendor_get_version_info`).
pub fn vendor_version(lib: &sys::NvshmemLib) -> (i32, i32, i32) {
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    // SAFETY: writes three ints; needs no initialization.
    unsafe { lib.nvshmemx_vendor_get_version_info(&mut major, &mut minor, &mut patch) };
    (major, minor, patch)
}

/// Fills `uid` with a new unique id (`nvshmemx_get_uniqueid`).
///
/// # Safety
///
/// NVSHMEM's environment must be set as init will read it.
pub unsafe fn get_uniqueid(
    lib: &sys::NvshmemLib,
    uid: &mut sys::nvshmemx_uniqueid_t,
) -> Result<(), NvshmemError> {
    // SAFETY: `uid` is a valid, initialized id to fill.
    check("nvshmemx_get_uniqueid", unsafe {
        lib.nvshmemx_get_uniqueid(uid)
    })
}

/// Puts this rank, the rank count and `uid` in `attr` (`nvshmemx_set_attr_uniqueid_args`).
///
/// # Safety
///
/// `attr` keeps a pointer to `uid`: `uid` must outlive every use of `attr`.
pub unsafe fn set_attr_uniqueid_args(
    lib: &sys::NvshmemLib,
    rank: i32,
    nranks: i32,
    uid: &sys::nvshmemx_uniqueid_t,
    attr: &mut sys::nvshmemx_init_attr_t,
) -> Result<(), NvshmemError> {
    // SAFETY: the caller keeps `uid` alive as long as `attr` is used.
    check("nvshmemx_set_attr_uniqueid_args", unsafe {
        lib.nvshmemx_set_attr_uniqueid_args(rank, nranks, uid, attr)
    })
}

/// Initializes NVSHMEM with `attr` (`nvshmemx_hostlib_init_attr`; collective).
///
/// # Safety
///
/// `attr` must be filled as NVSHMEM's initializers do, with what `flags` names; every rank calls
/// this with the same id and its own rank.
pub unsafe fn hostlib_init_attr(
    lib: &sys::NvshmemLib,
    flags: u32,
    attr: &mut sys::nvshmemx_init_attr_t,
) -> Result<(), NvshmemError> {
    // SAFETY: the caller vouches for the attributes.
    check("nvshmemx_hostlib_init_attr", unsafe {
        lib.nvshmemx_hostlib_init_attr(flags, attr)
    })
}

/// Finalizes NVSHMEM (`nvshmemx_hostlib_finalize`; collective).
///
/// # Safety
///
/// NVSHMEM must be initialized, and is finalized once; its symmetric memory goes with it.
pub unsafe fn hostlib_finalize(lib: &sys::NvshmemLib) {
    // SAFETY: the caller vouches for the state.
    unsafe { lib.nvshmemx_hostlib_finalize() }
}

/// This process's PE number and the PE count (`nvshmem_my_pe`, `nvshmem_n_pes`).
///
/// # Safety
///
/// NVSHMEM must be initialized.
pub unsafe fn my_pe_and_n_pes(lib: &sys::NvshmemLib) -> (i32, i32) {
    // SAFETY: plain queries after init.
    unsafe { (lib.nvshmem_my_pe(), lib.nvshmem_n_pes()) }
}

/// Allocates `size` bytes on the symmetric heap (`nvshmem_malloc`; collective): `None` where
/// the heap has no room.
///
/// # Safety
///
/// Every rank calls this with the same size, in the same order.
pub unsafe fn malloc(lib: &sys::NvshmemLib, size: usize) -> Option<NonNull<c_void>> {
    // SAFETY: the caller vouches for the collective call.
    NonNull::new(unsafe { lib.nvshmem_malloc(size) })
}

/// Frees a symmetric allocation (`nvshmem_free`; collective).
///
/// # Safety
///
/// `ptr` came from [`malloc`], is freed once, while NVSHMEM is initialized, by every rank in the
/// same order.
pub unsafe fn free(lib: &sys::NvshmemLib, ptr: *mut c_void) {
    // SAFETY: the caller vouches for the pointer.
    unsafe { lib.nvshmem_free(ptr) }
}

/// Where the symmetric address `ptr` of PE `pe` lies in this GPU's address space
/// (`nvshmem_ptr`): `None` where `pe` is not mapped here.
///
/// # Safety
///
/// `ptr` must be an address inside a symmetric buffer.
pub unsafe fn ptr(lib: &sys::NvshmemLib, ptr: *const c_void, pe: i32) -> Option<NonNull<c_void>> {
    // SAFETY: the caller vouches for the address.
    NonNull::new(unsafe { lib.nvshmem_ptr(ptr, pe) })
}

/// Queues on `stream` a put of `bytes` from `source` to `dest` on PE `pe`
/// (`nvshmemx_putmem_on_stream`).
///
/// # Safety
///
/// `dest` must lie in a symmetric buffer with `bytes` after it, `source` in device memory that
/// stays valid until the stream has passed the put, and `stream` must belong to the GPU NVSHMEM
/// was initialized on.
pub unsafe fn putmem_on_stream(
    lib: &sys::NvshmemLib,
    dest: *mut c_void,
    source: *const c_void,
    bytes: usize,
    pe: i32,
    stream: sys::cudaStream_t,
) {
    // SAFETY: the caller vouches for both sides and the stream.
    unsafe { lib.nvshmemx_putmem_on_stream(dest, source, bytes, pe, stream) }
}

/// Queues on `stream` a barrier over every PE (`nvshmemx_barrier_all_on_stream`; collective).
///
/// # Safety
///
/// `stream` must belong to the GPU NVSHMEM was initialized on; every rank calls this.
pub unsafe fn barrier_all_on_stream(lib: &sys::NvshmemLib, stream: sys::cudaStream_t) {
    // SAFETY: the caller vouches for the stream.
    unsafe { lib.nvshmemx_barrier_all_on_stream(stream) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_becomes_a_result_naming_the_call() {
        assert_eq!(check("nvshmemx_get_uniqueid", 0), Ok(()));
        let err = check("nvshmemx_set_attr_uniqueid_args", -3).unwrap_err();
        assert_eq!(
            (err.call, err.status),
            ("nvshmemx_set_attr_uniqueid_args", -3)
        );
        assert_eq!(
            err.to_string(),
            "nvshmemx_set_attr_uniqueid_args failed (status -3)"
        );
    }
}
