//! Whether the CUDA libraries the GPU backend loads at run time are there: an absent library is
//! an error that names it and where it was looked for, never a panic.

use anyhow::{Result, bail};

/// A library the GPU backend needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    /// The CUDA driver (libcuda).
    Driver,
    /// The runtime compiler (libnvrtc), for the copy kernels.
    Nvrtc,
    /// NCCL (libnccl).
    Nccl,
    /// cuBLAS (libcublas), for matmul.
    Cublas,
    /// cuBLASLt (libcublasLt), for matmuls with a fused epilog.
    Cublaslt,
    /// cuFFT (libcufft), for FFTs.
    Cufft,
}

impl Lib {
    fn name(self) -> &'static str {
        match self {
            Lib::Driver => "cuda",
            Lib::Nvrtc => "nvrtc",
            Lib::Nccl => "nccl",
            Lib::Cublas => "cublas",
            Lib::Cublaslt => "cublasLt",
            Lib::Cufft => "cufft",
        }
    }

    /// The file names tried, in order, each once (cudarc's list repeats some).
    pub fn candidates(self) -> Vec<String> {
        let mut names = cudarc::get_lib_name_candidates(self.name());
        if self == Lib::Nccl {
            names.push("libnccl.so.2".into());
        }
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        names
    }

    fn present(self) -> bool {
        // SAFETY: these only try to open the libraries.
        unsafe {
            match self {
                Lib::Driver => cudarc::driver::sys::is_culib_present(),
                Lib::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                Lib::Cublas => cudarc::cublas::sys::is_culib_present(),
                Lib::Cublaslt => cudarc::cublaslt::sys::is_culib_present(),
                Lib::Cufft => cudarc::cufft::sys::is_culib_present(),
                Lib::Nccl => self
                    .candidates()
                    .iter()
                    .any(|n| libloading::Library::new(n).is_ok()),
            }
        }
    }
}

/// Every library in `libs` is there, or an error naming the first missing one and where it was
/// looked for.
pub fn require(libs: &[Lib]) -> Result<()> {
    for &lib in libs {
        if !lib.present() {
            bail!(
                "device = \"cuda\" needs lib{}, which was not found: tried {} in the dynamic \
                 linker's search path (LD_LIBRARY_PATH, then the ld.so cache)",
                lib.name(),
                lib.candidates().join(", ")
            );
        }
    }
    Ok(())
}

/// True when the GPU backend can start here with `libs`: they load and a GPU is visible (told
/// without starting CUDA where it can be, so that the backend can still start CUDA on its own
/// GPU alone).
pub fn available(libs: &[Lib]) -> bool {
    if require(libs).is_err() {
        return false;
    }
    match super::devmap::visible_here() {
        Some(list) => !list.is_empty(),
        None => cudarc::driver::CudaContext::device_count().is_ok_and(|n| n > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_library_and_the_places_tried() {
        // On a machine without CUDA (CI), the driver is missing; where CUDA exists this passes.
        match require(&[Lib::Driver]) {
            Ok(()) => {}
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("libcuda"), "{text}");
                assert!(text.contains("libcuda.so"), "{text}");
            }
        }
        assert!(Lib::Nccl.candidates().contains(&"libnccl.so.2".to_string()));
    }

    #[test]
    fn each_file_name_is_tried_once() {
        for lib in [
            Lib::Driver,
            Lib::Nvrtc,
            Lib::Nccl,
            Lib::Cublas,
            Lib::Cublaslt,
            Lib::Cufft,
        ] {
            let names = lib.candidates();
            let unique: std::collections::HashSet<_> = names.iter().collect();
            assert_eq!(unique.len(), names.len(), "{lib:?}: {names:?}");
        }
    }
}
