//! The HIP backend's kernel-argument packing against the kernels' own ABI: for every
//! AMD code object embedded in `symmem` (gfx942, gfx950), the AMDGPU metadata note
//! (`amdhsa.kernels`, read with llvm-tools' `llvm-readobj --notes`) gives each kernel's
//! `.args` (`.offset`, `.size`, `.value_kind`) and `.kernarg_segment_size`; the host's
//! [`pack_args`] must put every argument of every [`KernelCall`] variant exactly there,
//! and [`kernarg_layout`] (the rule `pack_args` uses) must reproduce the metadata of
//! every kernel in the object. Needs no GPU.
#![cfg(feature = "hip")]

use std::collections::BTreeMap;
use symmem::backend::hip::{KERNARG_BUFFER_ALIGN, kernarg_layout, kernel_call_samples, pack_args};
use symmem::code_objects;
use symmem::kernels::{KernelArg, KernelCall};

/// One kernel argument as the metadata describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MetaArg {
    offset: usize,
    size: usize,
    value_kind: String,
}

/// One kernel's metadata.
#[derive(Clone, Debug, Default)]
struct MetaKernel {
    name: String,
    args: Vec<MetaArg>,
    segment_size: usize,
    segment_align: usize,
}

/// `llvm-readobj --notes` of `bytes`.
fn notes(bytes: &[u8]) -> String {
    symmem_tests::llvm::run_on("llvm-readobj", &["--notes"], bytes)
}

fn number(value: &str, key: &str) -> usize {
    value
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{key}: not a number: {value:?}"))
}

/// Parses the YAML rendering of `amdhsa.kernels`: a kernel is a `  - ` item (keys at
/// indent 4), an argument of its `.args` list a `      - ` item (keys at indent 8).
fn parse_kernels(text: &str) -> BTreeMap<String, MetaKernel> {
    let start = text
        .find("amdhsa.kernels:")
        .expect("no amdhsa.kernels in the metadata note");
    let mut kernels = Vec::<MetaKernel>::new();
    let mut in_args = false;
    for line in text[start..].lines().skip(1) {
        let trimmed = line.trim_start();
        let mut indent = line.len() - trimmed.len();
        if indent == 0 && !trimmed.is_empty() {
            break; // the next top-level key (amdhsa.target, amdhsa.version)
        }
        let body = match trimmed.strip_prefix("- ") {
            Some(rest) => {
                if indent == 2 {
                    kernels.push(MetaKernel::default());
                } else if indent == 6 && in_args {
                    kernels.last_mut().unwrap().args.push(MetaArg::default());
                }
                indent += 2;
                rest
            }
            None => trimmed,
        };
        let (Some((key, value)), Some(kernel)) = (body.split_once(':'), kernels.last_mut()) else {
            continue;
        };
        let value = value.trim();
        match indent {
            4 => {
                in_args = key == ".args";
                match key {
                    ".name" => kernel.name = value.to_owned(),
                    ".kernarg_segment_size" => kernel.segment_size = number(value, key),
                    ".kernarg_segment_align" => kernel.segment_align = number(value, key),
                    _ => {}
                }
            }
            8 if in_args => {
                let arg = kernel.args.last_mut().unwrap();
                match key {
                    ".offset" => arg.offset = number(value, key),
                    ".size" => arg.size = number(value, key),
                    ".value_kind" => arg.value_kind = value.to_owned(),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    kernels.into_iter().map(|k| (k.name.clone(), k)).collect()
}

/// The AMD code objects the host embeds, with their kernels' metadata; gfx942 and
/// gfx950 must both be there.
fn amd_objects() -> Vec<(&'static str, BTreeMap<String, MetaKernel>)> {
    let objects: Vec<_> = code_objects::all()
        .filter(|o| o.module == "symmem_device" && o.target.starts_with("gfx"))
        .map(|o| (o.target, parse_kernels(&notes(o.bytes))))
        .collect();
    for want in ["gfx942", "gfx950"] {
        assert!(
            objects.iter().any(|(t, _)| *t == want),
            "no embedded {want} code object"
        );
    }
    objects
}

fn arg_bytes(arg: KernelArg) -> Vec<u8> {
    match arg {
        KernelArg::U64(v) => v.to_le_bytes().to_vec(),
        KernelArg::U32(v) => v.to_le_bytes().to_vec(),
    }
}

#[test]
fn hip_abi_every_kernel_call_matches_kernel_metadata() {
    let samples: Vec<KernelCall> = kernel_call_samples();
    for (target, kernels) in amd_objects() {
        println!("{target}: {} kernels in the code object", kernels.len());
        for call in &samples {
            let name = call.name();
            let meta = kernels.get(name).unwrap_or_else(|| {
                panic!("{target}: KernelCall kernel {name} is not in the code object")
            });
            let packed = pack_args(call);
            let args = call.args();
            assert_eq!(
                packed.fields.len(),
                meta.args.len(),
                "{target} {name}: {} arguments packed, metadata has {}",
                packed.fields.len(),
                meta.args.len()
            );
            for (i, ((&(offset, size), m), arg)) in
                packed.fields.iter().zip(&meta.args).zip(&args).enumerate()
            {
                assert!(
                    m.value_kind == "by_value" || m.value_kind == "global_buffer",
                    "{target} {name} arg {i}: value kind {} (hidden arguments are not packed)",
                    m.value_kind
                );
                assert_eq!(
                    (offset, size),
                    (m.offset, m.size),
                    "{target} {name} arg {i}: packed at (offset, size) ({offset}, {size}), \
                     the kernel's ABI says ({}, {})",
                    m.offset,
                    m.size
                );
                assert_eq!(
                    &packed.bytes[offset..offset + size],
                    &arg_bytes(*arg)[..],
                    "{target} {name} arg {i}: wrong bytes at offset {offset}"
                );
            }
            assert_eq!(
                packed.bytes.len(),
                meta.segment_size,
                "{target} {name}: kernarg buffer of {} bytes, .kernarg_segment_size {}",
                packed.bytes.len(),
                meta.segment_size
            );
            assert!(
                meta.segment_align <= KERNARG_BUFFER_ALIGN,
                "{target} {name}: .kernarg_segment_align {} > the buffer's {KERNARG_BUFFER_ALIGN}",
                meta.segment_align
            );
            println!(
                "{target} {name}: {} args, {} bytes: {:?} ok",
                packed.fields.len(),
                packed.bytes.len(),
                packed.fields
            );
        }
        let known: Vec<&str> = samples.iter().map(KernelCall::name).collect();
        let others: Vec<&String> = kernels
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .collect();
        println!(
            "{target}: {} kernels have no KernelCall yet (layout rule checked below): {others:?}",
            others.len()
        );
    }
}

/// The layout rule itself, against every kernel of every AMD object: the offsets and
/// segment size it computes from the metadata's argument sizes are the metadata's. So a
/// future `KernelCall` of any of these kernels packs correctly by construction.
#[test]
fn hip_abi_layout_rule_reproduces_every_kernel() {
    let mut checked = 0;
    for (target, kernels) in amd_objects() {
        assert!(!kernels.is_empty(), "{target}: no kernels parsed");
        for (name, meta) in &kernels {
            assert!(
                !meta.args.is_empty() || meta.segment_size == 0,
                "{target} {name}"
            );
            let explicit: Vec<&_> = meta
                .args
                .iter()
                .filter(|a| !a.value_kind.starts_with("hidden_"))
                .collect();
            assert_eq!(
                explicit.len(),
                meta.args.len(),
                "{target} {name}: has hidden arguments; the launch passes none"
            );
            let (fields, size) = kernarg_layout(meta.args.iter().map(|a| a.size));
            let want: Vec<(usize, usize)> = meta.args.iter().map(|a| (a.offset, a.size)).collect();
            assert_eq!(fields, want, "{target} {name}: layout rule disagrees");
            assert_eq!(size, meta.segment_size, "{target} {name}: segment size");
            checked += 1;
        }
    }
    println!("layout rule matches {checked} kernels");
}

#[test]
fn hip_abi_parser_reads_a_known_kernel() {
    // Guards the parser itself: symmem_copy is (dst, src, n) = 3 x 8 bytes.
    for (target, kernels) in amd_objects() {
        let copy = &kernels["symmem_copy"];
        assert_eq!(
            copy.args
                .iter()
                .map(|a| (a.offset, a.size))
                .collect::<Vec<_>>(),
            vec![(0, 8), (8, 8), (16, 8)],
            "{target}"
        );
        assert_eq!(copy.segment_size, 24, "{target}");
        assert_eq!(copy.args[2].value_kind, "by_value", "{target}");
        assert_eq!(copy.args[0].value_kind, "global_buffer", "{target}");
    }
}
