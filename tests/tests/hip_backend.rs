//! The HIP backend through the public API (`--features hip`): typed errors where there
//! is no device, picking and reading code objects, the kernarg layout, and (on a GPU)
//! the refusals every backend makes. The tests that need the backend's internals (its
//! kernels launched by hand) are in `host/src/backend/hip/tests.rs`. GPU tests print
//! `skipped: <reason>` (and pass) where [`Hip::new`] finds no device or driver; any other
//! failure fails them ([`symmem_tests::unavailable`]).
#![cfg(feature = "hip")]

use std::sync::Arc;
use symmem::backend::hip::{
    Hip, base_arch, code_object_for, code_object_kernels, kernarg_layout, pack_kernargs,
};
use symmem::backend::{Backend, BackendKind, DeviceRegion, HostKernel, KernelLaunch};
use symmem::{CodeObjects, Error, Grid};
use symmem_arch::host::HostThread;
use symmem_device::{Kernel, Params, Slot};

/// The slots of `kernel`'s parameters' primitives, in order.
fn slots_of<P: Params>(_: Kernel<P>) -> Vec<Slot> {
    symmem_device::slots::<P>().collect()
}

#[test]
fn hip_new_is_typed_error_without_device() {
    match Hip::new(0) {
        Err(e @ (Error::LibraryMissing { .. } | Error::NoDevice { backend: "hip" })) => {
            println!("no HIP device here, as expected: {e:?}");
        }
        Ok(hip) => println!("a HIP device is present: {hip:?}"),
        Err(e) => panic!("expected LibraryMissing or NoDevice, got {e:?}"),
    }
    // The loader state is process-wide: a second call answers the same way.
    let a = Hip::new(0).map(|_| ()).map_err(|e| e.to_string());
    let b = Hip::new(0).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(a, b);
}

#[test]
fn hip_arch_name_picks_code_object() {
    assert_eq!(base_arch("gfx942:sramecc+:xnack-"), "gfx942");
    assert_eq!(base_arch("gfx950"), "gfx950");
    static OBJECTS: CodeObjects = CodeObjects::new(
        "some_kernels",
        &[
            ("sm_90", b"ptx"),
            ("gfx942", b"mi300"),
            ("gfx950", b"mi350"),
        ],
    );
    assert_eq!(
        code_object_for(&OBJECTS, "MI300X", "gfx942:sramecc+:xnack-").unwrap(),
        ("gfx942", &b"mi300"[..])
    );
    assert_eq!(
        code_object_for(&OBJECTS, "MI355X", "gfx950").unwrap(),
        ("gfx950", &b"mi350"[..])
    );
    // Exactly the device's processor: no older or newer one stands in.
    for arch in ["gfx90a:sramecc+:xnack-", "gfx941", "gfx1100", "sm_90", ""] {
        match code_object_for(&OBJECTS, "a GPU", arch) {
            Err(Error::NoCodeObject {
                module,
                arch: a,
                built,
                ..
            }) => {
                assert_eq!((module, a.as_str()), ("some_kernels", base_arch(arch)));
                assert_eq!(built, ["sm_90", "gfx942", "gfx950"]);
            }
            other => panic!("{arch}: expected NoCodeObject, got {other:?}"),
        }
    }
    // symmem's own objects: an ELF image for every AMD target of the build.
    let kernels = &symmem::backend::code_objects::KERNELS;
    if kernels.objects().is_empty() {
        println!("skipped: this build embeds no code objects of symmem_kernels");
        return;
    }
    for target in symmem_tests::objects::amd_targets() {
        let (found, image) =
            code_object_for(kernels, "a GPU", &format!("{target}:sramecc+:xnack-")).unwrap();
        assert_eq!(found, target);
        assert_eq!(&image[..4], b"\x7fELF", "{target}");
    }
}

#[test]
fn hip_pack_kernargs_natural_alignment() {
    // symmem_put(dst: SymViewMut<u8> (address, length, table), src: View<u8> (address,
    // length), to: u32).
    let slots = slots_of(symmem_kernels::symmem_put);
    let (fields, size) = kernarg_layout(&slots);
    assert_eq!(
        fields,
        vec![(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)]
    );
    assert_eq!(size, 44);
    // Each value at its offset, whatever its type; padding before an 8-aligned
    // value after a 4-byte one is zero.
    type P = (u32, u64, f32, f64, i32, *const u8);
    let abi: <P as Params>::Abi = (
        (0x0101_0101,),
        (0x0202_0202_0202_0202,),
        (1.5,),
        (-2.25,),
        (-5,),
        (std::ptr::without_provenance(0x0606_0606_0606_0606),),
    );
    let mut args = Vec::new();
    P::visit(&abi, &mut |p| args.push(p));
    let slots: Vec<Slot> = symmem_device::slots::<P>().collect();
    // SAFETY: `args` points into `abi`, one pointer per slot of `P`.
    let bytes = unsafe { pack_kernargs(&slots, &args) };
    let (fields, size) = kernarg_layout(&slots);
    assert_eq!(
        fields,
        vec![(0, 4), (8, 8), (16, 4), (24, 8), (32, 4), (40, 8)]
    );
    assert_eq!(bytes.len(), size);
    assert_eq!(size, 48);
    assert_eq!(&bytes[0..4], &0x0101_0101u32.to_le_bytes());
    assert_eq!(&bytes[4..8], &[0; 4]);
    assert_eq!(&bytes[8..16], &0x0202_0202_0202_0202u64.to_le_bytes());
    assert_eq!(&bytes[16..20], &1.5f32.to_le_bytes());
    assert_eq!(&bytes[20..24], &[0; 4]);
    assert_eq!(&bytes[24..32], &(-2.25f64).to_le_bytes());
    assert_eq!(&bytes[32..36], &(-5i32).to_le_bytes());
    assert_eq!(&bytes[40..48], &0x0606_0606_0606_0606u64.to_le_bytes());
    // No parameters, no segment.
    // SAFETY: no arguments to read.
    assert!(unsafe { pack_kernargs(&[], &[]) }.is_empty());
}

/// `info` of a symbol: binding and type.
const GLOBAL_OBJECT: u8 = 0x11;
const WEAK_OBJECT: u8 = 0x21;
const LOCAL_OBJECT: u8 = 0x01;
const GLOBAL_FUNC: u8 = 0x12;

/// A minimal 64-bit AMDGPU ELF: section 1 a string table, section 2 a symbol table
/// of type `kind` (`SHT_DYNSYM` 11 or `SHT_SYMTAB` 2) holding `symbols`
/// (`name, info, other, shndx`) after the null symbol.
fn tiny_elf(kind: u32, symbols: &[(&str, u8, u8, u16)]) -> Vec<u8> {
    let mut strings = vec![0u8];
    let mut table = vec![0u8; 24];
    for &(name, info, other, shndx) in symbols {
        let mut sym = [0u8; 24];
        sym[..4].copy_from_slice(&(strings.len() as u32).to_le_bytes());
        sym[4] = info;
        sym[5] = other;
        sym[6..8].copy_from_slice(&shndx.to_le_bytes());
        table.extend_from_slice(&sym);
        strings.extend_from_slice(name.as_bytes());
        strings.push(0);
    }
    let strings_at = 64;
    let table_at = (strings_at + strings.len()).next_multiple_of(8);
    let headers_at = (table_at + table.len()).next_multiple_of(8);
    let mut image = vec![0u8; headers_at + 3 * 64];
    image[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    image[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    image[18..20].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
    image[40..48].copy_from_slice(&(headers_at as u64).to_le_bytes());
    image[58..60].copy_from_slice(&64u16.to_le_bytes());
    image[60..62].copy_from_slice(&3u16.to_le_bytes());
    image[strings_at..strings_at + strings.len()].copy_from_slice(&strings);
    image[table_at..table_at + table.len()].copy_from_slice(&table);
    let mut header = |index: usize, kind: u32, at: usize, len: usize, link: u32, entry: u64| {
        let h = &mut image[headers_at + 64 * index..][..64];
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[24..32].copy_from_slice(&(at as u64).to_le_bytes());
        h[32..40].copy_from_slice(&(len as u64).to_le_bytes());
        h[40..44].copy_from_slice(&link.to_le_bytes());
        h[56..64].copy_from_slice(&entry.to_le_bytes());
    };
    header(1, 3, strings_at, strings.len(), 0, 0);
    header(2, kind, table_at, table.len(), 1, 24);
    image
}

#[test]
fn hip_kernel_names_are_the_exported_kernel_descriptors() {
    let symbols = [
        ("ring_step.kd", GLOBAL_OBJECT, 3, 1), // protected, as the AMDGPU backend emits
        ("ring_step", GLOBAL_FUNC, 3, 1),
        ("all_reduce.kd", WEAK_OBJECT, 0, 1),
        ("local.kd", LOCAL_OBJECT, 0, 1),
        ("hidden.kd", GLOBAL_OBJECT, 2, 1),
        ("undefined.kd", GLOBAL_OBJECT, 0, 0),
        ("table", GLOBAL_OBJECT, 0, 1),
        ("ring_step.kd", GLOBAL_OBJECT, 3, 1),
    ];
    for kind in [11, 2] {
        assert_eq!(
            code_object_kernels(&tiny_elf(kind, &symbols)).unwrap(),
            ["all_reduce", "ring_step"],
            "symbol table of type {kind}"
        );
    }
    assert_eq!(
        code_object_kernels(&tiny_elf(11, &[])).unwrap(),
        Vec::<String>::new()
    );
    // Not AMDGPU ELF, or cut anywhere: an error, never a panic or a read past the end.
    let image = tiny_elf(11, &symbols);
    assert!(code_object_kernels(b"// PTX .version 8.0").is_err());
    let mut x86 = image.clone();
    x86[18] = 62;
    assert_eq!(code_object_kernels(&x86), Err("not an AMDGPU ELF"));
    for len in 0..image.len() {
        assert!(code_object_kernels(&image[..len]).is_err(), "cut at {len}");
    }
    // Corrupt offsets and counts anywhere in the headers: still no panic.
    for at in (16..64).chain(image.len() - 192..image.len()) {
        let mut bad = image.clone();
        bad[at] ^= 0xff;
        let _ = code_object_kernels(&bad);
    }
}

/// symmem's own AMD objects (every AMD target of the build): the kernel names `load_module` reads are
/// the kernels of `symmem-kernels` (that every declared kernel is there, with its
/// ABI, is `tests/tests/hip_abi.rs`'s check).
#[test]
fn hip_code_objects_name_their_kernels() {
    let kernels = &symmem::backend::code_objects::KERNELS;
    if kernels.objects().is_empty() {
        println!("skipped: this build embeds no code objects of symmem_kernels");
        return;
    }
    let declared: Vec<&str> = symmem_device::declarations()
        .filter(|d| d.crate_name == kernels.crate_name())
        .map(|d| d.name)
        .collect();
    for target in symmem_tests::objects::amd_targets() {
        let image = kernels.find(target).expect(target);
        let names = code_object_kernels(image).unwrap();
        println!("{target}: {} kernels", names.len());
        for kernel in [
            symmem_kernels::symmem_put.name(),
            symmem_kernels::symmem_get.name(),
            symmem_kernels::symmem_copy.name(),
        ] {
            assert!(names.iter().any(|n| n == kernel), "{target}: no {kernel}");
        }
        for name in &names {
            assert!(
                declared.contains(&name.as_str()),
                "{target}: {name} is not declared"
            );
        }
    }
}

#[test]
fn hip_gpu_bad_ordinal_and_zero_sizes() {
    let r0 = match Hip::new(0) {
        Ok(r0) => r0,
        init => {
            return println!(
                "skipped: {}",
                symmem_tests::unavailable(init).unwrap_or_default()
            );
        }
    };
    assert!(matches!(
        Hip::new(4096),
        Err(Error::NoDevice { backend: "hip" })
    ));
    assert!(matches!(r0.create_heap(0), Err(Error::ZeroSize)));
    assert!(matches!(r0.alloc_device(0), Err(Error::ZeroSize)));
    assert_eq!(r0.kind(), BackendKind::Hip);
    assert_eq!(r0.create_heap(1).unwrap().len(), r0.heap_granularity());
    assert_eq!(r0.device_to_host_syncs(), 0);
    // A crate without an object for this processor, and a kernel the module lacks.
    static NONE: CodeObjects = CodeObjects::new("no_kernels", &[]);
    assert!(matches!(
        r0.load_module(&NONE),
        Err(Error::NoCodeObject {
            module: "no_kernels",
            ..
        })
    ));
    let module = r0
        .load_module(&symmem::backend::code_objects::KERNELS)
        .unwrap();
    assert!(module.kernel_count() > 0);
    struct Nothing;
    impl HostKernel for Nothing {
        fn run(&self, _: &HostThread<'_>) {}
        fn to_owned(&self) -> Arc<dyn HostKernel> {
            Arc::new(Nothing)
        }
    }
    let launch = KernelLaunch {
        name: "no_such_kernel",
        args: &[],
        slots: &[],
        host: &Nothing,
    };
    // SAFETY: no arguments; the launch is refused before anything is enqueued.
    let refused = unsafe { r0.launch(&module, &launch, Grid::new(1, 1)) };
    assert!(matches!(
        refused,
        Err(Error::KernelNotFound {
            module: "symmem_kernels",
            kernel: "no_such_kernel"
        })
    ));
}
