//! Reading a CUBIN: is it a CUDA ELF, for which `sm_XX`, with which kernels.

use gpfarm_protocol::worker::KernelRef;
use object::read::elf::{ElfFile64, FileHeader, Sym};
use object::{Object, ObjectSymbol};

/// `EM_CUDA` in an ELF header.
const EM_CUDA: u16 = 190;
/// `st_other` bit that marks a kernel entry point (as opposed to a device function).
const STO_CUDA_ENTRY: u8 = 0x10;

/// What a CUBIN contains.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CubinInfo {
    /// Architecture number (90 for sm_90).
    pub sm: u32,
    /// Names of its kernels (entry points, not device functions), sorted.
    pub kernels: Vec<String>,
}

/// Parses a CUBIN; `None` if it is not a 64-bit CUDA ELF.
pub fn inspect(bytes: &[u8]) -> Option<CubinInfo> {
    let file = ElfFile64::<object::Endianness>::parse(bytes).ok()?;
    let header = file.elf_header();
    let endian = file.endian();
    if header.e_machine(endian) != EM_CUDA {
        return None;
    }
    // CUDA ELF ABI v8 (CUDA 12.8+) keeps the SM number in bits 8-15 of e_flags; older ABIs in
    // bits 0-7.
    let flags = header.e_flags(endian);
    let sm = if header.e_ident().abi_version >= 8 { (flags >> 8) & 0xff } else { flags & 0xff };
    let mut kernels: Vec<String> = file
        .symbols()
        .filter(|s| s.elf_symbol().st_other() & STO_CUDA_ENTRY != 0 && s.is_global() && !s.is_weak())
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .collect();
    kernels.sort();
    kernels.dedup();
    Some(CubinInfo { sm, kernels })
}

/// Why `cubin` cannot be what a unit whose members are at `kernels` compiled to (each a
/// [`KernelRef`] text: `NAME` or branch `NAME@J` of a switch kernel): it is not a CUDA ELF, or a
/// kernel named is not among its kernels. `None` when every one is there.
pub fn missing_kernel(cubin: &[u8], kernels: &[String]) -> Option<String> {
    let Some(info) = inspect(cubin) else {
        return Some(format!("the CUBIN ({} bytes) is not a CUDA ELF", cubin.len()));
    };
    let name = |k: &String| KernelRef::parse(k).map_or_else(|| k.clone(), |r| r.kernel.to_owned());
    let missing = kernels.iter().map(name).find(|k| info.kernels.binary_search(k).is_err())?;
    Some(format!("the CUBIN lacks kernel `{missing}` (it has {})", info.kernels.join(", ")))
}
