//! The CUDA backend through the public API: typed errors where there is no driver or
//! device, and (on a GPU) the refusals every backend makes. The tests that need the
//! backend's internals (its kernels launched by hand, its child-process IPC) are in
//! `host/src/backend/cuda/tests.rs`. GPU tests print `skipped: <reason>` (and pass)
//! where [`Cuda::new`] finds no device or driver; any other failure fails them
//! ([`symmem_tests::unavailable`]). The `cudarc` ones run a backend on a cudarc stream and lend
//! symmetric memory to cudarc ([`CudarcView`]).

use std::sync::Arc;
use symmem::backend::cuda::Cuda;
use symmem::backend::cuda::cudarc::driver::{CudaContext, CudaStream, DevicePtr};
use symmem::backend::{Backend, BackendKind, DeviceRegion};
use symmem::{Config, CudarcView, Error};

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
    let r0 = match Cuda::new(0) {
        Ok(r0) => r0,
        init => {
            return println!(
                "skipped: {}",
                symmem_tests::unavailable(init).unwrap_or_default()
            );
        }
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

/// A cudarc stream of device 0's primary context, or `None` (printed) without a device.
fn cudarc_stream_or_skip() -> Option<(Arc<CudaContext>, Arc<CudaStream>)> {
    // Probe through symmem first: cudarc's loader panics where there is no libcuda.
    if let Some(why) = symmem_tests::unavailable(Cuda::new(0)) {
        println!("skipped: {why}");
        return None;
    }
    let ctx = CudaContext::new(0).expect("device 0 answered symmem");
    let stream = ctx.new_stream().expect("a cudarc stream");
    Some((ctx, stream))
}

#[test]
fn cuda_gpu_adopts_a_cudarc_stream_and_refuses_foreign_ones() {
    let Some((ctx, stream)) = cudarc_stream_or_skip() else {
        return;
    };
    let cuda = Cuda::from_cudarc_stream(Arc::clone(&stream)).expect("adopting the stream");
    assert!(Arc::ptr_eq(cuda.cudarc_stream(), &stream));
    assert_eq!(cuda.ordinal(), 0);
    // symmem's work on the adopted stream: a heap, a fill and a copy back.
    let heap = cuda.create_heap(1).unwrap();
    // SAFETY: the heap's first 4 KiB are device memory of this backend, unused elsewhere.
    unsafe {
        cuda.memset(heap.base(), 0xab, 4096).unwrap();
        let mut back = vec![0u8; 4096];
        cuda.download(&mut back, heap.base()).unwrap();
        assert!(back.iter().all(|&b| b == 0xab));
    }
    let drops = cuda.drop_errors();
    drop(heap);
    drop(cuda);
    assert_eq!(drops.count(), 0, "{:?}", drops.last());
    // The backend did not destroy the stream it adopted.
    stream
        .synchronize()
        .expect("the stream outlives the backend");

    // A backend of its own hands out its stream, which outlives it too.
    let own = Cuda::new(0).unwrap();
    let handed = Arc::clone(own.cudarc_stream());
    assert_eq!(
        handed.context().cu_ctx(),
        ctx.cu_ctx(),
        "the primary context"
    );
    drop(own);
    handed.synchronize().expect("a clone keeps the stream");

    let refused = |stream: Arc<CudaStream>, what: &str| match Cuda::from_cudarc_stream(stream) {
        Err(e @ Error::ForeignStream { device: 0, .. }) => println!("{what}: {e}"),
        other => panic!("{what}: expected ForeignStream, got {other:?}"),
    };
    refused(ctx.default_stream(), "the legacy default stream");
    refused(ctx.per_thread_stream(), "the per-thread default stream");
    match CudaContext::new_non_primary(0, 0).and_then(|c| c.new_stream()) {
        Ok(other) => refused(other, "a stream of a non-primary context"),
        Err(e) => println!("no non-primary context here ({e:?}); that refusal is unchecked"),
    }
}

#[test]
fn cuda_gpu_cudarc_view_of_symmetric_memory() {
    let Some((ctx, stream)) = cudarc_stream_or_skip() else {
        return;
    };
    let config = Config {
        heap_bytes: 4 << 20,
        ..Config::default()
    };
    let adopted = Arc::clone(&stream);
    let results = symmem::spawn_ranks(
        1,
        &config,
        move |_| Cuda::from_cudarc_stream(Arc::clone(&adopted)),
        |world| {
            let stream = world.backend().cudarc_stream();
            let buf = world.zeros::<u32>(1000)?;
            let view = CudarcView::new(&buf);
            assert_eq!((view.ptr(), view.len()), (buf.ptr(), 1000));
            assert_eq!(DevicePtr::device_ptr(&view, stream).0, buf.ptr());
            assert!(Arc::ptr_eq(view.stream(), stream));
            let part = buf.slice(10..20)?;
            let sub = CudarcView::from(part.local());
            assert_eq!((sub.ptr(), sub.len()), (buf.ptr() + 40, 10));

            // cudarc writes on the world's stream, symmem reads after it: stream order.
            let data: Vec<u32> = (0..1000).map(|i| i * 7 + 1).collect();
            let mut target = CudarcView::new(&buf);
            stream.memcpy_htod(&data, &mut target)?;
            assert_eq!(world.read(&buf)?, data);
            // symmem writes, cudarc reads after it on the same stream.
            let back: Vec<u32> = (0..1000).map(|i| i ^ 0x55).collect();
            world.write(&buf, 0, &back)?;
            assert_eq!(stream.clone_dtoh(&CudarcView::new(&buf))?, back);
            // On another stream the view orders itself with the world's stream.
            let other = stream.context().new_stream()?;
            world.write(&buf, 0, &data)?;
            assert_eq!(other.clone_dtoh(&CudarcView::new(&buf))?, data);
            Ok(())
        },
    )
    .expect("a world on the adopted stream");
    for r in results {
        r.expect("rank 0");
    }
    ctx.check_err()
        .expect("no error recorded in cudarc's context");
}
