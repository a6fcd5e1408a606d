//! Fuzz target: arbitrary bytes as the main VCL file must never panic the
//! front end (lexer, include expansion, parser, diagnostics rendering).
//! Includes are served as empty files so no disk access happens.

#![no_main]

use std::io;

use lacquer_vcl::include::SourceLoader;
use lacquer_vcl::parser::{ParseOptions, parse_source};
use lacquer_vcl::source::SourceMap;
use libfuzzer_sys::fuzz_target;

struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, _path: &str) -> io::Result<Vec<u8>> {
        Ok(b"sub x { }".to_vec())
    }
    fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
        Ok(vec![pattern.to_string()])
    }
}

fuzz_target!(|data: &[u8]| {
    let loader = NoFiles;
    let opts = ParseOptions {
        loader: &loader,
        ..ParseOptions::default()
    };
    let mut sm = SourceMap::new();
    let (_, _vcl, diags) = parse_source(&mut sm, "<fuzz>", data, &opts);
    let _ = diags.render(&sm);
    let _ = diags.render_compact(&sm);
});
