//! Builds every GPU code object (see `symmem-device-build`) and generates
//! `code_objects.rs`, which embeds them with `include_bytes!`.

use std::path::PathBuf;
use symmem_device_build::{Builder, DEVICE_MODULE};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest
        .parent()
        .expect("host/ is inside the workspace")
        .to_owned();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    let builder = Builder::new(&workspace, target_dir);
    for input in builder.inputs() {
        println!("cargo:rerun-if-changed={}", input.display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let objects = match builder.build_all() {
        Ok(objects) => objects,
        Err(e) => panic!("building the GPU code objects failed: {e}"),
    };
    let mut table =
        String::from("/// Every embedded code object: (module, target processor, bytes).\n");
    table.push_str("pub static CODE_OBJECTS: &[(&str, &str, &[u8])] = &[\n");
    for object in &objects {
        table.push_str(&format!(
            "    ({DEVICE_MODULE:?}, {:?}, include_bytes!({:?})),\n",
            object.target.cpu,
            object.path.display().to_string()
        ));
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(out.join("code_objects.rs"), table).expect("OUT_DIR is writable");
}
