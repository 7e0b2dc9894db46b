//! The HIP backend's tests that need its internals (the public-API ones are in
//! `tests/tests/hip_backend.rs`). CPU-side checks run everywhere; `hip_gpu_*` tests need
//! a device and print `skipped: <reason>` (and pass) where [`Hip::new`] finds no device or
//! driver ([`Error::is_device_missing`]); any other failure fails them.

use super::*;
use crate::backend::launch_lowered;
use crate::backend::{Backend, Grid};

fn device_or_skip() -> Option<Hip> {
    match Hip::new(0) {
        Ok(hip) => {
            println!("device: {hip:?}");
            Some(hip)
        }
        // Only a missing device or driver skips: any other failure is a regression.
        Err(e) if e.is_device_missing() => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("the backend failed to initialise with a device present: {e:?}"),
    }
}

/// Asserts that no HIP call failed while dropping anything of the backends whose records
/// these are.
fn assert_no_drop_errors(records: &[Arc<DropErrors>]) {
    for record in records {
        assert_eq!(record.count(), 0, "drop errors: {:?}", record.last());
    }
}

/// A device address as the pointer type a kernel parameter lowers to.
fn device<T>(addr: u64) -> *mut T {
    std::ptr::without_provenance_mut(addr as usize)
}

#[test]
fn hip_default_grid_fits_a_dispatch() {
    assert_eq!(
        gpu::grid_for_bytes(0, MAX_BLOCKS),
        Grid {
            blocks: 1,
            threads: 256
        }
    );
    assert_eq!(
        gpu::grid_for_bytes(4096, MAX_BLOCKS),
        Grid {
            blocks: 1,
            threads: 256
        }
    );
    assert_eq!(
        gpu::grid_for_bytes(4097, MAX_BLOCKS),
        Grid {
            blocks: 2,
            threads: 256
        }
    );
    let max = gpu::grid_for_bytes(u64::MAX, MAX_BLOCKS);
    assert!(u64::from(max.blocks) * u64::from(max.threads) <= u64::from(u32::MAX));
}

/// Two ranks in one process on device 0: heaps, exports/imports (aliases in one
/// process), a put through the peer-base table and a get back.
#[test]
fn hip_gpu_two_ranks_put_and_get() {
    let Some(r0) = device_or_skip() else { return };
    let r1 = Hip::new(0).unwrap();
    let k0 = r0
        .load_module(&crate::backend::code_objects::KERNELS)
        .unwrap();
    let k1 = r1
        .load_module(&crate::backend::code_objects::KERNELS)
        .unwrap();
    println!("{k0:?}");
    let g = r0.heap_granularity();
    let h0 = r0.create_heap(g).unwrap();
    let h1 = r1.create_heap(g).unwrap();
    let m01 = r0
        .import_heap(r1.export_heap(&h1).unwrap(), g, Sender::ThisProcess)
        .unwrap();
    let m10 = r1
        .import_heap(r0.export_heap(&h0).unwrap(), g, Sender::ThisProcess)
        .unwrap();
    assert!(m01.is_alias() && m10.is_alias());
    let bytes = 4096 + 13;
    let src: Vec<u8> = (0..bytes).map(|i| (i * 31 + 7) as u8).collect();
    let src_dev = r0.alloc_device(bytes).unwrap();
    let table: Vec<u8> = crate::table::DeviceTable::words(0, &[h0.base(), m01.base()])
        .iter()
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let bases = r0.alloc_device(table.len()).unwrap();
    // SAFETY: the allocations just made, of these lengths; rank 1's whole heap.
    unsafe {
        r0.upload(src_dev.base(), &src).unwrap();
        r0.upload(bases.base(), &table).unwrap();
        r1.memset(h1.base(), 0, g).unwrap();
    }
    r1.synchronize().unwrap();
    let entries = crate::table::DeviceTable::entries_at(bases.base());
    // SAFETY: the symmetric view lies in rank 0's heap with `bytes` to spare, and its
    // table (header and two entries) reaches rank 1's heap; `src` holds `bytes`.
    unsafe {
        launch_lowered(
            &r0,
            &k0,
            symmem_kernels::symmem_put,
            r0.grid_for_bytes(bytes),
            (
                (device(h0.base() + 64), bytes as u64, device(entries)),
                (device(src_dev.base()), bytes as u64),
                (1,),
            ),
        )
        .unwrap()
    };
    r0.synchronize().unwrap();
    let mut got = vec![0xffu8; bytes + 128];
    // SAFETY: rank 1's own heap, inside it.
    unsafe { r1.download(&mut got, h1.base()).unwrap() };
    assert!(got[..64].iter().all(|&b| b == 0));
    assert!(got[64..64 + bytes] == src[..], "put data differs");
    assert!(got[64 + bytes..].iter().all(|&b| b == 0));

    let table1: Vec<u8> = crate::table::DeviceTable::words(1, &[m10.base(), h1.base()])
        .iter()
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let bases1 = r1.alloc_device(table1.len()).unwrap();
    let entries1 = crate::table::DeviceTable::entries_at(bases1.base());
    // SAFETY: the table's allocation holds its bytes; rank 0's own heap.
    unsafe {
        r1.upload(bases1.base(), &table1).unwrap();
        r0.memset(h0.base(), 0x11, 64).unwrap();
    }
    r0.synchronize().unwrap();
    let dst1 = r1.alloc_device(64).unwrap();
    // SAFETY: `src` is rank 1's heap, which the table translates to rank 0's heap
    // mapped here; `dst` holds 64 bytes.
    unsafe {
        launch_lowered(
            &r1,
            &k1,
            symmem_kernels::symmem_get,
            r1.grid_for_bytes(64),
            (
                (device(dst1.base()), 64),
                (device(h1.base()), 64, device(entries1)),
                (0,),
            ),
        )
        .unwrap()
    };
    let mut back = vec![0u8; 64];
    // SAFETY: the 64 bytes of `dst1`.
    unsafe { r1.download(&mut back, dst1.base()).unwrap() };
    assert!(back.iter().all(|&b| b == 0x11), "get: {back:?}");
    let drop_errors = [r0.drop_errors(), r1.drop_errors()];
    drop((m01, m10, h0, h1, src_dev, bases, bases1, dst1));
    drop((k0, k1));
    drop((r0, r1));
    assert_no_drop_errors(&drop_errors);
}

/// A launch captured into a graph does not run until replayed; each replay runs it
/// again with the captured arguments, reading what its source holds by then.
#[test]
fn hip_gpu_capture_and_replay() {
    let Some(r0) = device_or_skip() else { return };
    let module = r0
        .load_module(&crate::backend::code_objects::KERNELS)
        .unwrap();
    let bytes = 4096 + 5;
    let src = r0.alloc_device(bytes).unwrap();
    let dst = r0.alloc_device(bytes).unwrap();
    // SAFETY: `dst`'s own bytes.
    unsafe { r0.memset(dst.base(), 0, bytes).unwrap() };
    r0.synchronize().unwrap();
    r0.begin_capture().unwrap();
    // SAFETY: `dst` and `src` hold `bytes` each and outlive every replay below.
    let launched = unsafe {
        launch_lowered(
            &r0,
            &module,
            symmem_kernels::symmem_copy,
            r0.grid_for_bytes(bytes),
            (
                (device(dst.base()), bytes as u64),
                (device::<u8>(src.base()).cast_const(), bytes as u64),
            ),
        )
    };
    let graph = r0.end_capture();
    launched.unwrap();
    let graph = graph.unwrap();
    let mut got = vec![0xffu8; bytes];
    // SAFETY: `dst`'s own bytes.
    unsafe { r0.download(&mut got, dst.base()).unwrap() };
    assert!(got.iter().all(|&b| b == 0), "the captured launch ran");
    for value in [0x5a, 0xc3] {
        // SAFETY: `src`'s own bytes, ordered before the replay on the stream; the
        // replayed launch's buffers are alive and hold `bytes` each.
        unsafe {
            r0.memset(src.base(), value, bytes).unwrap();
            r0.replay(&graph).unwrap();
            r0.download(&mut got, dst.base()).unwrap();
        }
        assert!(got.iter().all(|&b| b == value), "replay of {value:#x}");
    }
    // Another rank's backend refuses the graph before enqueuing anything.
    let other = Hip::new(0).unwrap();
    // SAFETY: refused before anything is enqueued.
    let refused = unsafe { other.replay(&graph) };
    assert!(matches!(refused, Err(Error::ForeignHandle)), "{refused:?}");
    let drop_errors = [r0.drop_errors(), other.drop_errors()];
    drop(graph);
    drop((src, dst, module, other, r0));
    assert_no_drop_errors(&drop_errors);
}
