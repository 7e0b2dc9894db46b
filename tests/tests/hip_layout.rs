//! The HIP backend's FFI against the *installed* HIP headers, and its no-device path.
//!
//! `symmem::backend::hip::FFI_FACTS` lists every size, field offset, flag and result
//! code the backend passes across the FFI, with the value it uses (from `hip-sys`'s
//! HIP 5.4 bindings). This test compiles a C program with `cc` over
//! `$HIP_PATH/include/hip/hip_runtime_api.h` (default `/usr`, where Debian's
//! `libamdhip64-dev` puts HIP 5.2) that prints each fact's C value, runs it, and
//! compares. Facts are tagged with the HIP major versions they apply to, so the same
//! test checks the 6.x layouts (`hipDeviceProp_tR0600`, `hipDeviceProp_tR0000`) on a
//! machine with ROCm 6 or later headers.
#![cfg(feature = "hip")]

use std::path::PathBuf;
use std::process::Command;
use symmem::Error;
use symmem::backend::hip::{BINDINGS_HIP_VERSION, FFI_FACTS, Hip, Relation};

fn hip_include() -> PathBuf {
    let root = std::env::var_os("HIP_PATH").map_or_else(|| PathBuf::from("/usr"), PathBuf::from);
    root.join("include")
}

/// The C program: the installed major version, then `index value` per applicable fact.
fn probe_source() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n\
         #include <hip/hip_runtime_api.h>\n\
         int main(void) {\n\
         printf(\"major %llu\\n\", (unsigned long long)HIP_VERSION_MAJOR);\n\
         printf(\"version %llu\\n\", (unsigned long long)HIP_VERSION);\n",
    );
    for (i, f) in FFI_FACTS.iter().enumerate() {
        let (lo, hi) = f.hip_major;
        let upper = if hi == u32::MAX {
            String::new()
        } else {
            format!(" && HIP_VERSION_MAJOR <= {hi}")
        };
        c.push_str(&format!(
            "#if HIP_VERSION_MAJOR >= {lo}{upper}\n\
             printf(\"{i} %llu\\n\", (unsigned long long)({}));\n#endif\n",
            f.c_expr
        ));
    }
    c.push_str("return 0;\n}\n");
    c
}

#[test]
fn hip_layout_ffi_matches_installed_headers() {
    let dir = std::env::temp_dir().join(format!("symmem-hip-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source()).unwrap();
    let include = hip_include();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-D__HIP_PLATFORM_AMD__"])
        .arg(format!("-I{}", include.display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e} (a C compiler is needed)"));
    assert!(
        out.status.success(),
        "compiling the layout probe against {} failed:\n{}",
        include.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("probe runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();

    let mut major = None;
    let mut values = vec![None; FFI_FACTS.len()];
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap();
        let value: u64 = value.parse().unwrap();
        match key {
            "major" => major = Some(value as u32),
            "version" => println!(
                "installed headers: HIP {value}; hip-sys bindings: HIP {BINDINGS_HIP_VERSION}"
            ),
            i => values[i.parse::<usize>().unwrap()] = Some(value),
        }
    }
    let major = major.expect("HIP_VERSION_MAJOR printed");
    let mut checked = 0;
    let mut bad = Vec::new();
    for (f, c) in FFI_FACTS.iter().zip(&values) {
        let applies = (f.hip_major.0..=f.hip_major.1).contains(&major);
        match (applies, c) {
            (false, None) => continue,
            (true, Some(c)) => {
                let ok = match f.relation {
                    Relation::Eq => *c == f.rust,
                    Relation::AtMost => *c <= f.rust,
                };
                println!(
                    "{:<50} C {:>6}  {:?} Rust {:>6}  {}",
                    f.c_expr,
                    c,
                    f.relation,
                    f.rust,
                    if ok { "ok" } else { "MISMATCH" }
                );
                if !ok {
                    bad.push(f.c_expr);
                }
                checked += 1;
            }
            (applies, c) => panic!("{}: applies {applies} but printed {c:?}", f.c_expr),
        }
    }
    assert!(checked >= 10, "only {checked} facts apply to HIP {major}");
    assert!(
        bad.is_empty(),
        "FFI facts differ from the installed headers: {bad:?}"
    );
    println!(
        "{checked} FFI facts match the HIP {major} headers in {}",
        include.display()
    );
}

/// With `libamdhip64` installed and no GPU (CI), `Hip::new` is `Err(NoDevice)` (HIP 5.2
/// answers `hipInit` with `hipErrorInvalidDevice` and `hipGetDeviceCount` with
/// `hipErrorNoDevice`); with a GPU it opens the device; never a panic.
#[test]
fn hip_layout_no_device_is_typed_error() {
    match Hip::new(0) {
        Ok(hip) => println!("a HIP device is present: {hip:?}"),
        Err(e @ Error::NoDevice { backend: "hip" }) => {
            println!("no device, as expected: {e:?} ({e})")
        }
        Err(e @ Error::LibraryMissing { .. }) => println!("no HIP runtime: {e:?} ({e})"),
        Err(e) => panic!("expected NoDevice or LibraryMissing, got {e:?}"),
    }
    if std::env::var_os("SYMMEM_HIP_EXPECT_NO_DEVICE").is_some() {
        assert!(matches!(
            Hip::new(0),
            Err(Error::NoDevice { backend: "hip" })
        ));
    }
    // An ordinal past the end is NoDevice too (or the library is missing).
    assert!(matches!(
        Hip::new(1 << 20),
        Err(Error::NoDevice { .. } | Error::LibraryMissing { .. })
    ));
}
