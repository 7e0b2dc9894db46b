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
    gcn_arch_name: &str,
) -> Result<(&'static str, &'static [u8])> {
    let arch = base_arch(gcn_arch_name);
    objects
        .objects()
        .iter()
        .copied()
        .find(|(processor, _)| processor.starts_with("gfx") && *processor == arch)
        .ok_or_else(|| Error::NoCodeObject {
            module: objects.crate_name(),
            arch: arch.to_owned(),
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

/// Reading the kernel-descriptor symbols of an AMDGPU ELF, with every read bounds-checked.
mod elf {
    /// `EM_AMDGPU`.
    const EM_AMDGPU: u16 = 224;
    /// `SHT_SYMTAB`.
    const SHT_SYMTAB: u32 = 2;
    /// `SHT_DYNSYM`.
    const SHT_DYNSYM: u32 = 11;
    /// `STT_OBJECT`.
    const STT_OBJECT: u8 = 1;
    /// `STB_GLOBAL`.
    const STB_GLOBAL: u8 = 1;
    /// `STB_WEAK`.
    const STB_WEAK: u8 = 2;
    /// `STV_INTERNAL` and `STV_HIDDEN`: invisible to the loader.
    const STV_INTERNAL: u8 = 1;
    const STV_HIDDEN: u8 = 2;
    /// Bytes of an `Elf64_Shdr`.
    const SHDR_BYTES: usize = 64;
    /// Bytes of an `Elf64_Sym`.
    const SYM_BYTES: usize = 24;

    type Parse<T> = std::result::Result<T, &'static str>;

    /// `N` bytes of `b` at `at`.
    fn bytes<const N: usize>(b: &[u8], at: usize, what: &'static str) -> Parse<[u8; N]> {
        at.checked_add(N)
            .and_then(|end| b.get(at..end))
            .and_then(|s| s.try_into().ok())
            .ok_or(what)
    }

    fn u16_at(b: &[u8], at: usize, what: &'static str) -> Parse<u16> {
        bytes(b, at, what).map(u16::from_le_bytes)
    }

    fn u32_at(b: &[u8], at: usize, what: &'static str) -> Parse<u32> {
        bytes(b, at, what).map(u32::from_le_bytes)
    }

    fn usize_at(b: &[u8], at: usize, what: &'static str) -> Parse<usize> {
        bytes(b, at, what)
            .map(u64::from_le_bytes)
            .and_then(|v| usize::try_from(v).map_err(|_| what))
    }

    /// One section header: its type, the range of its contents in the image, its
    /// `sh_link` and its entry size.
    struct Section<'a> {
        kind: u32,
        data: &'a [u8],
        link: usize,
        entry_size: usize,
    }

    /// Section `index` of `image`, whose section headers are `entry` bytes each from
    /// offset `table`.
    fn section<'a>(
        image: &'a [u8],
        table: usize,
        entry: usize,
        index: usize,
    ) -> Parse<Section<'a>> {
        let at = index
            .checked_mul(entry)
            .and_then(|o| o.checked_add(table))
            .ok_or("section header table out of range")?;
        let what = "section header out of the image";
        let kind = u32_at(image, at + 4, what)?;
        let offset = usize_at(image, at + 24, what)?;
        let size = usize_at(image, at + 32, what)?;
        let link = u32_at(image, at + 40, what)? as usize;
        let entry_size = usize_at(image, at + 56, what)?;
        // SHT_NOBITS (8) has no contents in the image.
        let data = if kind == 8 {
            &[][..]
        } else {
            offset
                .checked_add(size)
                .and_then(|end| image.get(offset..end))
                .ok_or("section contents out of the image")?
        };
        Ok(Section {
            kind,
            data,
            link,
            entry_size,
        })
    }

    /// See [`super::code_object_kernels`].
    pub(super) fn kernel_names(image: &[u8]) -> Parse<Vec<String>> {
        if image.get(..4) != Some(b"\x7fELF") {
            return Err("not an ELF image");
        }
        let header = "ELF header truncated";
        if bytes::<2>(image, 4, header)? != [2, 1] {
            return Err("not a 64-bit little-endian ELF");
        }
        if u16_at(image, 18, header)? != EM_AMDGPU {
            return Err("not an AMDGPU ELF");
        }
        let table = usize_at(image, 40, header)?;
        let entry = usize::from(u16_at(image, 58, header)?);
        let mut count = usize::from(u16_at(image, 60, header)?);
        if table == 0 {
            return Err("no section header table");
        }
        if entry < SHDR_BYTES {
            return Err("section headers too small");
        }
        if count == 0 {
            // Extended numbering: the count is section 0's `sh_size`.
            count = usize_at(image, table + 32, "section header out of the image")?;
        }
        let mut symtab = None;
        for index in 0..count {
            let s = section(image, table, entry, index)?;
            match s.kind {
                SHT_DYNSYM => {
                    symtab = Some(s);
                    break;
                }
                SHT_SYMTAB if symtab.is_none() => symtab = Some(s),
                _ => {}
            }
        }
        let symtab = symtab.ok_or("no symbol table")?;
        if symtab.link >= count {
            return Err("symbol table names no string table");
        }
        let strings = section(image, table, entry, symtab.link)?.data;
        let sym_bytes = if symtab.entry_size == 0 {
            SYM_BYTES
        } else {
            symtab.entry_size
        };
        if sym_bytes < SYM_BYTES {
            return Err("symbols too small");
        }
        let mut names = Vec::new();
        for sym in symtab.data.chunks_exact(sym_bytes) {
            let what = "symbol truncated";
            let name_at = u32_at(sym, 0, what)? as usize;
            let [info, other] = bytes::<2>(sym, 4, what)?;
            let shndx = u16_at(sym, 6, what)?;
            let bind = info >> 4;
            let visibility = other & 3;
            if info & 0xf != STT_OBJECT
                || !(bind == STB_GLOBAL || bind == STB_WEAK)
                || visibility == STV_INTERNAL
                || visibility == STV_HIDDEN
                || shndx == 0
            {
                continue;
            }
            let name = strings
                .get(name_at..)
                .and_then(|s| s.split(|&b| b == 0).next().filter(|_| s.contains(&0)))
                .ok_or("symbol name out of the string table")?;
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
