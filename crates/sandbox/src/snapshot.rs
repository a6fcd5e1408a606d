//! Pre-initialisation of a tenant module (what Wizer does, in-process):
//! the module runs its `main` once at load, then its memory and mutable
//! globals are written back into a new module as data segments and
//! global initialisers. Every request instantiates that new module, so it
//! starts from the state `main` left, and the pooling allocator maps the
//! data segments as one copy-on-write image instead of running `main`
//! again or copying bytes.
//!
//! Two rewrites of the module's binary, both by `wasm-encoder`'s
//! re-encoder: [`instrument`] exports memory 0 and every mutable global
//! under reserved names so the host can read them after `main`, and
//! [`rewrite`] replaces the active data segments and the mutable globals'
//! initialisers with the snapshot (passive segments keep their indexes).

use wasm_encoder::reencode::{Error as ReError, Reencode, utils};
use wasm_encoder::{ConstExpr, DataSection, ExportKind, ExportSection, GlobalSection, Module};

/// The export name of memory 0 in an instrumented module.
pub(crate) const MEMORY_EXPORT: &str = "__lacquer_memory";

/// The export name of the mutable global with absolute index `i`.
pub(crate) fn global_export(i: u32) -> String {
    format!("__lacquer_global_{i}")
}

/// What the rewrites need to know about a module.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    /// Imported globals come first in the global index space.
    imported_globals: u32,
    /// Absolute indexes of the module's own mutable globals.
    pub mutable_globals: Vec<u32>,
    /// Whether the module defines (not imports) a memory.
    pub has_memory: bool,
    memory64: bool,
    has_exports: bool,
}

fn parse_err(e: wasmparser::BinaryReaderError) -> String {
    format!("the module is not valid WebAssembly: {e}")
}

/// Reads the module's shape and rejects what cannot be snapshotted.
pub(crate) fn shape(bin: &[u8]) -> Result<Shape, String> {
    let mut s = Shape::default();
    let mut defined_globals = 0u32;
    for payload in wasmparser::Parser::new(0).parse_all(bin) {
        match payload.map_err(parse_err)? {
            wasmparser::Payload::Version {
                encoding: wasmparser::Encoding::Component,
                ..
            } => {
                return Err(
                    "the file is a WebAssembly component; tenants are core modules (build for wasm32-unknown-unknown or wasm32-wasip1)"
                        .into(),
                );
            }
            wasmparser::Payload::ImportSection(r) => {
                for imp in r.into_imports() {
                    let imp = imp.map_err(parse_err)?;
                    match imp.ty {
                        wasmparser::TypeRef::Global(_) => s.imported_globals += 1,
                        wasmparser::TypeRef::Memory(_) => {
                            return Err(format!(
                                "the module imports memory '{}.{}'; a tenant must define its own memory",
                                imp.module, imp.name
                            ));
                        }
                        _ => {}
                    }
                }
            }
            wasmparser::Payload::GlobalSection(r) => {
                for g in r {
                    let g = g.map_err(parse_err)?;
                    let index = s.imported_globals + defined_globals;
                    defined_globals += 1;
                    if g.ty.mutable {
                        match g.ty.content_type {
                            wasmparser::ValType::I32
                            | wasmparser::ValType::I64
                            | wasmparser::ValType::F32
                            | wasmparser::ValType::F64 => s.mutable_globals.push(index),
                            other => {
                                return Err(format!(
                                    "mutable global {index} has type {other}, which a snapshot cannot hold (only i32, i64, f32, f64)"
                                ));
                            }
                        }
                    }
                }
            }
            wasmparser::Payload::MemorySection(r) => {
                for (i, m) in r.into_iter().enumerate() {
                    let m = m.map_err(parse_err)?;
                    if i == 0 {
                        s.has_memory = true;
                        s.memory64 = m.memory64;
                    }
                }
            }
            wasmparser::Payload::ExportSection(_) => s.has_exports = true,
            wasmparser::Payload::StartSection { .. } => {
                return Err(
                    "the module has a start function; a tenant initialises in an exported `main` (it runs once at load, before the snapshot)"
                        .into(),
                );
            }
            _ => {}
        }
    }
    if !s.has_exports {
        return Err("the module exports nothing, so it has no hooks to call".into());
    }
    Ok(s)
}

/// Why instances of the module may not be reset and reused by the next
/// request (`reuse`), or `None` when they may: the reset puts back memory
/// 0 and the mutable globals, not tables or dropped segments.
pub(crate) fn reuse_blocker(bin: &[u8]) -> Result<Option<String>, String> {
    use wasmparser::Operator as O;
    let mut memories = 0;
    for payload in wasmparser::Parser::new(0).parse_all(bin) {
        match payload.map_err(parse_err)? {
            wasmparser::Payload::MemorySection(r) => memories += r.count(),
            wasmparser::Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader().map_err(parse_err)?;
                while !ops.eof() {
                    let what = match ops.read().map_err(parse_err)? {
                        O::TableSet { .. } => "table.set",
                        O::TableGrow { .. } => "table.grow",
                        O::TableFill { .. } => "table.fill",
                        O::TableCopy { .. } => "table.copy",
                        O::TableInit { .. } => "table.init",
                        O::ElemDrop { .. } => "elem.drop",
                        O::DataDrop { .. } => "data.drop",
                        _ => continue,
                    };
                    return Ok(Some(format!("its code uses {what}")));
                }
            }
            _ => {}
        }
    }
    Ok((memories > 1).then(|| format!("it defines {memories} memories")))
}

fn re_err(e: ReError<std::convert::Infallible>) -> String {
    format!("rewriting the module failed: {e}")
}

/// Adds exports of memory 0 and of every mutable global.
struct Instrument<'a>(&'a Shape);

impl Reencode for Instrument<'_> {
    type Error = std::convert::Infallible;

    fn parse_export_section(
        &mut self,
        exports: &mut ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), ReError<Self::Error>> {
        utils::parse_export_section(self, exports, section)?;
        for &g in &self.0.mutable_globals {
            exports.export(&global_export(g), ExportKind::Global, g);
        }
        if self.0.has_memory {
            exports.export(MEMORY_EXPORT, ExportKind::Memory, 0);
        }
        Ok(())
    }
}

/// The module with its memory and mutable globals exported.
pub(crate) fn instrument(bin: &[u8], shape: &Shape) -> Result<Vec<u8>, String> {
    let mut m = Module::new();
    Instrument(shape)
        .parse_core_module(&mut m, wasmparser::Parser::new(0), bin)
        .map_err(re_err)?;
    Ok(m.finish())
}

/// A mutable global's value after `main`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum GlobalValue {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
}

impl GlobalValue {
    pub(crate) fn to_val(self) -> wasmtime::Val {
        match self {
            GlobalValue::I32(x) => wasmtime::Val::I32(x),
            GlobalValue::I64(x) => wasmtime::Val::I64(x),
            GlobalValue::F32(b) => wasmtime::Val::F32(b),
            GlobalValue::F64(b) => wasmtime::Val::F64(b),
        }
    }
}

/// The state `main` left.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Values of the mutable globals, in [`Shape::mutable_globals`] order.
    pub globals: Vec<GlobalValue>,
    /// Memory 0's size in 64 KiB pages.
    pub pages: u64,
    /// Non-zero runs of memory 0: (offset, bytes).
    pub segments: Vec<(u64, Vec<u8>)>,
}

/// Zero gaps shorter than this stay inside one segment (a segment costs
/// a few bytes of header; many tiny ones cost more than the zeros).
const MERGE_GAP: usize = 64;

/// Splits memory into the runs of non-zero bytes worth a data segment.
pub(crate) fn segments(mem: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < mem.len() {
        if mem[i] == 0 {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i;
        while i < mem.len() {
            if mem[i] != 0 {
                i += 1;
                end = i;
            } else if i - end >= MERGE_GAP {
                break;
            } else {
                i += 1;
            }
        }
        out.push((start as u64, mem[start..end].to_vec()));
        i = end;
    }
    out
}

/// Replaces data and mutable globals by the snapshot.
struct Rewrite<'a> {
    shape: &'a Shape,
    snap: &'a Snapshot,
    /// The index of the next defined global to re-encode.
    next_global: u32,
    data_written: bool,
}

impl Rewrite<'_> {
    fn offset(&self, at: u64) -> ConstExpr {
        if self.shape.memory64 {
            ConstExpr::i64_const(at as i64)
        } else {
            ConstExpr::i32_const(at as u32 as i32)
        }
    }

    fn write_snapshot(&self, data: &mut DataSection) {
        for (at, bytes) in &self.snap.segments {
            data.active(0, &self.offset(*at), bytes.iter().copied());
        }
    }
}

impl Reencode for Rewrite<'_> {
    type Error = std::convert::Infallible;

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), ReError<Self::Error>> {
        self.next_global = self.shape.imported_globals;
        for g in section {
            let g = g?;
            let index = self.next_global;
            self.next_global += 1;
            let at = self.shape.mutable_globals.iter().position(|&m| m == index);
            match at.and_then(|k| self.snap.globals.get(k)) {
                Some(v) => {
                    let init = match *v {
                        GlobalValue::I32(x) => ConstExpr::i32_const(x),
                        GlobalValue::I64(x) => ConstExpr::i64_const(x),
                        GlobalValue::F32(b) => ConstExpr::f32_const(wasm_encoder::Ieee32::new(b)),
                        GlobalValue::F64(b) => ConstExpr::f64_const(wasm_encoder::Ieee64::new(b)),
                    };
                    globals.global(self.global_type(g.ty)?, &init);
                }
                None => utils::parse_global(self, globals, g)?,
            }
        }
        Ok(())
    }

    fn parse_memory_section(
        &mut self,
        memories: &mut wasm_encoder::MemorySection,
        section: wasmparser::MemorySectionReader<'_>,
    ) -> Result<(), ReError<Self::Error>> {
        for (i, m) in section.into_iter().enumerate() {
            let mut ty = self.memory_type(m?)?;
            if i == 0 {
                ty.minimum = ty.minimum.max(self.snap.pages);
            }
            memories.memory(ty);
        }
        Ok(())
    }

    fn parse_data(
        &mut self,
        data: &mut DataSection,
        datum: wasmparser::Data<'_>,
    ) -> Result<(), ReError<Self::Error>> {
        match datum.kind {
            // The snapshot holds what this segment wrote (and what `main`
            // changed since); an empty passive segment keeps the indexes
            // of the ones after it.
            wasmparser::DataKind::Active { .. } => {
                data.passive(std::iter::empty());
                Ok(())
            }
            wasmparser::DataKind::Passive => utils::parse_data(self, data, datum),
        }
    }

    fn parse_data_section(
        &mut self,
        data: &mut DataSection,
        section: wasmparser::DataSectionReader<'_>,
    ) -> Result<(), ReError<Self::Error>> {
        utils::parse_data_section(self, data, section)?;
        self.write_snapshot(data);
        self.data_written = true;
        Ok(())
    }

    fn data_count(&mut self, count: u32) -> Result<u32, ReError<Self::Error>> {
        Ok(count + self.snap.segments.len() as u32)
    }

    fn intersperse_section_hook(
        &mut self,
        module: &mut Module,
        _after: Option<wasm_encoder::SectionId>,
        before: Option<wasm_encoder::SectionId>,
    ) -> Result<(), ReError<Self::Error>> {
        // A module without a data section gets one at its end (only
        // custom sections may follow the data section).
        if before.is_none() && !self.data_written && !self.snap.segments.is_empty() {
            let mut data = DataSection::new();
            self.write_snapshot(&mut data);
            module.section(&data);
            self.data_written = true;
        }
        Ok(())
    }
}

/// The module `bin` (instrumented) starting from `snap`.
pub(crate) fn rewrite(bin: &[u8], shape: &Shape, snap: &Snapshot) -> Result<Vec<u8>, String> {
    let mut m = Module::new();
    let mut r = Rewrite {
        shape,
        snap,
        next_global: 0,
        data_written: false,
    };
    r.parse_core_module(&mut m, wasmparser::Parser::new(0), bin)
        .map_err(re_err)?;
    Ok(m.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_every_non_zero_byte_and_merge_short_gaps() {
        let mut mem = vec![0u8; 1000];
        mem[3] = 1;
        mem[10] = 2; // within the gap: same segment
        mem[500] = 3; // far: a segment of its own
        mem[999] = 4;
        let s = segments(&mem);
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].0, 3);
        assert_eq!(s[0].1.len(), 8);
        assert_eq!(s[1], (500, vec![3]));
        assert_eq!(s[2], (999, vec![4]));
        let mut back = vec![0u8; 1000];
        for (at, b) in s {
            back[at as usize..at as usize + b.len()].copy_from_slice(&b);
        }
        assert_eq!(back, mem);
        assert!(segments(&[0; 100]).is_empty());
    }

    #[test]
    fn start_sections_and_imported_memories_are_refused_with_a_reason() {
        let start =
            wat::parse_str("(module (func $f) (start $f) (export \"f\" (func $f)))").unwrap();
        assert!(shape(&start).unwrap_err().contains("start function"));
        let mem = wat::parse_str("(module (import \"a\" \"m\" (memory 1)) (func (export \"f\")))")
            .unwrap();
        assert!(shape(&mem).unwrap_err().contains("imports memory"));
        assert!(shape(b"not wasm").unwrap_err().contains("not valid"));
    }
}
