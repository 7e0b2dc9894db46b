//! The CUDA backend through the public API: typed errors where there is no driver or
//! device, and (on a GPU) the refusals every backend makes. The tests that need the
//! backend's internals (its kernels launched by hand, its child-process IPC) are in
//! `host/src/backend/cuda/tests.rs`. GPU tests print `skipped: <reason>` (and pass)
//! where [`Cuda::new`] fails.

use symmem::Error;
use symmem::backend::cuda::Cuda;
use symmem::backend::{Backend, BackendKind, DeviceRegion};

#[test]
fn cuda_new_is_typed_error_without_driver() {
    match Cuda::new(0) {
        Err(
            e @ (Error::LibraryMissing {
                library: "libcuda.so",
            }
            | Error::NoDevice { backend: "cuda" }),
        ) => {
            println!("no CUDA here, as expected: {e}");
        }
        Ok(cuda) => println!("a CUDA device is present: {cuda:?}"),
        Err(e) => panic!("expected LibraryMissing or NoDevice, got {e:?}"),
    }
    // Every entry point answers the same way before touching a device.
    let typed = |e: &Error| {
        matches!(
            e,
            Error::LibraryMissing { .. } | Error::NoDevice { backend: "cuda" }
        )
    };
    if let Err(e) = Cuda::device_count() {
        assert!(typed(&e), "{e:?}");
        assert!(typed(&Cuda::for_rank(5).unwrap_err()));
        assert!(typed(&Cuda::device_context(0).unwrap_err()));
    }
    // Past the last device is NoDevice whatever the machine.
    let n = Cuda::device_count().unwrap_or(0);
    assert!(matches!(
        Cuda::device_context(n),
        Err(Error::NoDevice { .. } | Error::LibraryMissing { .. })
    ));
}

#[test]
fn cuda_new_twice_does_not_panic() {
    // The loader state is process-wide: a second probe must answer the same way.
    let a = Cuda::new(0).map(|_| ()).map_err(|e| e.to_string());
    let b = Cuda::new(0).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(a, b);
}

#[test]
fn cuda_gpu_bad_ordinal_and_zero_sizes() {
    let Ok(r0) = Cuda::new(0).inspect_err(|e| println!("skipped: {e}")) else {
        return;
    };
    assert!(matches!(
        Cuda::new(4096),
        Err(Error::NoDevice { backend: "cuda" })
    ));
    assert!(matches!(r0.create_heap(0), Err(Error::ZeroSize)));
    assert!(matches!(r0.alloc_device(0), Err(Error::ZeroSize)));
    assert_eq!(r0.kind(), BackendKind::Cuda);
    assert!(!r0.device_name().is_empty());
    // A heap of one byte rounds up to the granularity.
    assert_eq!(r0.create_heap(1).unwrap().len(), r0.heap_granularity());
    assert_eq!(r0.device_to_host_syncs(), 0);
}
