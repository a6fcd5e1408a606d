//! The example tenants of `examples/tenants/`, built once per process
//! from Rust with the guest SDK for `wasm32-unknown-unknown` (the target
//! must be installed: `rustup target add wasm32-unknown-unknown`). Shared
//! by the tests (`tests/examples.rs`) and the benchmark
//! (`benches/sandbox.rs`, which includes this file by path), so both run
//! the same build of the same tenants.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the example tenants once; the directory of the `.wasm` files.
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = root.join("target/tenants");
        // From the repository: cargo reads the tenants' small-stack
        // flags from its `.cargo/config.toml` in the current directory.
        let out = Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["build", "--release", "--target", "wasm32-unknown-unknown", "--manifest-path"])
            .arg(root.join("examples/tenants/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .expect("running cargo");
        assert!(
            out.status.success(),
            "building the example tenants failed (is the wasm32-unknown-unknown target installed?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("wasm32-unknown-unknown/release")
    })
}

/// The module of the example tenant `name` (`hello`, `router`, …).
pub fn tenant(name: &str) -> Vec<u8> {
    let p = built().join(format!("tenant_{name}.wasm"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
