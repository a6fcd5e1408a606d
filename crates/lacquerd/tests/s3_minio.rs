//! The StorageGRID guide's setup (examples/storagegrid.vcl, TR-4796 in
//! shared/seeds/004) through this lacquerd in front of a real S3 server,
//! MinIO, driven by the AWS CLI, boto3, s3cmd and rclone: the checks are
//! in `tests/s3/check.py` (it starts MinIO, a recording proxy and
//! lacquerd on free loopback ports and temporary directories, and stops
//! them).
//!
//! MinIO is found on PATH, in /usr/local/bin or in Go's bin directory,
//! or built with `go install github.com/minio/minio@latest` when Go is
//! there and `LACQUER_S3_GO_INSTALL=1` asks for it (several minutes). With
//! neither MinIO nor Go the test is skipped with a loud message; every
//! other missing tool (python3 with boto3, aws, s3cmd, rclone) fails it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

fn go_bin() -> Option<PathBuf> {
    on_path("go").or_else(|| {
        let p = PathBuf::from("/usr/local/go/bin/go");
        p.is_file().then_some(p)
    })
}

/// Where `go install` puts binaries: `$GOBIN`, else `$GOPATH/bin` (or
/// `~/go/bin`).
fn go_install_dir(go: &Path) -> Option<PathBuf> {
    let out = Command::new(go)
        .args(["env", "GOBIN", "GOPATH"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let gobin = lines.next().unwrap_or("").trim().to_string();
    let gopath = lines.next().unwrap_or("").trim().to_string();
    if !gobin.is_empty() {
        return Some(PathBuf::from(gobin));
    }
    let first = gopath.split(':').next().unwrap_or("");
    (!first.is_empty()).then(|| Path::new(first).join("bin"))
}

fn find_minio() -> Option<PathBuf> {
    if let Some(p) = on_path("minio") {
        return Some(p);
    }
    let local = PathBuf::from("/usr/local/bin/minio");
    if local.is_file() {
        return Some(local);
    }
    let go = go_bin()?;
    let installed = go_install_dir(&go)?.join("minio");
    if installed.is_file() {
        return Some(installed);
    }
    if std::env::var("LACQUER_S3_GO_INSTALL").as_deref() == Ok("1") {
        eprintln!("s3_minio: building MinIO with go install (takes minutes)");
        let ok = Command::new(&go)
            .args(["install", "github.com/minio/minio@latest"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok && installed.is_file() {
            return Some(installed);
        }
        panic!("s3_minio: go install github.com/minio/minio@latest failed");
    }
    None
}

#[test]
fn storagegrid_vcl_against_minio() {
    let Some(minio) = find_minio() else {
        let go = if go_bin().is_some() {
            "Go is there: set LACQUER_S3_GO_INSTALL=1 to build it (go install github.com/minio/minio@latest)"
        } else {
            "and neither is Go to build it"
        };
        eprintln!(
            "\n\n*** SKIPPED s3_minio: MinIO is not installed ({go}). \
             The S3 integration test of the StorageGRID VCL did NOT run. ***\n"
        );
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/s3/check.py");
    let vcl = root.join("../../examples/storagegrid.vcl");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&minio)
        .arg(env!("CARGO_BIN_EXE_lacquerd"))
        .arg(&vcl)
        .output()
        .unwrap_or_else(|e| panic!("s3_minio: cannot run python3 {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "s3_minio: {} failed ({}):\n{stdout}\n{stderr}",
        script.display(),
        out.status
    );
    assert!(
        stdout.contains("\"ok\": true"),
        "s3_minio: the check script ended without its summary:\n{stdout}\n{stderr}"
    );
}
