//! `lacquer-difftest`: runs generated scenarios against varnishd and
//! lacquerd and reports the differences by class.
//!
//! ```text
//! lacquer-difftest batch [--seed N] [--count N] [--seconds S] [--save DIR] [--minimise] [--fail-on CLASS,...] [--family NAME|all]
//! lacquer-difftest replay FILE|DIR...
//! lacquer-difftest show SEED
//! lacquer-difftest run SEED
//! lacquer-difftest magento
//! lacquer-difftest cli FILE|DIR...
//! ```
//! `cli` sends scripts of management commands (`tests/diff/cli/*.cli`) to
//! both daemons and compares the replies ([`lacquer_difftest::cli`]).
//! `magento` runs the store-shaped scenario of [`lacquer_difftest::magento`].
//! `batch` exits non-zero when a scenario differs (with `--fail-on`, only
//! a difference of one of those classes: hang, crash, vcl-acceptance, parameter,
//! error-status, status, reason, header, body, connection,
//! backend-request, counter); with `--family`, it runs only the seeds
//! whose scenario is one of [`lacquer_difftest::cond`]'s families (that
//! one, or `all`), `--count` of them; `replay` runs saved
//! cases (regressions that must agree) and prints both transcripts of any
//! that differ.

use lacquer_difftest::grammar;
use lacquer_difftest::runner::{self, Pair};
use lacquer_difftest::scenario::Scenario;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: lacquer-difftest batch [--seed N] [--count N] [--seconds S] [--save DIR] [--minimise] [--fail-on CLASS,...] [--family NAME|all]\n       lacquer-difftest replay FILE|DIR...\n       lacquer-difftest show SEED\n       lacquer-difftest run SEED\n       lacquer-difftest magento\n       lacquer-difftest cli FILE|DIR...";

fn workdir() -> PathBuf {
    std::env::temp_dir().join(format!("lacquer-difftest-{}", std::process::id()))
}

fn num(args: &[String], i: usize, what: &str) -> Result<u64, String> {
    args.get(i)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{what} needs a number\n{USAGE}"))
}

fn batch(args: &[String]) -> Result<bool, String> {
    let (mut seed, mut count, mut seconds, mut save, mut mini) = (1u64, 100u64, 0u64, None, false);
    let mut fail_on: Option<Vec<String>> = None;
    let mut family: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--seed" => seed = num(args, i + 1, "--seed")?,
            "--count" => count = num(args, i + 1, "--count")?,
            "--seconds" => seconds = num(args, i + 1, "--seconds")?,
            "--save" => {
                save = Some(PathBuf::from(
                    args.get(i + 1).ok_or("--save needs a directory")?,
                ))
            }
            "--fail-on" => {
                let v = args.get(i + 1).ok_or("--fail-on needs a list of classes")?;
                fail_on = Some(v.split(',').map(str::to_string).collect());
            }
            "--family" => {
                let f = args.get(i + 1).ok_or("--family needs a name or all")?;
                if f != "all" && !lacquer_difftest::cond::FAMILIES.contains(&f.as_str()) {
                    return Err(format!(
                        "--family {f}: not one of all, {}",
                        lacquer_difftest::cond::FAMILIES.join(", ")
                    ));
                }
                family = Some(f.clone());
            }
            "--minimise" => {
                mini = true;
                i += 1;
                continue;
            }
            o => return Err(format!("unknown option {o}\n{USAGE}")),
        }
        i += 2;
    }
    let root = workdir();
    let mut p = Pair::start(&root)?;
    let start = Instant::now();
    let mut by_class: BTreeMap<String, u64> = BTreeMap::new();
    let mut ran = 0;
    let mut s = seed;
    while ran < count {
        if seconds > 0 && start.elapsed() > Duration::from_secs(seconds) {
            break;
        }
        s += 1;
        let s = s - 1;
        if let Some(f) = &family {
            let fam = lacquer_difftest::cond::family_of(s);
            if fam.is_none() || (f != "all" && fam != Some(f.as_str())) {
                continue;
            }
        }
        let sc = grammar::scenario(s);
        ran += 1;
        let (vt, lt) = runner::both(&mut p, &sc)?;
        match runner::compare(&vt, &lt) {
            None => {}
            Some(d) => {
                *by_class.entry(d.class.clone()).or_default() += 1;
                println!(
                    "seed {s}: {}\n  varnishd: {}\n  lacquerd: {}",
                    d.class, d.varnish, d.lacquer
                );
                // A compiler's message is not compared, but shown.
                for (who, t) in [("varnishd", &vt), ("lacquerd", &lt)] {
                    for m in t.iter().filter(|l| l.starts_with("#msg ")) {
                        println!("  {who} {m}");
                    }
                }
                if let Some(dir) = &save {
                    let small = if mini {
                        runner::minimise(&mut p, &sc, &d.class, 60)
                    } else {
                        sc.clone()
                    };
                    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                    let f = dir.join(format!("{}-{s}.json", d.class));
                    std::fs::write(&f, small.to_json())
                        .map_err(|e| format!("{}: {e}", f.display()))?;
                    println!("  saved {}", f.display());
                }
            }
        }
    }
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
    let total: u64 = by_class.values().sum();
    println!(
        "difftest: {ran} scenarios from seed {seed} in {:.0} s, {total} differ",
        start.elapsed().as_secs_f64()
    );
    for (c, n) in &by_class {
        println!("  {c}: {n}");
    }
    // Only the classes named by --fail-on fail the run (all by default).
    let failing: u64 = by_class
        .iter()
        .filter(|(c, _)| fail_on.as_ref().is_none_or(|f| f.iter().any(|x| x == *c)))
        .map(|(_, n)| n)
        .sum();
    Ok(failing == 0)
}

/// Runs CLI scripts on both daemons; true when every reply agrees.
fn cli(args: &[String]) -> Result<bool, String> {
    let files = cases_with(args, "cli")?;
    let root = workdir();
    let mut p = Pair::start(&root)?;
    let (mut total, mut bad) = (0, 0);
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let cmds = lacquer_difftest::cli::commands(&text);
        let v = lacquer_difftest::cli::replies(&mut p.v, &cmds)?;
        let l = lacquer_difftest::cli::replies(&mut p.l, &cmds)?;
        let diffs = lacquer_difftest::cli::differences(&cmds, &v, &l);
        for (c, a, b) in &diffs {
            println!(
                "=== {}: {c}\n--- varnishd\n{a}\n--- lacquerd\n{b}\n",
                f.display()
            );
        }
        println!(
            "{}: {} commands, {} differ",
            f.display(),
            cmds.len(),
            diffs.len()
        );
        total += cmds.len();
        bad += diffs.len();
    }
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
    println!("cli: {total} commands, {bad} differ");
    Ok(bad == 0)
}

fn cases(paths: &[String]) -> Result<Vec<PathBuf>, String> {
    cases_with(paths, "json")
}

/// The files named, and those ending in `.{ext}` in the directories named.
fn cases_with(paths: &[String], ext: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for a in paths {
        let p = Path::new(a);
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(p.to_path_buf());
        }
    }
    Ok(out)
}

fn replay(args: &[String]) -> Result<bool, String> {
    let files = cases(args)?;
    let root = workdir();
    let mut p = Pair::start(&root)?;
    let mut bad = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let sc = Scenario::from_json(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        let (v, l) = runner::both(&mut p, &sc)?;
        match runner::compare(&v, &l) {
            // DIFFTEST_VERBOSE=1 prints varnishd's transcript of agreeing
            // cases too (to see what a new case pins down).
            None if std::env::var_os("DIFFTEST_VERBOSE").is_some() => {
                println!("{}: same\n{}", f.display(), v.join("\n"))
            }
            None => println!(
                "{}: same ({})",
                f.display(),
                v.first().map_or("nothing ran", String::as_str)
            ),
            Some(d) => {
                bad += 1;
                println!(
                    "{}: {} differs\n--- varnishd\n{}\n--- lacquerd\n{}",
                    f.display(),
                    d.class,
                    v.join("\n"),
                    l.join("\n")
                );
            }
        }
    }
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
    println!("replay: {} passed, {bad} failed", files.len() - bad);
    Ok(bad == 0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("batch") => batch(&args[1..]),
        Some("replay") if args.len() > 1 => replay(&args[1..]),
        Some("run") if args.len() > 1 => {
            num(&args, 1, "run").and_then(|s| run(grammar::scenario(s)))
        }
        Some("magento") => run(lacquer_difftest::magento::scenario()),
        Some("cli") if args.len() > 1 => cli(&args[1..]),
        Some("show") => num(&args, 1, "show").map(|s| {
            let sc = grammar::scenario(s);
            println!("{}\n{}", sc.to_json(), sc.vcl(8080));
            true
        }),
        _ => Err(USAGE.to_string()),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lacquer-difftest: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs one scenario on both daemons and prints its VCL and both
/// transcripts; true when they agree.
fn run(sc: Scenario) -> Result<bool, String> {
    let root = workdir();
    let mut p = Pair::start(&root)?;
    let (v, l) = runner::both(&mut p, &sc)?;
    drop(p);
    // DIFFTEST_KEEP=1 keeps the daemons' directories (logs) to read.
    if std::env::var_os("DIFFTEST_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("kept {}", root.display());
    }
    println!(
        "{}\n--- varnishd\n{}\n--- lacquerd\n{}",
        sc.vcl(0),
        v.join("\n"),
        l.join("\n")
    );
    match runner::compare(&v, &l) {
        Some(d) => {
            println!(
                "differs: {}\n  varnishd: {}\n  lacquerd: {}",
                d.class, d.varnish, d.lacquer
            );
            Ok(false)
        }
        None => Ok(true),
    }
}
