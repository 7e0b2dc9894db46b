//! The CUDA backend's tests that need its internals (the public-API ones are in
//! `tests/tests/cuda_backend.rs`). CPU-side checks run everywhere; `cuda_gpu_*` tests
//! need a device and print `skipped: <reason>` (and pass) where [`Cuda::new`] finds no
//! device or driver ([`Error::is_device_missing`]); any other failure fails them.

use super::*;
use crate::backend::launch_lowered;
use crate::backend::{Backend, Grid};
use std::process::Command;

/// The env var that turns a `cuda_gpu_child_*` test into the child half of a
/// cross-process test (its value: the parent's export, hex-encoded).
const CHILD_ENV: &str = "SYMMEM_CUDA_CHILD";

fn device_or_skip() -> Option<Cuda> {
    match Cuda::new(0) {
        Ok(cuda) => {
            println!("device: {cuda:?}");
            Some(cuda)
        }
        // Only a missing device or driver skips: any other failure is a regression.
        Err(e) if e.is_device_missing() => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("the backend failed to initialise with a device present: {e:?}"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i >> 8) as u8)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Asserts that no driver call failed while dropping anything of the backends whose
/// records these are.
fn assert_no_drop_errors(records: &[Arc<DropErrors>]) {
    for record in records {
        assert_eq!(record.count(), 0, "drop errors: {:?}", record.last());
    }
}

/// A device address as the pointer type a kernel parameter lowers to.
fn device<T>(addr: u64) -> *mut T {
    std::ptr::without_provenance_mut(addr as usize)
}

/// Runs one test of this module in a child process of this test binary.
fn run_child(test: &str, env: &str) -> std::process::ExitStatus {
    let path = format!(
        "{}::{test}",
        module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, p)| p)
    );
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &path, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, env)
        .status()
        .unwrap()
}

#[test]
fn cuda_default_grid_is_one_vector_per_thread() {
    assert_eq!(
        gpu::grid_for_bytes(0, MAX_BLOCKS),
        Grid {
            blocks: 1,
            threads: 256
        }
    );
    assert_eq!(
        gpu::grid_for_bytes(1, MAX_BLOCKS),
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
    assert_eq!(
        gpu::grid_for_bytes(2 << 30, MAX_BLOCKS),
        Grid {
            blocks: 524_288,
            threads: 256
        }
    );
    assert_eq!(
        gpu::grid_for_bytes(u64::MAX, MAX_BLOCKS).blocks,
        i32::MAX as u32
    );
}

#[test]
fn cuda_code_object_pick_by_compute_capability() {
    let t = ["sm_80", "sm_90", "sm_90a", "gfx942"];
    assert_eq!(pick_target(t, 9, 0), Some("sm_90"));
    assert_eq!(pick_target(t, 10, 0), Some("sm_90"));
    assert_eq!(pick_target(t, 8, 6), Some("sm_80"));
    assert_eq!(pick_target(t, 7, 5), None);
    // symmem-build's default targets: the sm_80 PTX on every GPU from the A100 on.
    let t = ["gfx90a", "gfx942", "gfx950", "sm_80"];
    for (major, minor) in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)] {
        assert_eq!(
            pick_target(t, major, minor),
            Some("sm_80"),
            "{major}.{minor}"
        );
    }
    assert_eq!(pick_target(t, 7, 5), None);
    // A crate's objects: the pick and the error name the crate and the architecture.
    static OBJECTS: CodeObjects = CodeObjects::new(
        "some_kernels",
        &[
            ("gfx942", b"amd"),
            ("sm_80", b"ampere"),
            ("sm_90", b"hopper"),
        ],
    );
    assert_eq!(
        code_object_for(&OBJECTS, "H200", 9, 0).unwrap(),
        ("sm_90", &b"hopper"[..])
    );
    assert_eq!(
        code_object_for(&OBJECTS, "L40S", 8, 9).unwrap(),
        ("sm_80", &b"ampere"[..])
    );
    match code_object_for(&OBJECTS, "Tesla V100", 7, 0) {
        Err(e @ Error::NoCodeObject { .. }) => {
            let Error::NoCodeObject {
                module,
                device,
                arch,
                built,
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(
                (*module, device.as_str(), arch.as_str(), built.as_slice()),
                (
                    "some_kernels",
                    "Tesla V100",
                    "sm_70",
                    &["gfx942", "sm_80", "sm_90"][..]
                )
            );
            let message = e.to_string();
            assert!(message.contains("SYMMEM_GPU_TARGETS=sm_70"), "{message}");
        }
        other => panic!("expected NoCodeObject, got {other:?}"),
    }
    // A program built on a machine without a GPU has no code object at all: the error
    // says so, on the first load (World::new loads symmem's own kernels).
    static NONE: CodeObjects = CodeObjects::new("symmem_kernels", &[]);
    let e = code_object_for(&NONE, "NVIDIA H100 80GB HBM3", 9, 0).unwrap_err();
    assert!(
        e.to_string()
            .contains("no GPU target (built on a machine without a GPU)"),
        "{e}"
    );
    // symmem's own objects: the H200 (9.0) and an sm_89 GPU each get the newest PTX not
    // newer than the device (sm_80's, with the default targets), with every kernel.
    let kernels = &crate::backend::code_objects::KERNELS;
    assert_eq!(kernels.crate_name(), "symmem_kernels");
    let ptx_targets: Vec<&str> = kernels
        .objects()
        .iter()
        .map(|&(t, _)| t)
        .filter(|t| t.starts_with("sm_"))
        .collect();
    if ptx_targets.is_empty() {
        // host/build.rs builds the kernels for every target; only a stubbed build
        // script (a CPU-only checkout) or SYMMEM_GPU_TARGETS without an sm_ embeds none.
        println!("skipped: this build embeds no PTX of symmem_kernels");
        return;
    }
    for (major, minor) in [(9, 0), (8, 9)] {
        let newest = pick_target(ptx_targets.iter().copied(), major, minor);
        let Ok((target, ptx)) = code_object_for(kernels, "a GPU", major, minor) else {
            // Only where the build has no PTX that old (SYMMEM_GPU_TARGETS=sm_90).
            assert_eq!(newest, None, "{major}.{minor} of {ptx_targets:?}");
            continue;
        };
        assert_eq!(Some(target), newest, "{major}.{minor} of {ptx_targets:?}");
        let text = std::str::from_utf8(ptx).unwrap();
        for k in [
            symmem_kernels::symmem_put.name(),
            symmem_kernels::symmem_get.name(),
            symmem_kernels::symmem_copy.name(),
        ] {
            assert!(
                text.contains(&format!(".entry {k}(")),
                "{target}: {k} missing from the PTX"
            );
        }
    }
}

#[test]
fn cuda_heap_export_bytes_carry_the_size() {
    assert_eq!(
        decode_heap_size(&(2u64 << 20).to_le_bytes()).unwrap(),
        2 << 20
    );
    assert!(matches!(
        decode_heap_size(&[0; 4]),
        Err(Error::BadMessage { from: None, .. })
    ));
}

/// Two ranks in one process: each a heap, each imports the other's, rank 0 puts
/// into rank 1's heap through a peer-base table on the device; rank 1 (on its own
/// thread) reads its own mapping and checks every byte.
#[test]
fn cuda_gpu_two_ranks_put_through_imported_heap() {
    let Some(r0) = device_or_skip() else { return };
    put_through_imported_heap(r0, Cuda::new(0).unwrap());
}

/// The backends of ranks 0 and 1 on devices 0 and 1, or the reason there are none.
fn two_devices_or_skip() -> Option<(Cuda, Cuda)> {
    match Cuda::device_count() {
        Ok(n) if n >= 2 => Some((Cuda::new(0).unwrap(), Cuda::new(1).unwrap())),
        Ok(n) => {
            println!("skipped: {n} CUDA device(s), this test needs 2");
            None
        }
        Err(e) if e.is_device_missing() => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("the driver failed to initialise with a device present: {e:?}"),
    }
}

/// As above with the two ranks on two GPUs: each maps the other's heap over the
/// peer-to-peer path (or gets [`Error::PeerUnreachable`] where there is none).
#[test]
fn cuda_gpu_two_devices_put_through_imported_heap() {
    let Some((r0, r1)) = two_devices_or_skip() else {
        return;
    };
    let (d0, d1) = (
        driver::device_get(0).unwrap(),
        driver::device_get(1).unwrap(),
    );
    if !driver::device_can_access_peer(d0, d1).unwrap() {
        let h1 = r1.create_heap(r1.heap_granularity()).unwrap();
        let err = r0
            .import_heap(r1.export_heap(&h1).unwrap(), h1.len(), Sender::ThisProcess)
            .unwrap_err();
        assert!(matches!(
            err,
            Error::PeerUnreachable {
                device: 0,
                peer_device: 1
            }
        ));
        println!("skipped: devices 0 and 1 have no peer path ({err})");
        return;
    }
    put_through_imported_heap(r0, r1);
}

/// Rank 0 puts into rank 1's heap through its mapping of it and rank 1 gets from
/// rank 0's, each through a two-entry table; the allocation path never syncs.
fn put_through_imported_heap(r0: Cuda, r1: Cuda) {
    let g = r0.heap_granularity();
    let k0 = r0
        .load_module(&crate::backend::code_objects::KERNELS)
        .unwrap();
    let k1 = r1
        .load_module(&crate::backend::code_objects::KERNELS)
        .unwrap();
    println!(
        "granularity {g}, driver {}, code object {}",
        r0.driver_version(),
        k0.target()
    );
    assert!(g > 0 && g.is_power_of_two());
    let heap_bytes = 2 * g;
    let h0 = r0.create_heap(heap_bytes).unwrap();
    let h1 = std::thread::scope(|s| {
        s.spawn(|| r1.create_heap(heap_bytes).unwrap())
            .join()
            .unwrap()
    });
    assert_eq!(h0.len(), heap_bytes);
    let m01 = r0
        .import_heap(
            r1.export_heap(&h1).unwrap(),
            heap_bytes,
            Sender::ThisProcess,
        )
        .unwrap();
    let m10 = r1
        .import_heap(
            r0.export_heap(&h0).unwrap(),
            heap_bytes,
            Sender::ThisProcess,
        )
        .unwrap();
    println!(
        "rank0 heap {:#x}, rank1 heap {:#x}, rank1's heap in rank0 {:#x}, rank0's heap in rank1 {:#x}",
        h0.base(),
        h1.base(),
        m01.base(),
        m10.base()
    );
    assert_ne!(m01.base(), h1.base(), "an import must get its own address");
    assert_ne!(m10.base(), h0.base());

    // Rank 0: source buffer and the 2-entry peer-base table, in device memory, laid out
    // as symmem uploads one (its header, then the entries).
    let bytes = g + 4096 + 13; // crosses the vector/tail split
    let offset = 4096usize;
    let src = pattern(bytes, 0x5a);
    let src_dev = r0.alloc_device(bytes).unwrap();
    let table: Vec<u8> = crate::table::DeviceTable::words(0, &[h0.base(), m01.base()])
        .iter()
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let bases = r0.alloc_device(table.len()).unwrap();
    // SAFETY: both allocations were just made with these lengths.
    unsafe {
        r0.upload(src_dev.base(), &src).unwrap();
        r0.upload(bases.base(), &table).unwrap();
    }
    assert_eq!(
        r0.device_to_host_syncs(),
        0,
        "allocation/upload path must not sync"
    );

    // Rank 1 clears its heap and waits (one counted sync) before rank 0 writes.
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: rank 1's own heap, all of it, which nothing else uses yet.
            unsafe { r1.memset(h1.base(), 0, heap_bytes).unwrap() };
            r1.synchronize().unwrap();
        });
    });
    assert_eq!(r1.device_to_host_syncs(), 1);

    let grid = r0.grid_for_bytes(bytes);
    println!("put of {bytes} bytes with {grid:?}");
    let entries = crate::table::DeviceTable::entries_at(bases.base());
    // SAFETY: the symmetric view lies in rank 0's heap with `bytes` to spare, and its
    // table (header and two entries) reaches rank 1's heap mapped here; `src` holds
    // `bytes`.
    unsafe {
        launch_lowered(
            &r0,
            &k0,
            symmem_kernels::symmem_put,
            grid,
            (
                (
                    device(h0.base() + offset as u64),
                    bytes as u64,
                    device(entries),
                ),
                (device(src_dev.base()), bytes as u64),
                (1,),
            ),
        )
        .unwrap()
    };
    r0.synchronize().unwrap();
    assert_eq!(r0.device_to_host_syncs(), 1);

    let mut got = vec![0xffu8; heap_bytes];
    std::thread::scope(|s| {
        // SAFETY: rank 1's own heap, which rank 0's put (complete) wrote.
        s.spawn(|| unsafe { r1.download(&mut got, h1.base()).unwrap() });
    });
    assert_eq!(r1.device_to_host_syncs(), 2);
    assert!(
        got[..offset].iter().all(|&b| b == 0),
        "bytes before the put changed"
    );
    assert!(got[offset..offset + bytes] == src[..], "put data differs");
    assert!(
        got[offset + bytes..].iter().all(|&b| b == 0),
        "bytes after the put changed"
    );
    // Rank 0 sees rank 1's heap through its own mapping too, and its own heap is untouched.
    let mut via0 = vec![0u8; bytes];
    let mut own0 = vec![0xffu8; 64];
    // SAFETY: rank 1's heap as mapped here and rank 0's own heap, inside both.
    unsafe {
        r0.download(&mut via0, m01.base() + offset as u64).unwrap();
        r0.memset(h0.base(), 0x11, 64).unwrap();
        r0.download(&mut own0, h0.base()).unwrap();
    }
    assert!(via0 == src);
    assert!(own0.iter().all(|&b| b == 0x11));
    assert_eq!(r0.device_to_host_syncs(), 3);

    // Get back: rank 1 reads rank 0's heap through its own table.
    let table1: Vec<u8> = crate::table::DeviceTable::words(1, &[m10.base(), h1.base()])
        .iter()
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let bases1 = r1.alloc_device(table1.len()).unwrap();
    // SAFETY: the table's allocation holds its bytes.
    unsafe { r1.upload(bases1.base(), &table1).unwrap() };
    let entries1 = crate::table::DeviceTable::entries_at(bases1.base());
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
    assert!(
        back.iter().all(|&b| b == 0x11),
        "get through the imported heap: {back:?}"
    );

    let drop_errors = [r0.drop_errors(), r1.drop_errors()];
    drop((m01, m10, h0, h1, src_dev, bases, bases1, dst1));
    drop((k0, k1));
    drop((r0, r1));
    assert_no_drop_errors(&drop_errors);
}

/// What `cuda`'s copy kernel reads at `src` (`len` bytes), through a fresh buffer.
///
/// # Safety
/// `src..src + len` is device memory `cuda`'s kernels may read.
unsafe fn copy_kernel_read(cuda: &Cuda, src: u64, len: usize) -> Vec<u8> {
    let module = cuda
        .load_module(&crate::backend::code_objects::KERNELS)
        .unwrap();
    let dst = cuda.alloc_device(len).unwrap();
    let mut got = vec![0u8; len];
    // SAFETY: `dst` holds `len` bytes; `src` is the caller's.
    unsafe {
        launch_lowered(
            cuda,
            &module,
            symmem_kernels::symmem_copy,
            cuda.grid_for_bytes(len),
            ((device(dst.base()), len as u64), (device(src), len as u64)),
        )
        .unwrap();
        cuda.download(&mut got, dst.base()).unwrap();
    }
    got
}

/// In one process, rank 1 on device 1 imports rank 0's `cuMemAlloc` on device 0: an
/// alias with peer access enabled, which rank 1's copy kernel reads.
#[test]
fn cuda_gpu_two_devices_in_process_alias() {
    let Some((r0, r1)) = two_devices_or_skip() else {
        return;
    };
    let len = (1 << 20) + 5;
    let mem = r0.alloc_device(len).unwrap();
    let data = pattern(len, 9);
    // SAFETY: the allocation just made, `len` bytes.
    unsafe { r0.upload(mem.base(), &data).unwrap() };
    r0.synchronize().unwrap();
    let alias = match r1.import_device_memory(
        r0.export_device_memory(&mem).unwrap(),
        len,
        Sender::ThisProcess,
    ) {
        Ok(alias) => alias,
        Err(e @ Error::PeerUnreachable { .. }) => {
            println!("skipped: {e}");
            return;
        }
        Err(e) => panic!("cross-device alias: {e}"),
    };
    assert!(alias.is_alias());
    assert_eq!(alias.base(), mem.base());
    // SAFETY: the alias of `mem` (live), with peer access enabled for rank 1.
    let got = unsafe { copy_kernel_read(&r1, alias.base(), len) };
    assert!(got == data, "device 1 read device 0's memory wrong");
    drop((alias, mem));
    assert_no_drop_errors(&[r0.drop_errors(), r1.drop_errors()]);
}

/// `cuMemAlloc` + IPC in one process gives a non-owning alias; a copy kernel works on
/// it; and a child process opens the same handle with `cuIpcOpenMemHandle` for real.
#[test]
fn cuda_gpu_device_memory_ipc_alias_and_child_process() {
    let Some(r0) = device_or_skip() else { return };
    let r1 = Cuda::new(0).unwrap();
    let len = 1 << 20;
    let mem = r0.alloc_device(len).unwrap();
    let data = pattern(len, 3);
    // SAFETY: the allocation just made, `len` bytes.
    unsafe { r0.upload(mem.base(), &data).unwrap() };
    let shared = r0.export_device_memory(&mem).unwrap();
    let bytes = shared.bytes.clone();
    let alias = r1
        .import_device_memory(shared, len, Sender::ThisProcess)
        .unwrap();
    assert!(alias.is_alias());
    assert_eq!(alias.base(), mem.base());
    assert_eq!(r0.device_to_host_syncs() + r1.device_to_host_syncs(), 0);
    r0.synchronize().unwrap();
    // Rank 1 copies from the alias with the direct copy kernel.
    // SAFETY: the alias of `mem`, which lives.
    assert!(unsafe { copy_kernel_read(&r1, alias.base(), len) } == data);

    let status = run_child("cuda_gpu_child_ipc_open", &hex(&bytes));
    assert!(status.success(), "child failed: {status}");
    let mut after = vec![0u8; 4096];
    // SAFETY: the first 4 KiB of `mem`.
    unsafe { r0.download(&mut after, mem.base()).unwrap() };
    assert!(
        after.iter().all(|&b| b == 0xa5),
        "child's write not visible"
    );
    drop((alias, mem));
    assert_no_drop_errors(&[r0.drop_errors(), r1.drop_errors()]);
}

/// The kernel names a PTX declares, as the lookup before CUDA 12.4 reads them.
#[test]
fn cuda_ptx_entries_are_the_kernel_names() {
    let ptx = "//\n.version 7.0\n.target sm_80\n\n\t// .globl\tsymmem_copy\n\
               .visible .entry symmem_copy(\n\t.param .u64 a\n)\n{\n}\n\
               .entry helper_kernel (\n)\n.func not_a_kernel(\n)\n";
    let names: Vec<&str> = driver::ptx_entries(ptx).collect();
    assert_eq!(names, ["symmem_copy", "helper_kernel"]);
}

/// Looked up by name (the path of drivers before CUDA 12.4), a module's kernels are the
/// ones the driver enumerates.
#[test]
fn cuda_gpu_kernels_by_name_are_the_enumerated_ones() {
    let Some(r0) = device_or_skip() else { return };
    let (_, ptx) = code_object_for(
        &crate::backend::code_objects::KERNELS,
        "",
        r0.major,
        r0.minor,
    )
    .expect("symmem's own kernels have PTX for this device");
    let image = CString::new(ptx.strip_suffix(&[0]).unwrap_or(ptx)).unwrap();
    let loaded = r0
        .rank
        .load_module(|| driver::module_load_data(&image))
        .unwrap();
    let sorted = |mut v: Vec<(String, driver::Function)>| {
        let mut names: Vec<String> = v.drain(..).map(|(n, _)| n).collect();
        names.sort();
        names
    };
    let enumerated = sorted(driver::module_functions(loaded.module, &image).unwrap());
    let by_name = sorted(driver::module_functions_by_name(loaded.module, &image).unwrap());
    assert!(enumerated.len() > 10, "{enumerated:?}");
    assert_eq!(by_name, enumerated);
}

/// An export that names this process but not one of its allocations (a pointer inside
/// one, a pointer past it, another device's ordinal) is refused, never aliased.
#[test]
fn cuda_gpu_an_export_naming_this_process_aliases_only_its_own_allocations() {
    let Some(r0) = device_or_skip() else { return };
    let r1 = Cuda::new(0).unwrap();
    let len = 1 << 20;
    let mem = r0.alloc_device(len).unwrap();
    let genuine = r0.export_device_memory(&mem).unwrap();
    let export = IpcExport::decode(&genuine.bytes, "test").unwrap();
    for (what, forged) in [
        (
            "inside",
            IpcExport {
                ptr: export.ptr + 4096,
                len: export.len - 4096,
                ..export
            },
        ),
        (
            "far past it",
            IpcExport {
                ptr: export.ptr + (1 << 40),
                ..export
            },
        ),
        (
            "another device",
            IpcExport {
                ordinal: export.ordinal + 7,
                ..export
            },
        ),
    ] {
        let handle = Shareable {
            bytes: forged.encode(),
            fd: None,
        };
        let got = r1.import_device_memory(handle, 4096, Sender::ThisProcess);
        assert!(
            matches!(got, Err(Error::BadPeerMemory { .. })),
            "{what}: {got:?}"
        );
    }
    // The genuine export, from a rank not verified to be of this process: refused.
    let from_elsewhere = Shareable {
        bytes: genuine.bytes.clone(),
        fd: None,
    };
    let got = r1.import_device_memory(from_elsewhere, 4096, Sender::Elsewhere);
    assert!(matches!(got, Err(Error::BadPeerMemory { .. })), "{got:?}");
    let alias = r1
        .import_device_memory(genuine, len, Sender::ThisProcess)
        .unwrap();
    assert_eq!(alias.base(), mem.base());
    drop((alias, mem));
    assert_no_drop_errors(&[r0.drop_errors(), r1.drop_errors()]);
}

/// The child half of the test above: opens the parent's IPC handle, checks the
/// parent's data, writes 0xa5 over the first 4 KiB.
#[test]
fn cuda_gpu_child_ipc_open() {
    let Ok(env) = std::env::var(CHILD_ENV) else {
        println!(
            "skipped: runs only as the child of cuda_gpu_device_memory_ipc_alias_and_child_process"
        );
        return;
    };
    let cuda = Cuda::new(0).unwrap();
    let len = 1 << 20;
    // Forged by a member: the parent's genuine handle of a 1 MiB allocation, claimed to
    // be 1 GiB, or with an offset past its end: the driver's size of what the handle
    // opens refuses both, whatever the export says.
    let genuine = IpcExport::decode(&unhex(&env), "test").unwrap();
    for (what, forged, bytes) in [
        (
            "1 GiB claimed",
            IpcExport {
                len: 1 << 30,
                ..genuine
            },
            1 << 30,
        ),
        (
            "offset past the end",
            IpcExport {
                offset: 2 << 20,
                len: 4 << 20,
                ..genuine
            },
            4096,
        ),
    ] {
        let handle = Shareable {
            bytes: forged.encode(),
            fd: None,
        };
        let got = cuda.import_device_memory(handle, bytes, Sender::Elsewhere);
        assert!(
            matches!(got, Err(Error::BadPeerMemory { .. })),
            "{what}: {got:?}"
        );
        println!(
            "child: a forged export ({what}) is refused: {}",
            got.unwrap_err()
        );
    }
    let m = cuda
        .import_device_memory(
            Shareable {
                bytes: unhex(&env),
                fd: None,
            },
            len,
            Sender::Elsewhere,
        )
        .unwrap();
    assert!(m.is_ipc());
    println!(
        "child {}: opened the parent's allocation at {:#x}",
        std::process::id(),
        m.base()
    );
    let mut got = vec![0u8; len];
    // SAFETY: the parent's allocation as opened here, `len` bytes.
    unsafe { cuda.download(&mut got, m.base()).unwrap() };
    assert!(got == pattern(len, 3), "child read wrong data");
    // SAFETY: as above, its first 4 KiB.
    unsafe { cuda.memset(m.base(), 0xa5, 4096).unwrap() };
    cuda.synchronize().unwrap();
}

/// A heap exported as a POSIX fd, taken by a child process (pidfd_getfd), imported,
/// mapped and written there.
#[test]
fn cuda_gpu_heap_fd_into_child_process() {
    let Some(r0) = device_or_skip() else { return };
    let g = r0.heap_granularity();
    let heap = r0.create_heap(g).unwrap();
    // SAFETY: the heap just made, `g` bytes.
    unsafe { r0.upload(heap.base(), &pattern(g, 9)).unwrap() };
    r0.synchronize().unwrap();
    let shared = r0.export_heap(&heap).unwrap();
    let fd = shared.fd.as_ref().unwrap();
    use std::os::fd::AsRawFd;
    let env = format!(
        "{}:{}:{}",
        std::process::id(),
        fd.as_raw_fd(),
        hex(&shared.bytes)
    );
    let status = run_child("cuda_gpu_child_heap_import", &env);
    assert!(status.success(), "child failed: {status}");
    let mut after = vec![0u8; g];
    // SAFETY: the heap, `g` bytes.
    unsafe { r0.download(&mut after, heap.base()).unwrap() };
    let mut want = pattern(g, 9);
    want[..8192].fill(0x3c);
    assert!(
        after == want,
        "child's write through its own mapping not visible"
    );
}

/// The child half of the test above.
#[test]
fn cuda_gpu_child_heap_import() {
    let Ok(env) = std::env::var(CHILD_ENV) else {
        println!("skipped: runs only as the child of cuda_gpu_heap_fd_into_child_process");
        return;
    };
    let mut parts = env.split(':');
    let pid: i32 = parts.next().unwrap().parse().unwrap();
    let remote_fd: i32 = parts.next().unwrap().parse().unwrap();
    let bytes = unhex(parts.next().unwrap());
    let pid = rustix::process::Pid::from_raw(pid).expect("a parent pid");
    let pidfd =
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).expect("pidfd_open");
    let fd =
        rustix::process::pidfd_getfd(&pidfd, remote_fd, rustix::process::PidfdGetfdFlags::empty())
            .expect("pidfd_getfd");
    let cuda = Cuda::new(0).unwrap();
    let g = cuda.heap_granularity();
    let m = cuda
        .import_heap(
            Shareable {
                bytes,
                fd: Some(fd),
            },
            g,
            Sender::Elsewhere,
        )
        .unwrap();
    println!(
        "child {}: mapped the parent's heap at {:#x}",
        std::process::id(),
        m.base()
    );
    let mut got = vec![0u8; g];
    // SAFETY: the parent's heap as mapped here, `g` bytes.
    unsafe { cuda.download(&mut got, m.base()).unwrap() };
    assert!(got == pattern(g, 9), "child read wrong heap data");
    // SAFETY: as above, its first 8 KiB.
    unsafe { cuda.memset(m.base(), 0x3c, 8192).unwrap() };
    cuda.synchronize().unwrap();
}

#[test]
fn cuda_cudarc_errors_are_driver_errors() {
    use cudarc::driver::{DriverError, sys::CUresult};
    match Error::from(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)) {
        Error::Driver { call, code, .. } => {
            assert_eq!(call, "a cudarc call");
            assert_eq!(code, CUresult::CUDA_ERROR_INVALID_VALUE as i64);
        }
        e => panic!("expected Error::Driver, got {e:?}"),
    }
    assert!(matches!(
        Error::from(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)),
        Error::NoDevice { backend: "cuda" }
    ));
}

#[test]
fn cuda_default_stream_handles_are_refused() {
    for raw in [0usize, 1, 2] {
        let stream: cudarc::driver::sys::CUstream = std::ptr::without_provenance_mut(raw);
        assert!(driver::Stream::from_raw(stream).is_default(), "{raw:#x}");
    }
    let own: cudarc::driver::sys::CUstream = std::ptr::without_provenance_mut(0x5555_0000);
    assert!(!driver::Stream::from_raw(own).is_default());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any bytes a peer sends as a heap's size decode or are a typed error.
    #[test]
    fn any_heap_size_bytes_decode_or_are_a_typed_error(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
    ) {
        check_heap_size_bytes(&bytes);
    }
}
