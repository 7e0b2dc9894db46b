//! Builds every example's kernel crate (`examples/*/kernels`, found on disk) with
//! `symmem-build`, as the examples' own build scripts do, so the codegen tests read the
//! examples' code objects next to symmem's own (`symmem_tests::objects::all`), and
//! links each of those crates (`extern crate`), so their `#[kernel]` declarations are in
//! the test programs too.

use std::path::Path;

fn main() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    println!("cargo:rerun-if-changed={}", examples.display());
    let mut crates: Vec<_> = std::fs::read_dir(&examples)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.path().join("kernels"))
                .collect()
        })
        .unwrap_or_default();
    crates.retain(|k: &std::path::PathBuf| k.join("Cargo.toml").exists());
    crates.sort();
    let mut table = String::from("&[\n");
    let mut links = String::new();
    for kernels in crates {
        let built = symmem_build::KernelCrate::new(&kernels)
            .build()
            .unwrap_or_else(|e| panic!("building {}: {e}", kernels.display()));
        let name = &built.crate_name;
        links.push_str(&format!("extern crate {name};\n"));
        table.push_str(&format!(
            "    &symmem::CodeObjects::new({name:?}, include!(concat!(env!(\"OUT_DIR\"), \"/symmem-kernels/{name}.rs\"))),\n"
        ));
    }
    table.push(']');
    let out = std::env::var_os("OUT_DIR").expect("set by cargo");
    std::fs::write(Path::new(&out).join("examples.rs"), table).expect("OUT_DIR is writable");
    std::fs::write(Path::new(&out).join("example_crates.rs"), links).expect("OUT_DIR is writable");
}
