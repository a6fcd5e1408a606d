//! `lacquer log`, `lacquer ncsa` and `lacquer top -1` against the real
//! varnishlog, varnishncsa and varnishtop 7.1: each case in
//! `data/log.golden`, `data/ncsa.golden` and `data/top.golden`
//! names a binary log file (written by Varnish's varnishlog, or built
//! record by record) and the tool's arguments, and holds what the Varnish
//! tool printed (`data/gen-golden.sh` regenerates them where Varnish is
//! installed). Lacquer must print the same bytes.

use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

struct Case {
    file: String,
    args: Vec<String>,
    expected: Vec<u8>,
}

fn cases(golden: &str) -> Vec<Case> {
    let text = std::fs::read(data().join(golden)).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<Case> = None;
    for line in text.split_inclusive(|&b| b == b'\n') {
        if let Some(head) = line.strip_prefix(b"### ") {
            if head == b"end\n" {
                out.push(cur.take().expect("end without case"));
                continue;
            }
            let head = String::from_utf8(head.to_vec()).unwrap();
            let mut parts = head.trim_end_matches('\n').split(" \x1f");
            let file = parts.next().unwrap().to_string();
            let args = parts.map(str::to_string).collect();
            cur = Some(Case {
                file,
                args,
                expected: Vec::new(),
            });
        } else if let Some(c) = &mut cur {
            c.expected.extend_from_slice(line);
        }
    }
    out
}

/// Runs a tool on arguments, with a scratch file it may write to; returns
/// the exit status and the output.
type Runner = dyn Fn(&[String], &std::path::Path) -> (i32, Vec<u8>);

/// Runs every case of `golden` through `run`.
fn check(golden: &str, run: &Runner) {
    let tmp = std::env::temp_dir().join(format!("lq-golden-{golden}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let all = cases(golden);
    assert!(all.len() >= 30, "{golden} has {} cases", all.len());
    let mut failures = Vec::new();
    for (i, c) in all.iter().enumerate() {
        let mut args = vec!["-r".to_string(), data().join(&c.file).display().to_string()];
        args.extend(c.args.iter().cloned());
        let (code, got) = run(&args, &tmp.join(format!("out{i}")));
        if code != 0 || got != c.expected {
            failures.push(format!(
                "{} {:?} (exit {code}):\n--- expected\n{}--- got\n{}",
                c.file,
                c.args,
                String::from_utf8_lossy(&c.expected),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ncsa_matches_varnishncsa_byte_for_byte() {
    check("ncsa.golden", &|args, out| {
        let mut args = args.to_vec();
        args.extend(["-w".to_string(), out.display().to_string()]);
        let code = lacquer_tools::ncsa::main("varnishncsa", &args);
        (code, std::fs::read(out).unwrap_or_default())
    });
}

#[test]
fn top_once_matches_varnishtop_byte_for_byte() {
    check("top.golden", &|args, _| {
        let p = lacquer_tools::top::prog("varnishtop");
        let a = lacquer_tools::top::TopArgs::parse(&p, args).unwrap();
        match lacquer_tools::top::count(&a) {
            Ok(top) => (0, top.dump()),
            Err(e) => (1, e.into_bytes()),
        }
    });
}

#[test]
fn log_matches_varnishlog_byte_for_byte() {
    check("log.golden", &|args, out| {
        let mut args = args.to_vec();
        args.extend([
            "-A".to_string(),
            "-w".to_string(),
            out.display().to_string(),
        ]);
        let code = lacquer_tools::log::main("varnishlog", &args);
        (code, std::fs::read(out).unwrap_or_default())
    });
}

#[test]
fn log_files_round_trip_byte_for_byte() {
    // What varnishlog -w wrote, read and written again by lacquer log.
    let tmp = std::env::temp_dir().join(format!("lq-golden-rt-{}", std::process::id()));
    let src = data().join("varnish-u3.bin");
    let args: Vec<String> = ["-g", "raw", "-r", src.to_str().unwrap(), "-w"]
        .iter()
        .map(|s| s.to_string())
        .chain([tmp.display().to_string()])
        .collect();
    assert_eq!(lacquer_tools::log::main("varnishlog", &args), 0);
    let got = std::fs::read(&tmp).unwrap();
    std::fs::remove_file(&tmp).unwrap();
    assert_eq!(got, std::fs::read(src).unwrap());
}
