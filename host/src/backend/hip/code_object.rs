//! A HIP device's code object: picking the kernel crate's object for the device's
//! processor, reading the kernel names it exports, and packing a launch's kernarg
//! segment the way the AMDGPU ABI lays it out. None of it needs a device.

use crate::backend::CodeObjects;
use crate::error::{Error, Result};
use symmem_device::Slot;

/// The processor part of a `gcnArchName`: `gfx942:sramecc+:xnack-` → `gfx942`.
pub fn base_arch(gcn_arch_name: &str) -> &str {
    gcn_arch_name
        .split(':')
        .next()
        .unwrap_or(gcn_arch_name)
        .trim()
}

/// The object among `objects` for a device whose `gcnArchName` is `gcn_arch_name`, with
/// its processor name: the AMD object (`gfx*`) built for exactly its processor (AMD ISAs
/// are not forward-compatible), else [`Error::NoCodeObject`] naming the crate and the
/// processor.
pub fn code_object_for(
    objects: &'static CodeObjects,
    device: &str,
    gcn_arch_name: &str,
) -> Result<(&'static str, &'static [u8])> {
    let arch = base_arch(gcn_arch_name);
    let all = objects.objects();
    all.iter()
        .copied()
        .find(|(processor, _)| processor.starts_with("gfx") && *processor == arch)
        .ok_or_else(|| Error::NoCodeObject {
            module: objects.crate_name(),
            device: device.to_owned(),
            arch: arch.to_owned(),
            built: all.iter().map(|(target, _)| *target).collect(),
        })
}

/// The kernarg buffer's alignment in [`Hip`](super::Hip)'s launch (it is built in `u64` words).
pub const KERNARG_BUFFER_ALIGN: usize = 8;

/// The AMDGPU kernel ABI's layout of explicit arguments with the given slots (pointers
/// and by-value numbers, which is all a `#[kernel]` takes): in order, each at the next
/// offset that is a multiple of its alignment (`slot.align`: 8 for addresses, `u64`,
/// `i64` and `f64`, 4 for `u32`, `i32` and `f32`); the segment ends at the last
/// argument's end. Returns each argument's `(offset, size)` and the segment size.
pub fn kernarg_layout(slots: &[Slot]) -> (Vec<(usize, usize)>, usize) {
    let mut end = 0usize;
    let fields = slots
        .iter()
        .map(|slot| {
            let offset = end.next_multiple_of(slot.align.max(1));
            end = offset + slot.size;
            (offset, slot.size)
        })
        .collect();
    (fields, end)
}

/// A launch's explicit kernarg segment: for each parameter, the `slots[i].size` bytes
/// `args[i]` points at (its value in the parameter's ABI type, in the host's byte order,
/// little-endian like the device's), at the offset [`kernarg_layout`] gives; padding is
/// zero. Its length is the segment size. This is what [`Hip`](super::Hip)'s launch passes as
/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, from a [`KernelLaunch`](crate::backend::KernelLaunch)'s `slots` and `args`.
/// Needs no device.
///
/// # Panics
/// If `slots` and `args` differ in length.
///
/// # Safety
/// Each `args[i]` is valid for reads of `slots[i].size` bytes (as a [`KernelLaunch`](crate::backend::KernelLaunch)'s
/// are: each points at a value of its parameter's ABI type).
pub unsafe fn pack_kernargs(slots: &[Slot], args: &[*const ()]) -> Vec<u8> {
    assert_eq!(slots.len(), args.len(), "one kernel argument per parameter");
    let (fields, size) = kernarg_layout(slots);
    let mut bytes = vec![0u8; size];
    for (&(offset, len), &arg) in fields.iter().zip(args) {
        // SAFETY: `arg` is readable for `len` bytes (the caller's contract), and the
        // field lies inside `bytes` (the layout ends at its last field's end).
        let value = unsafe { std::slice::from_raw_parts(arg.cast::<u8>(), len) };
        bytes[offset..offset + len].copy_from_slice(value);
    }
    bytes
}

/// The names of the kernels an AMDGPU code object (an ELF `.hsaco`) exports: every
/// defined, non-hidden global `STT_OBJECT` symbol `<name>.kd` (the kernel descriptor
/// the AMDGPU ABI emits for each kernel, which `hipModuleGetFunction` resolves `name`
/// to), from the dynamic symbol table, or the static one in an object without one.
/// Sorted, each once. Needs no device; reads no further than `image`'s bounds.
///
/// # Errors
/// A description of what is wrong when `image` is not a 64-bit little-endian AMDGPU ELF
/// with a well-formed symbol table.
pub fn code_object_kernels(image: &[u8]) -> std::result::Result<Vec<String>, &'static str> {
    elf::kernel_names(image)
}

/// Reading the kernel-descriptor symbols of an AMDGPU ELF with the `object` crate, whose
/// every read is bounds-checked.
mod elf {
    use object::LittleEndian;
    use object::elf::{
        ELFCLASS64, ELFDATA2LSB, ELFMAG, EM_AMDGPU, FileHeader64, SHT_DYNSYM, SHT_SYMTAB,
        STB_GLOBAL, STB_WEAK, STT_OBJECT, STV_HIDDEN, STV_INTERNAL,
    };
    use object::read::StringTable;
    use object::read::elf::{FileHeader, SectionHeader, SectionTable, Sym, SymbolTable};

    type Parse<T> = std::result::Result<T, &'static str>;

    /// See [`super::code_object_kernels`].
    pub(super) fn kernel_names(image: &[u8]) -> Parse<Vec<String>> {
        // The identification bytes first, for errors that say which check failed
        // (`object` answers any of them with "Unsupported ELF header").
        if image.get(..4) != Some(&ELFMAG[..]) {
            return Err("not an ELF image");
        }
        if image.get(4..6).ok_or("ELF header truncated")? != [ELFCLASS64, ELFDATA2LSB] {
            return Err("not a 64-bit little-endian ELF");
        }
        let header =
            FileHeader64::<LittleEndian>::parse(image).map_err(|_| "ELF header truncated")?;
        let endian = LittleEndian;
        if header.e_machine(endian) != EM_AMDGPU {
            return Err("not an AMDGPU ELF");
        }
        let headers = header
            .section_headers(endian, image)
            .map_err(|_| "section header table out of the image")?;
        if headers.is_empty() {
            return Err("no section header table");
        }
        // Without the section names (`sections` would also need `e_shstrndx`).
        let sections: SectionTable<'_, FileHeader64<LittleEndian>, &[u8]> =
            SectionTable::new(headers, StringTable::default());
        // The dynamic symbol table, or the static one in an object without one.
        let of_type = |kind| {
            sections
                .enumerate()
                .find(|(_, s)| s.sh_type(endian) == kind)
        };
        let (index, section) = of_type(SHT_DYNSYM)
            .or_else(|| of_type(SHT_SYMTAB))
            .ok_or("no symbol table")?;
        let symbols = SymbolTable::parse(endian, image, &sections, index, section)
            .map_err(|_| "symbol table or its string table out of the image")?;
        let mut names = Vec::new();
        for sym in symbols.symbols() {
            let visibility = sym.st_visibility();
            if sym.st_type() != STT_OBJECT
                || !(sym.st_bind() == STB_GLOBAL || sym.st_bind() == STB_WEAK)
                || visibility == STV_INTERNAL
                || visibility == STV_HIDDEN
                || sym.is_undefined(endian)
            {
                continue;
            }
            let name = sym
                .name(endian, symbols.strings())
                .map_err(|_| "symbol name out of the string table")?;
            if let Some(kernel) = name.strip_suffix(b".kd").filter(|k| !k.is_empty()) {
                let kernel = std::str::from_utf8(kernel).map_err(|_| "kernel name not UTF-8")?;
                names.push(kernel.to_owned());
            }
        }
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }
}

/// `bytes` copied into 8-byte-aligned storage (an ELF image is read in place by the
/// loader; `include_bytes!` data is only byte-aligned).
pub(super) fn aligned_copy(bytes: &[u8]) -> AlignedBytes {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    AlignedBytes {
        words,
        len: bytes.len(),
    }
}

/// Bytes in `u64` storage.
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

impl std::ops::DerefMut for AlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[..self.len]
    }
}
