//! Builds a scratch kernel crate (a plain `no_std` lib with a path dependency) for one
//! AMD and one NVIDIA target, as an application's build script would, and checks the
//! code objects, the table, the exported entry points and the reported sources; then a
//! kernel crate that does not compile.
//!
//! The nested builds go to this workspace's `<target>/symmem-device`, the area the
//! workspace's own build scripts use, so `core` is built there once for all of them; the
//! targets are ones the workspace builds by default (sm_80, gfx942), so CI builds no
//! `core` for these tests alone.

use std::path::{Path, PathBuf};

use symmem_build::{BuildError, Family, KernelCrate};

/// `<target>/tmp/symmem-build-test/<name>`, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("symmem-build-test")
        .join(name);
    let _ = std::fs::remove_dir_all(dir.join("out"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The workspace's nested area: `<target>/symmem-device`.
fn nested_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .join("symmem-device")
}

/// Writes `text` to `path` unless it already holds it (an unchanged file keeps its
/// mtime, so a rerun of the test finds the nested build fresh).
fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// A kernel crate `name` at `<dir>/kernels` with `body` as the kernel's statements,
/// depending on `<dir>/helper`.
fn kernel_crate(dir: &Path, name: &str, body: &str) -> PathBuf {
    put(
        &dir.join("helper/Cargo.toml"),
        "[package]\nname = \"helper\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    );
    put(
        &dir.join("helper/src/lib.rs"),
        "#![no_std]\n#[inline]\npub fn twice(v: f32) -> f32 {\n    v * 2.0\n}\n",
    );
    put(
        &dir.join("kernels/Cargo.toml"),
        &format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [dependencies]\nhelper = {{ path = \"../helper\" }}\n"
        ),
    );
    put(
        &dir.join("kernels/src/lib.rs"),
        &format!(
            "#![no_std]\n\
             #![cfg_attr(any(target_arch = \"amdgpu\", target_arch = \"nvptx64\"), feature(abi_gpu_kernel))]\n\
             \n\
             /// Doubles `x[0..n]`.\n\
             #[cfg(any(target_arch = \"amdgpu\", target_arch = \"nvptx64\"))]\n\
             #[unsafe(no_mangle)]\n\
             pub unsafe extern \"gpu-kernel\" fn scale(x: *mut f32, n: u32) {{\n\
             {body}\n\
             }}\n"
        ),
    );
    dir.join("kernels")
}

/// The standard output of llvm-tools' `tool args file`.
fn llvm(tool: &str, args: &[&str], file: &Path) -> String {
    let bin = symmem_build::llvm_tools_bin().unwrap();
    let out = std::process::Command::new(bin.join(tool))
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{tool}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn builds_a_kernel_crate_and_reports_its_errors() {
    if std::env::var_os(symmem_build::TARGETS_ENV).is_some() {
        println!("skipped: {} is set", symmem_build::TARGETS_ENV);
        return;
    }
    let dir = scratch("ok");
    let kernels = kernel_crate(
        &dir,
        "scratch-kernels",
        "    for i in 0..n as usize {\n        unsafe { *x.add(i) = helper::twice(*x.add(i)) }\n    }",
    );
    let built = KernelCrate::new(&kernels)
        .targets(["gfx942", "sm_80"])
        .nested_dir(nested_dir())
        .build_in(dir.join("out"))
        .unwrap();
    assert_eq!(built.crate_name, "scratch_kernels");
    let out = dir.join("out/symmem-kernels");
    assert_eq!(built.table, out.join("scratch_kernels.rs"));
    let names: Vec<_> = built.objects.iter().map(|o| o.path.clone()).collect();
    assert_eq!(
        names,
        [
            out.join("scratch_kernels-gfx942.hsaco"),
            out.join("scratch_kernels-sm_80.ptx")
        ]
    );

    // The lib's `#[no_mangle]` kernel is an entry point of each code object.
    for object in &built.objects {
        match object.target.family {
            Family::Amdgpu => {
                let symbols = llvm("llvm-readobj", &["--dyn-symbols"], &object.path);
                assert!(symbols.contains("Name: scale.kd ("), "{symbols}");
                let notes = llvm("llvm-readobj", &["--notes"], &object.path);
                assert!(notes.contains("amdhsa.kernels"), "{notes}");
                assert!(notes.contains(".symbol:         scale.kd"), "{notes}");
                assert!(
                    notes
                        .lines()
                        .any(|l| l.starts_with("amdhsa.target:") && l.ends_with("gfx942")),
                    "{notes}"
                );
            }
            Family::Nvptx => {
                let ptx = std::fs::read_to_string(&object.path).unwrap();
                assert!(ptx.contains(".visible .entry scale("), "{ptx}");
                assert!(ptx.contains("\n.target sm_80\n"), "{ptx}");
                // The oldest PTX ISA llc accepts for sm_80 (see `DEFAULT_TARGETS`).
                assert!(ptx.contains("\n.version 7.0\n"), "{ptx}");
            }
        }
    }

    let table = std::fs::read_to_string(&built.table).unwrap();
    for object in &built.objects {
        let entry = format!(
            "({:?}, include_bytes!({:?}))",
            object.target.cpu,
            object.path.to_str().unwrap()
        );
        assert!(table.contains(&entry), "{table}");
    }

    // The kernel crate's and its path dependency's sources; nothing of core's.
    let canonical = dir.canonicalize().unwrap();
    for expected in [
        "kernels/Cargo.toml",
        "kernels/src",
        "kernels/src/lib.rs",
        "helper/src/lib.rs",
        "helper/Cargo.toml",
    ] {
        assert!(
            built.sources.contains(&canonical.join(expected)),
            "{expected} not in {:?}",
            built.sources
        );
    }
    assert!(
        built
            .sources
            .iter()
            .all(|s| s.starts_with(&canonical) && !s.to_string_lossy().contains("wrappers")),
        "{:?}",
        built.sources
    );

    // A type error the host build never sees (the kernel is GPU-only) comes back with
    // rustc's own message.
    let dir = scratch("broken");
    let kernels = kernel_crate(&dir, "broken-kernels", "    let _x: u32 = 1.0;");
    let e = KernelCrate::new(&kernels)
        .targets(["sm_80"])
        .nested_dir(nested_dir())
        .build_in(dir.join("out"))
        .unwrap_err();
    assert!(matches!(e, BuildError::Failed { .. }), "{e}");
    let text = format!("{e:?}");
    assert_eq!(text, e.to_string());
    assert!(text.contains("error[E0308]: mismatched types"), "{text}");
    assert!(text.contains("kernels/src/lib.rs:8:"), "{text}");
}

#[test]
fn a_variant_enables_a_feature_and_shares_core() {
    if std::env::var_os(symmem_build::TARGETS_ENV).is_some() {
        println!("skipped: {} is set", symmem_build::TARGETS_ENV);
        return;
    }
    let dir = scratch("variant");
    let kernels = kernel_crate(&dir, "variant-kernels", "    let _ = (x, n);");
    // The feature adds a second entry point.
    put(
        &kernels.join("Cargo.toml"),
        "[package]\nname = \"variant-kernels\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [features]\nextra = []\n\n[dependencies]\nhelper = { path = \"../helper\" }\n",
    );
    let source = std::fs::read_to_string(kernels.join("src/lib.rs")).unwrap();
    let extra = "\n#[cfg(all(feature = \"extra\", any(target_arch = \"amdgpu\", target_arch = \"nvptx64\")))]\n\
                 #[unsafe(no_mangle)]\n\
                 pub unsafe extern \"gpu-kernel\" fn only_in_the_variant() {}\n";
    if !source.contains("only_in_the_variant") {
        put(&kernels.join("src/lib.rs"), &format!("{source}{extra}"));
    }
    let build = |k: KernelCrate| {
        k.targets(["sm_80"])
            .nested_dir(nested_dir())
            .build_in(dir.join("out"))
            .unwrap()
    };
    let plain = build(KernelCrate::new(&kernels));
    let variant = build(KernelCrate::new(&kernels).variant("variant_kernels_extra", "extra"));
    let ptx = |b: &symmem_build::Built| std::fs::read_to_string(&b.objects[0].path).unwrap();
    assert!(plain.objects[0].path.ends_with("variant_kernels-sm_80.ptx"));
    assert!(
        variant.objects[0]
            .path
            .ends_with("variant_kernels_extra-sm_80.ptx")
    );
    assert!(variant.table.ends_with("variant_kernels_extra.rs"));
    assert!(!ptx(&plain).contains(".entry only_in_the_variant("));
    assert!(ptx(&variant).contains(".entry only_in_the_variant("));
    assert!(ptx(&variant).contains(".entry scale("));

    // Every build of this target, variants included (symmem's own `on-node` build
    // too, when the workspace built it here), used the one `core` of the target's one
    // nested target directory.
    fn cores(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                cores(&path, found);
            } else if name.starts_with("libcore-") && name.ends_with(".rlib") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    cores(&nested_dir().join("sm_80"), &mut found);
    let cores = found;
    assert_eq!(cores.len(), 1, "{cores:?}");
    let others: Vec<_> = std::fs::read_dir(nested_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sm_80") && n != "sm_80")
        .collect();
    assert!(
        others.is_empty(),
        "target directories of their own: {others:?}"
    );
}

/// Writes `ll` as `<home>/lib/libnvshmem_device.ll` and assembles it into the
/// `libnvshmem_device.bc` beside it (llvm-tools' `llvm-as`).
fn assemble_device_library(home: &Path, ll: &str) {
    let lib = home.join("lib");
    put(&lib.join("libnvshmem_device.ll"), ll);
    let bin = symmem_build::llvm_tools_bin().unwrap();
    let out = std::process::Command::new(bin.join("llvm-as"))
        .arg(lib.join("libnvshmem_device.ll"))
        .arg("-o")
        .arg(lib.join("libnvshmem_device.bc"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stand-in for NVSHMEM's install at `<dir>/nvshmem`: `lib/libnvshmem_device.bc`
/// assembled from IR with the shapes of the real library's symbols (its three
/// `__constant__` state globals, version `version`, and `nvshmem_quiet` and
/// `nvshmem_putmem_nbi`, which use the state, plus `unused`, which nothing calls), and
/// `include/non_abi/nvshmem_version.h` saying `host`.
fn stand_in_nvshmem(dir: &Path, version: (u32, u32, u32), host: (u32, u32, u32)) -> PathBuf {
    let functions = "define void @nvshmem_quiet() {\n\
           %s = load volatile i8, ptr addrspace(4) @nvshmemi_device_state_d\n\
           fence seq_cst\n\
           ret void\n\
         }\n\
         define void @nvshmem_putmem_nbi(ptr %dest, ptr %src, i64 %n, i32 %pe) {\n\
           %s = load volatile i8, ptr addrspace(4) @nvshmemi_device_state_d\n\
           call void @llvm.memcpy.p0.p0.i64(ptr %dest, ptr %src, i64 %n, i1 false)\n\
           ret void\n\
         }\n\
         define void @nvshmem_unused_by_the_kernels() {\n\
           ret void\n\
         }\n\
         declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n";
    stand_in_with(dir, version, host, functions)
}

/// [`stand_in_nvshmem`] whose device library defines `functions` (LLVM IR) beside the
/// state globals.
fn stand_in_with(
    dir: &Path,
    version: (u32, u32, u32),
    host: (u32, u32, u32),
    functions: &str,
) -> PathBuf {
    let home = dir.join("nvshmem");
    let (major, minor, patch) = version;
    let ll = format!(
        "target triple = \"nvptx64-nvidia-cuda\"\n\
         %struct.nvshmemi_version_t = type {{ i32, i32, i32 }}\n\
         @nvshmemi_device_lib_version_d = addrspace(4) externally_initialized global \
         %struct.nvshmemi_version_t {{ i32 {major}, i32 {minor}, i32 {patch} }}, align 4\n\
         @nvshmemi_device_state_d = addrspace(4) externally_initialized global [64 x i8] \
         zeroinitializer, align 8\n\
         @nvshmemi_ibgda_device_state_d = addrspace(4) externally_initialized global \
         [64 x i8] zeroinitializer, align 8\n\
         {functions}"
    );
    assemble_device_library(&home, &ll);
    let (major, minor, patch) = host;
    put(
        &home.join("include/non_abi/nvshmem_version.h"),
        &format!(
            "#ifndef NVSHMEM_VERSION_H\n#define NVSHMEM_VERSION_H\n\
             #define NVSHMEM_VENDOR_MAJOR_VERSION {major}\n\
             #define NVSHMEM_VENDOR_MINOR_VERSION {minor}\n\
             #define NVSHMEM_VENDOR_PATCH_VERSION {patch}\n#endif\n"
        ),
    );
    home
}

/// Built with NVSHMEM (a stand-in for its device library: CI has none): the library's
/// functions the kernel calls are linked in, its state globals are kept visible (what
/// `nvshmemx_cumodule_init` looks up), nothing else of it comes along, and no `.extern`
/// is left; a call the library does not define fails the build naming it, and so does a
/// bitcode of another version than its host library. Built without it, the same crate's
/// object is byte for byte what it was before this feature.
#[test]
fn nvshmem_device_library_is_linked_in_and_checked() {
    if std::env::var_os(symmem_build::TARGETS_ENV).is_some() {
        println!("skipped: {} is set", symmem_build::TARGETS_ENV);
        return;
    }
    let body = |calls: &str| {
        format!(
            "    unsafe extern \"C\" {{\n\
                     fn nvshmem_putmem_nbi(dest: *mut f32, src: *const f32, bytes: usize, pe: i32);\n\
                     fn {calls}();\n\
                 }}\n\
                 unsafe {{ nvshmem_putmem_nbi(x, x.add(n as usize), 4, 1); {calls}() }}"
        )
    };
    // A kernel crate built for sm_80 with the NVSHMEM install at `home`, into `dir/out`.
    let build = |kernels: &Path, home: &Path, dir: &Path| {
        KernelCrate::new(kernels)
            .targets(["sm_80"])
            .nested_dir(nested_dir())
            .nvshmem_at(home)
            .build_in(dir.join("out"))
    };
    let dir = scratch("nvshmem");
    let kernels = kernel_crate(&dir, "nvshmem-kernels", &body("nvshmem_quiet"));
    let home = stand_in_nvshmem(&dir, (3, 4, 5), (3, 4, 1));
    let built = build(&kernels, &home, &dir).unwrap();
    let ptx = std::fs::read_to_string(&built.objects[0].path).unwrap();
    assert!(ptx.contains(".visible .entry scale("), "{ptx}");
    assert!(!ptx.contains(".extern"), "{ptx}");
    for global in [
        "nvshmemi_device_state_d",
        "nvshmemi_ibgda_device_state_d",
        "nvshmemi_device_lib_version_d",
    ] {
        assert!(
            ptx.lines()
                .any(|l| l.starts_with(".visible .const") && l.contains(global)),
            "{global} is not a visible constant:\n{ptx}"
        );
    }
    assert!(!ptx.contains("nvshmem_unused_by_the_kernels"), "{ptx}");

    // A function the library does not define: named, and no object is left behind.
    let dir = scratch("nvshmem-missing");
    let kernels = kernel_crate(&dir, "nvshmem-missing-kernels", &body("nvshmem_fence"));
    let home = stand_in_nvshmem(&dir, (3, 4, 5), (3, 4, 5));
    let e = build(&kernels, &home, &dir).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, BuildError::Failed { .. }), "{text}");
    assert!(
        text.contains("does not define what the kernels call: nvshmem_fence"),
        "{text}"
    );

    // A bitcode of another release than the host library's headers.
    let home = stand_in_nvshmem(&scratch("nvshmem-old"), (3, 2, 0), (3, 4, 5));
    let e = build(&kernels, &home, &dir).unwrap_err();
    assert!(
        matches!(e, BuildError::NvshmemVersionMismatch { .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("version 3.2.0, but its host library is 3.4.5"),
        "{e}"
    );

    // NVSHMEM 3.5 on: one library per processor, the newest not newer than the target
    // taken (sm_70's for sm_80, beside sm_90's), where there is none (sm_90's alone for
    // sm_80) refused, naming the one for the target.
    let dir = scratch("nvshmem-per-processor");
    let kernels = kernel_crate(&dir, "nvshmem-pp-kernels", &body("nvshmem_quiet"));
    let home = stand_in_nvshmem(&dir, (3, 8, 0), (3, 8, 0));
    let lib = home.join("lib");
    std::fs::rename(
        lib.join("libnvshmem_device.bc"),
        lib.join("libnvshmem_device_sm_70.bc"),
    )
    .unwrap();
    std::fs::copy(
        lib.join("libnvshmem_device_sm_70.bc"),
        lib.join("libnvshmem_device_sm_90.bc"),
    )
    .unwrap();
    let built = build(&kernels, &home, &dir).unwrap();
    let ptx = std::fs::read_to_string(&built.objects[0].path).unwrap();
    assert!(
        ptx.contains("nvshmemi_device_state_d") && !ptx.contains(".extern"),
        "{ptx}"
    );
    std::fs::remove_file(lib.join("libnvshmem_device_sm_70.bc")).unwrap();
    let e = build(&kernels, &home, &dir).unwrap_err();
    assert!(
        matches!(&e, BuildError::NvshmemNotFound { looked: Some(p) }
            if p.ends_with("lib/libnvshmem_device_sm_80.bc")),
        "{e}"
    );

    // No install: the error names the variable.
    let e = build(&kernels, &dir.join("nowhere"), &dir).unwrap_err();
    assert!(matches!(e, BuildError::NvshmemNotFound { .. }), "{e}");
    assert!(e.to_string().contains("SYMMEM_NVSHMEM_HOME"), "{e}");
}

/// A stand-in NVSHMEM whose device library defines every function
/// `symmem_rma::nvshmem` declares (read from its source), each with the declared
/// signature, out of line, reading the device state and returning zero.
fn stand_in_for_rma(dir: &Path) -> PathBuf {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/rma/src/nvshmem.rs"),
    )
    .unwrap();
    let ty = |t: &str| match t.trim() {
        t if t.starts_with('*') => "ptr",
        "usize" | "u64" | "i64" => "i64",
        "c_int" | "i32" | "u32" => "i32",
        "u16" => "i16",
        "u8" => "i8",
        other => panic!("a declared type the stand-in does not know: {other}"),
    };
    let mut functions = String::new();
    let flat = source.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut names = Vec::new();
    for decl in flat.split("pub fn ").skip(1) {
        let decl = &decl[..decl.find(';').unwrap()];
        let (name, rest) = decl.split_once('(').unwrap();
        let (params, ret) = rest.rsplit_once(')').unwrap();
        let params: Vec<String> = params
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .enumerate()
            .map(|(i, p)| format!("{} %a{i}", ty(p.split_once(':').unwrap().1)))
            .collect();
        let ret = ret.trim().strip_prefix("->").map_or("void", ty);
        let value = match ret {
            "void" => "ret void".to_owned(),
            "ptr" => "ret ptr null".to_owned(),
            t => format!("ret {t} 0"),
        };
        functions += &format!(
            "define {ret} @{name}({}) noinline {{\n  \
             %s = load volatile i8, ptr addrspace(4) @nvshmemi_device_state_d\n  {value}\n}}\n",
            params.join(", ")
        );
        names.push(name.to_owned());
    }
    assert!(names.len() > 30, "declarations read: {names:?}");
    stand_in_with(dir, (3, 4, 5), (3, 4, 5), &functions)
}

/// The RMA library's off-node path through NVSHMEM (symmem-device's feature `nvshmem`):
/// a kernel of put, get, atomics, point loads and stores and a quiet to an off-node peer
/// links against NVSHMEM's device functions (a stand-in of every declared one) with none
/// left unresolved, calls NVSHMEM's block put and get, fences before an atomic, and
/// exports `SYMMEM_NVSHMEM` for the host to fill in.
#[test]
fn the_rma_off_node_path_calls_nvshmem() {
    if std::env::var_os(symmem_build::TARGETS_ENV).is_some() {
        println!("skipped: {} is set", symmem_build::TARGETS_ENV);
        return;
    }
    let dir = scratch("nvshmem-rma");
    let home = stand_in_for_rma(&dir);
    let device = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/device");
    put(
        &dir.join("kernels/Cargo.toml"),
        &format!(
            "[package]\nname = \"nvshmem-rma-kernels\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [dependencies]\nsymmem-device = {{ path = \"{}\", features = [\"nvshmem\"] }}\n",
            device.canonicalize().unwrap().display()
        ),
    );
    put(
        &dir.join("kernels/src/lib.rs"),
        "#![no_std]\n\
         #![cfg_attr(any(target_arch = \"amdgpu\", target_arch = \"nvptx64\"), feature(abi_gpu_kernel))]\n\
         use symmem_device::rma::AtomicOp;\n\
         use symmem_device::{Arch, Order, Scope, Team, kernel};\n\
         /// Every off-node operation to rank `to` (entry 0 of `table`).\n\
         #[kernel]\n\
         pub unsafe fn off_node(arch: &impl Arch, data: *mut u64, local: *mut u64, table: *const u64, world: u32, me: u32, to: u32, n: u32) {\n\
             let (to, bytes) = (to as usize, n as usize * 8);\n\
             // SAFETY: a test kernel: the host passes a symmetric `data` of `n` words.\n\
             unsafe {\n\
                 let team = Team::from_raw_parts(table, world, me);\n\
                 team.put_nbi_block(arch, data.cast(), local.cast_const().cast(), bytes, to);\n\
                 team.get_block(arch, local.cast(), data.cast_const().cast(), bytes, to);\n\
                 let old = team.atomic_fetch(AtomicOp::Min, data.cast::<i32>(), -1, to, Order::AcqRel, Scope::System);\n\
                 team.atomic(AtomicOp::Add, data, old as u64, to, Order::AcqRel, Scope::System);\n\
                 let v: [u8; 3] = team.load(data.cast::<[u8; 3]>(), to);\n\
                 team.store(data.cast::<[u8; 3]>().add(1), v, to);\n\
                 team.quiet_block(arch);\n\
             }\n\
         }\n",
    );
    let built = KernelCrate::new(dir.join("kernels"))
        .targets(["sm_80"])
        .nested_dir(nested_dir())
        .nvshmem_at(&home)
        .build_in(dir.join("out"))
        .unwrap();
    let ptx = std::fs::read_to_string(&built.objects[0].path).unwrap();
    assert!(!ptx.contains(".extern"), "{ptx}");
    assert!(
        ptx.lines()
            .any(|l| l.starts_with(".visible .global") && l.contains("SYMMEM_NVSHMEM")),
        "no SYMMEM_NVSHMEM global:\n{ptx}"
    );
    for call in [
        "nvshmemx_putmem_nbi_block",
        "nvshmemx_getmem_block",
        "nvshmem_uint32_atomic_compare_swap",
        "nvshmem_uint64_atomic_add",
        "nvshmem_uint8_g",
        "nvshmem_uint8_p",
        "nvshmem_fence",
        "nvshmem_quiet",
    ] {
        assert!(
            ptx.lines()
                .any(|l| l.contains("call") && l.contains(&format!("{call},"))
                    || l.contains("call") && l.contains(&format!("{call})"))
                    || l.trim_start().starts_with(call)),
            "no call of {call}:\n{ptx}"
        );
    }
}

/// The same against a real NVSHMEM install, where `SYMMEM_TEST_NVSHMEM_HOME` names one
/// (NVSHMEM 3.8.0's `nvidia/nvshmem` folder of the `nvidia-nvshmem-cu12` wheel was; CI has
/// none: the wheel is 280 MB): a kernel calling `nvshmem_putmem_nbi`,
/// `nvshmem_uint64_atomic_fetch_add` and `nvshmem_quiet`, built for sm_80 and sm_90, links
/// each processor's library with nothing left `.extern` and the state globals visible.
#[test]
fn nvshmem_real_device_library_links_where_installed() {
    let Some(home) = std::env::var_os("SYMMEM_TEST_NVSHMEM_HOME") else {
        println!("skipped: SYMMEM_TEST_NVSHMEM_HOME names no NVSHMEM install");
        return;
    };
    if std::env::var_os(symmem_build::TARGETS_ENV).is_some() {
        println!("skipped: {} is set", symmem_build::TARGETS_ENV);
        return;
    }
    let dir = scratch("nvshmem-real");
    let kernels = kernel_crate(
        &dir,
        "nvshmem-real-kernels",
        "    unsafe extern \"C\" {\n\
                 fn nvshmem_putmem_nbi(dest: *mut f32, src: *const f32, bytes: usize, pe: i32);\n\
                 fn nvshmem_uint64_atomic_fetch_add(dest: *mut u64, value: u64, pe: i32) -> u64;\n\
                 fn nvshmem_quiet();\n\
             }\n\
             unsafe {\n\
                 nvshmem_putmem_nbi(x, x.add(n as usize), 64, 1);\n\
                 let old = nvshmem_uint64_atomic_fetch_add(x.cast(), 1, 1);\n\
                 *x = old as f32;\n\
                 nvshmem_quiet();\n\
             }",
    );
    let built = KernelCrate::new(&kernels)
        .targets(["sm_80", "sm_90"])
        .nested_dir(nested_dir())
        .nvshmem_at(home)
        .build_in(dir.join("out"))
        .unwrap();
    for object in &built.objects {
        let ptx = std::fs::read_to_string(&object.path).unwrap();
        assert!(
            ptx.contains(".visible .entry scale("),
            "{}",
            object.path.display()
        );
        // Nothing `.extern` but PTX's system calls (the library's asserts and printf).
        let externs: Vec<&str> = ptx
            .lines()
            .filter(|l| l.starts_with(".extern"))
            .filter(|l| !l.contains("vprintf") && !l.contains("__assertfail"))
            .collect();
        assert!(
            externs.is_empty(),
            "{externs:?} in {}",
            object.path.display()
        );
        for global in ["nvshmemi_device_state_d", "nvshmemi_device_lib_version_d"] {
            assert!(
                ptx.lines()
                    .any(|l| l.starts_with(".visible .const") && l.contains(global)),
                "{global} in {}",
                object.path.display()
            );
        }
        println!("{}: {} bytes of PTX", object.path.display(), ptx.len());
    }
}
