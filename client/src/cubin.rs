//! Reading a CUBIN: is it a CUDA ELF, for which `sm_XX`, with which kernels.

use object::read::elf::{ElfFile64, FileHeader};
use object::{Object, ObjectSymbol, SymbolKind};

/// `EM_CUDA` in an ELF header.
const EM_CUDA: u16 = 190;

/// What a CUBIN contains.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CubinInfo {
    /// Architecture number (90 for sm_90).
    pub sm: u32,
    /// Names of its functions (kernels), sorted.
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
        .filter(|s| s.kind() == SymbolKind::Text && s.is_global())
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .collect();
    kernels.sort();
    kernels.dedup();
    Some(CubinInfo { sm, kernels })
}
