//! Tells the build scripts of the packages that depend on this one where its sources are
//! (`DEP_SYMMEM_KERNELS_SOURCE`, through the `links` key): `symmem`'s build script builds
//! this crate into GPU code objects, and must find it whether it is a path in symmem's
//! workspace or an unpacked package in cargo's registry cache.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo::metadata=source={dir}");
    println!("cargo::rerun-if-changed=build.rs");
}
