//! The HIP backend's kernel launches against the kernels' own ABI, for every kernel
//! `#[kernel]` declares, with no hand-kept list.
//!
//! For each embedded kernel crate (symmem's own and every example's,
//! `symmem_tests::objects::all`) and each of its AMD code objects (every AMD target of
//! the build, `symmem_tests::objects::amd_targets`),
//! the AMDGPU metadata note (`amdhsa.kernels`, read with llvm-tools' `llvm-readobj
//! --notes`) gives every kernel's `.args` (`.offset`, `.size`, `.value_kind`) and
//! `.kernarg_segment_size`. [`check_crate`] compares them with what this program knows
//! of the crate: its declarations (`symmem_device::declarations()`, one per `#[kernel]`
//! linked into this test binary, with each parameter's [`Slot`]) and the backend's
//! launch path ([`kernarg_layout`], [`pack_kernargs`], [`code_object_kernels`]):
//!
//! - the kernels in the metadata are exactly the declared ones, and exactly those
//!   whose names the backend reads from the object's symbols (what `load_module` gets a
//!   function for);
//! - each kernel's explicit arguments are its declared parameters: as many, each
//!   `.size == slot.size`, `.offset` where [`kernarg_layout`] puts it, `.value_kind`
//!   `global_buffer` for a pointer and `by_value` for a number; no hidden arguments, and
//!   `.kernarg_segment_size` the layout's end;
//! - the buffer [`pack_kernargs`] builds (what `Hip`'s launch passes) holds a distinct
//!   sample value of each parameter at its metadata offset, and zero elsewhere.
//!
//! Needs no GPU.
#![cfg(feature = "hip")]

use std::collections::{BTreeMap, BTreeSet};
use symmem::CodeObjects;
use symmem::backend::hip::{
    KERNARG_BUFFER_ALIGN, code_object_kernels, kernarg_layout, pack_kernargs,
};
use symmem_device::{AbiKind, Declaration, Slot};

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
/// Panics on a kernel listed twice.
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
    let mut by_name = BTreeMap::new();
    for kernel in kernels {
        assert!(
            !kernel.name.is_empty(),
            "a kernel without .name in the metadata"
        );
        let name = kernel.name.clone();
        assert!(
            by_name.insert(name.clone(), kernel).is_none(),
            "{name} is listed twice in amdhsa.kernels"
        );
    }
    by_name
}

/// The `.value_kind` of an explicit argument of `kind`.
fn value_kind(kind: AbiKind) -> &'static str {
    match kind {
        AbiKind::Pointer => "global_buffer",
        AbiKind::Int | AbiKind::Float => "by_value",
    }
}

/// A sample value of parameter `param` of kernel number `kernel`, `size` bytes: its
/// first byte the parameter's number + 1 (never a zero of padding), its second the
/// kernel's, the rest `0xc0 | i`; so a swapped, shifted or truncated argument shows.
fn sample(kernel: usize, param: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| match i {
            0 => param as u8 + 1,
            1 => kernel as u8,
            _ => 0xc0 | i as u8,
        })
        .collect()
}

/// Checks one kernel's metadata against its declaration on `target`; returns its
/// packed segment size.
fn check_kernel(target: &str, index: usize, declared: &Declaration, meta: &MetaKernel) -> usize {
    let name = declared.name;
    // Every parameter's primitives, in order (a view's two or three among them).
    let slots: Vec<Slot> = declared
        .slots
        .iter()
        .flat_map(|p| p.iter().copied())
        .collect();
    let slots = &slots[..];
    let hidden: Vec<&str> = meta
        .args
        .iter()
        .filter(|a| a.value_kind.starts_with("hidden_"))
        .map(|a| a.value_kind.as_str())
        .collect();
    assert!(
        hidden.is_empty(),
        "{target} {name}: hidden arguments {hidden:?}; the launch passes none"
    );
    assert_eq!(
        meta.args.len(),
        slots.len(),
        "{target} {name}: {} arguments in the metadata, {} declared parameters",
        meta.args.len(),
        slots.len()
    );
    let (fields, size) = kernarg_layout(slots);
    for (i, ((slot, m), &(offset, _))) in slots.iter().zip(&meta.args).zip(&fields).enumerate() {
        assert_eq!(
            m.size, slot.size,
            "{target} {name} arg {i}: {} bytes in the metadata, the slot has {}",
            m.size, slot.size
        );
        assert_eq!(
            m.offset, offset,
            "{target} {name} arg {i}: at offset {} in the metadata, kernarg_layout puts it at {offset}",
            m.offset
        );
        assert_eq!(
            m.value_kind,
            value_kind(slot.kind),
            "{target} {name} arg {i}: value kind {} for a {:?} parameter",
            m.value_kind,
            slot.kind
        );
        assert!(
            slot.align <= KERNARG_BUFFER_ALIGN,
            "{target} {name} arg {i}: alignment {} > the buffer's {KERNARG_BUFFER_ALIGN}",
            slot.align
        );
    }
    assert_eq!(
        size, meta.segment_size,
        "{target} {name}: kernarg_layout ends at {size}, .kernarg_segment_size {}",
        meta.segment_size
    );
    assert!(
        meta.segment_align <= KERNARG_BUFFER_ALIGN,
        "{target} {name}: .kernarg_segment_align {} > the buffer's {KERNARG_BUFFER_ALIGN}",
        meta.segment_align
    );

    // The buffer as the launch packs it, from a pointer per parameter.
    let values: Vec<Vec<u8>> = slots
        .iter()
        .enumerate()
        .map(|(j, slot)| sample(index, j, slot.size))
        .collect();
    let args: Vec<*const ()> = values.iter().map(|v| v.as_ptr().cast()).collect();
    // SAFETY: `args[j]` points at `values[j]`, `slots[j].size` bytes.
    let packed = unsafe { pack_kernargs(slots, &args) };
    assert_eq!(
        packed.len(),
        meta.segment_size,
        "{target} {name}: kernarg buffer of {} bytes, .kernarg_segment_size {}",
        packed.len(),
        meta.segment_size
    );
    let mut covered = vec![false; packed.len()];
    for (j, (m, value)) in meta.args.iter().zip(&values).enumerate() {
        assert_eq!(
            &packed[m.offset..m.offset + m.size],
            &value[..],
            "{target} {name} arg {j}: wrong bytes at its metadata offset {}",
            m.offset
        );
        covered[m.offset..m.offset + m.size].fill(true);
    }
    for (at, (&byte, &arg)) in packed.iter().zip(&covered).enumerate() {
        assert!(
            arg || byte == 0,
            "{target} {name}: padding byte {at} is {byte:#x}"
        );
    }
    packed.len()
}

/// Checks every AMD code object of `objects` against the declarations of its crate
/// (see the module documentation). Returns `(target, kernels checked)` per object.
fn check_crate(objects: &CodeObjects) -> Vec<(&'static str, usize)> {
    let crate_name = objects.crate_name();
    let declared: BTreeMap<&str, &Declaration> = symmem_device::declarations()
        .filter(|d| d.crate_name == crate_name)
        .map(|d| (d.name, d))
        .collect();
    assert!(
        !declared.is_empty(),
        "{crate_name}: no #[kernel] of it is linked into this test"
    );
    assert_eq!(
        declared.len(),
        symmem_device::declarations()
            .filter(|d| d.crate_name == crate_name)
            .count(),
        "{crate_name}: a kernel is declared twice"
    );
    let declared_names: BTreeSet<&str> = declared.keys().copied().collect();
    let mut checked = Vec::new();
    for target in symmem_tests::objects::amd_targets() {
        let image = objects
            .find(target)
            .unwrap_or_else(|| panic!("{crate_name}: no embedded {target} code object"));
        let meta = parse_kernels(&notes(image));
        let meta_names: BTreeSet<&str> = meta.keys().map(String::as_str).collect();
        assert!(
            meta_names == declared_names,
            "{crate_name} {target}: declared but not in the code object: {:?}; \
             in the code object but not declared: {:?}",
            declared_names.difference(&meta_names).collect::<Vec<_>>(),
            meta_names.difference(&declared_names).collect::<Vec<_>>()
        );
        let symbols = code_object_kernels(image)
            .unwrap_or_else(|e| panic!("{crate_name} {target}: unreadable ELF: {e}"));
        let symbols: BTreeSet<&str> = symbols.iter().map(String::as_str).collect();
        assert!(
            symbols == meta_names,
            "{crate_name} {target}: the kernel descriptors (what load_module finds) are not \
             the metadata's kernels: only in the symbols {:?}, only in the metadata {:?}",
            symbols.difference(&meta_names).collect::<Vec<_>>(),
            meta_names.difference(&symbols).collect::<Vec<_>>()
        );
        for (index, (name, declaration)) in declared.iter().enumerate() {
            let bytes = check_kernel(target, index, declaration, &meta[*name]);
            println!(
                "{crate_name} {target} {name}: {} args, {bytes} bytes ok",
                declaration.slots.len()
            );
        }
        println!("{crate_name} {target}: {} kernels checked", declared.len());
        checked.push((target, declared.len()));
    }
    checked
}

#[test]
fn hip_abi_every_declared_kernel_matches_its_metadata() {
    let (mut total, mut crates) = (0, 0);
    for objects in symmem_tests::objects::all() {
        crates += 1;
        for (_, count) in check_crate(objects) {
            total += count;
        }
    }
    assert!(
        crates >= 3,
        "symmem's kernels and both examples' must be checked"
    );
    println!("{total} kernel launches checked across {crates} crates");
}

#[test]
fn hip_abi_parser_reads_a_known_kernel() {
    // Guards the parser itself: symmem_copy is (dst: ViewMut<u8>, src: View<u8>), each an
    // address and a length: 4 x 8 bytes.
    let name = symmem_kernels::symmem_copy.name();
    for target in symmem_tests::objects::amd_targets() {
        let image = symmem::backend::code_objects::KERNELS
            .find(target)
            .unwrap_or_else(|| panic!("no embedded {target} code object"));
        let kernels = parse_kernels(&notes(image));
        let copy = &kernels[name];
        assert_eq!(
            copy.args
                .iter()
                .map(|a| (a.offset, a.size))
                .collect::<Vec<_>>(),
            vec![(0, 8), (8, 8), (16, 8), (24, 8)],
            "{target}"
        );
        assert_eq!(copy.segment_size, 32, "{target}");
        assert_eq!(copy.args[1].value_kind, "by_value", "{target}");
        assert_eq!(copy.args[0].value_kind, "global_buffer", "{target}");
        assert_eq!(copy.args[2].value_kind, "global_buffer", "{target}");
    }
}
