//! The host API: core-module imports under the module name `lacquer`,
//! every one taking plain integers and (pointer, length) pairs into the
//! guest's memory. Results are written into buffers the guest passes
//! (`out_ptr`, `out_cap`) and the full length is returned, so a guest
//! whose buffer was short can retry with a bigger one; the host never
//! calls back into the guest (no allocator calls on the hot path).
//!
//! Return conventions: `-1` means "no such thing" (absent header, a
//! message the current subroutine does not have), other negative values
//! are refusals (`-2` malformed input, `-3` a limit). A pointer or length
//! outside the guest's memory traps: the call fails, the daemon does not.
//!
//! | import | arguments → result |
//! | --- | --- |
//! | `header_get` | which, name, out → length or -1 |
//! | `header_set` | which, name, value → 0 / -1 / -2 |
//! | `header_append` | which, "Name: value" line → 0 / -1 / -2 |
//! | `header_unset` | which, name → 0 / -1 |
//! | `field_get` / `field_set` | which, field (0 url, 1 method, 2 proto, 3 reason), out / value |
//! | `status_get` / `status_set` | which (, status) |
//! | `decide` | what (1 synth, 2 pass, 3 hash, 4 pipe, 5 purge, 6 restart), status, reason |
//! | `forge` | cacheable, status, content type, body |
//! | `backend` | name → 0 / -3 (over `max_backends`) |
//! | `hash_data` | data |
//! | `set_ttl` | seconds (f64) |
//! | `set_uncacheable` | flag |
//! | `ban` | ban expression |
//! | `regex_compile` | pattern → id / -2 / -3 (only in `main`) |
//! | `regex_match` | id, subject → 1 / 0 / -1 |
//! | `regex_subst` | id, subject, template (`$1`), all, out → length / -1 |
//! | `log` | message |
//! | `sha256` | data, out (32 bytes) |
//! | `base64_encode` / `base64_decode` | data, out → length / -2 |
//! | `arg` | out → length (the argument of `call`) |
//! | `result` | index, value → 0 / -3 |

use sha2::Digest as _;
use wasmtime::{Caller, Linker, Result, format_err};

use crate::request::{Decision, Forged, RESULTS, Task, Which};

/// The guest memory and the task, from inside a host call.
fn parts<'a>(caller: &'a mut Caller<'_, Task>) -> Result<(&'a mut [u8], &'a mut Task)> {
    let m = caller
        .data()
        .memory
        .ok_or_else(|| format_err!("host call from a module without memory"))?;
    Ok(m.data_and_store_mut(caller))
}

fn range(len_total: usize, ptr: i32, len: i32) -> Result<std::ops::Range<usize>> {
    let start = ptr as u32 as usize;
    let end = start
        .checked_add(len as u32 as usize)
        .filter(|&e| e <= len_total)
        .ok_or_else(|| {
            format_err!(
                "host call given memory {start}+{} outside the guest's memory",
                len as u32
            )
        })?;
    Ok(start..end)
}

fn slice(mem: &[u8], ptr: i32, len: i32) -> Result<&[u8]> {
    Ok(&mem[range(mem.len(), ptr, len)?])
}

/// Copies `src` into the guest buffer (as much as fits); returns the
/// full length.
fn put(mem: &mut [u8], ptr: i32, cap: i32, src: &[u8]) -> Result<i32> {
    let r = range(mem.len(), ptr, cap)?;
    let n = src.len().min(r.len());
    mem[r.start..r.start + n].copy_from_slice(&src[..n]);
    Ok(i32::try_from(src.len()).unwrap_or(i32::MAX))
}

fn valid_name(n: &[u8]) -> bool {
    !n.is_empty()
        && n.iter().all(|b| {
            b.is_ascii_graphic()
                && !matches!(
                    b,
                    b':' | b'('
                        | b')'
                        | b'"'
                        | b'/'
                        | b'['
                        | b']'
                        | b'{'
                        | b'}'
                        | b'?'
                        | b'='
                        | b','
                        | b';'
                        | b'\\'
                        | b'@'
                        | b'<'
                        | b'>'
                )
        })
}

fn valid_value(v: &[u8]) -> bool {
    !v.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)
}

/// Adds every host function to `linker`.
pub(crate) fn link(l: &mut Linker<Task>) -> Result<()> {
    const M: &str = "lacquer";
    l.func_wrap(
        M,
        "header_get",
        |mut c: Caller<'_, Task>, which: i32, np: i32, nl: i32, op: i32, oc: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let name = slice(mem, np, nl)?;
            range(mem.len(), op, oc)?;
            let Some(msg) = Which::from_i32(which).and_then(|w| t.msgs[w as usize].as_ref()) else {
                return Ok(-1);
            };
            match msg.header(name) {
                Some(v) => {
                    // The value is copied out before the guest buffer is
                    // written: both live in different places, but the
                    // borrow checker sees one `mem`.
                    let v = v.to_vec();
                    put(mem, op, oc, &v)
                }
                None => Ok(-1),
            }
        },
    )?;
    l.func_wrap(
        M,
        "header_set",
        |mut c: Caller<'_, Task>, which: i32, np: i32, nl: i32, vp: i32, vl: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let name = slice(mem, np, nl)?;
            let value = slice(mem, vp, vl)?;
            let Some(msg) = Which::from_i32(which).and_then(|w| t.msgs[w as usize].as_mut()) else {
                return Ok(-1);
            };
            if !valid_name(name) || !valid_value(value) {
                return Ok(-2);
            }
            msg.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            msg.headers.push((name.to_vec(), value.to_vec()));
            msg.headers_changed = true;
            Ok(0)
        },
    )?;
    l.func_wrap(
        M,
        "header_append",
        |mut c: Caller<'_, Task>, which: i32, lp: i32, ll: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let line = slice(mem, lp, ll)?;
            let Some(msg) = Which::from_i32(which).and_then(|w| t.msgs[w as usize].as_mut()) else {
                return Ok(-1);
            };
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Ok(-2);
            };
            let name = &line[..colon];
            let value = line[colon + 1..].trim_ascii_start();
            if !valid_name(name) || !valid_value(value) {
                return Ok(-2);
            }
            msg.headers.push((name.to_vec(), value.to_vec()));
            msg.headers_changed = true;
            Ok(0)
        },
    )?;
    l.func_wrap(
        M,
        "header_unset",
        |mut c: Caller<'_, Task>, which: i32, np: i32, nl: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let name = slice(mem, np, nl)?;
            let Some(msg) = Which::from_i32(which).and_then(|w| t.msgs[w as usize].as_mut()) else {
                return Ok(-1);
            };
            let before = msg.headers.len();
            msg.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            if msg.headers.len() != before {
                msg.headers_changed = true;
            }
            Ok(0)
        },
    )?;
    l.func_wrap(
        M,
        "field_get",
        |mut c: Caller<'_, Task>, which: i32, field: i32, op: i32, oc: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            range(mem.len(), op, oc)?;
            let Some(msg) = Which::from_i32(which).and_then(|w| t.msgs[w as usize].as_mut()) else {
                return Ok(-1);
            };
            let Some(v) = msg.field_mut(field) else {
                return Ok(-2);
            };
            put(mem, op, oc, v)
        },
    )?;
    l.func_wrap(
        M,
        "field_set",
        |mut c: Caller<'_, Task>, which: i32, field: i32, vp: i32, vl: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let value = slice(mem, vp, vl)?;
            let Some(msg) = Which::from_i32(which).and_then(|w| t.msgs[w as usize].as_mut()) else {
                return Ok(-1);
            };
            if !valid_value(value) || (field != 3 && (value.is_empty() || value.contains(&b' '))) {
                return Ok(-2);
            }
            let Some(f) = msg.field_mut(field) else {
                return Ok(-2);
            };
            f.clear();
            f.extend_from_slice(value);
            msg.fields_changed = true;
            Ok(0)
        },
    )?;
    l.func_wrap(M, "status_get", |c: Caller<'_, Task>, which: i32| -> i32 {
        Which::from_i32(which)
            .and_then(|w| c.data().msgs[w as usize].as_ref())
            .map_or(-1, |m| i32::from(m.status))
    })?;
    l.func_wrap(
        M,
        "status_set",
        |mut c: Caller<'_, Task>, which: i32, status: i32| -> i32 {
            if !(100..=999).contains(&status) {
                return -2;
            }
            match Which::from_i32(which).and_then(|w| c.data_mut().msgs[w as usize].as_mut()) {
                Some(m) => {
                    m.status = status as u16;
                    m.fields_changed = true;
                    0
                }
                None => -1,
            }
        },
    )?;
    l.func_wrap(
        M,
        "decide",
        |mut c: Caller<'_, Task>, what: i32, status: i32, rp: i32, rl: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let reason = slice(mem, rp, rl)?;
            let d = match what {
                1 => {
                    if !(100..=999).contains(&status) || !valid_value(reason) {
                        return Ok(-2);
                    }
                    Decision::Synth {
                        status: status as u16,
                        reason: reason.to_vec(),
                    }
                }
                2 => Decision::Pass,
                3 => Decision::Hash,
                4 => Decision::Pipe,
                5 => Decision::Purge,
                6 => Decision::Restart,
                _ => return Ok(-2),
            };
            t.decision = Some(d);
            Ok(0)
        },
    )?;
    l.func_wrap(
        M,
        "forge",
        |mut c: Caller<'_, Task>,
         cacheable: i32,
         status: i32,
         tp: i32,
         tl: i32,
         bp: i32,
         bl: i32|
         -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let ctype = slice(mem, tp, tl)?;
            if !(100..=999).contains(&status) || !valid_value(ctype) {
                return Ok(-2);
            }
            let body = slice(mem, bp, bl)?;
            t.decision = Some(Decision::Forge(Forged {
                cacheable: cacheable != 0,
                status: status as u16,
                content_type: ctype.to_vec(),
                body: body.to_vec(),
            }));
            Ok(0)
        },
    )?;
    l.func_wrap(
        M,
        "backend",
        |mut c: Caller<'_, Task>, np: i32, nl: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let name = std::str::from_utf8(slice(mem, np, nl)?)
                .map_err(|_| format_err!("backend name is not UTF-8"))?;
            let program = t
                .program
                .as_ref()
                .ok_or_else(|| format_err!("backend chosen while the tenant initialises"))?;
            if !program.allow_backend(name) {
                return Ok(-3);
            }
            t.effects.backend = Some(name.to_string());
            Ok(0)
        },
    )?;
    l.func_wrap(
        M,
        "hash_data",
        |mut c: Caller<'_, Task>, p: i32, n: i32| -> Result<()> {
            let (mem, t) = parts(&mut c)?;
            let d = slice(mem, p, n)?.to_vec();
            t.effects.hash_data.push(d);
            Ok(())
        },
    )?;
    l.func_wrap(M, "set_ttl", |mut c: Caller<'_, Task>, secs: f64| -> i32 {
        if !secs.is_finite() {
            return -2;
        }
        c.data_mut().effects.ttl = Some(secs);
        0
    })?;
    l.func_wrap(M, "set_uncacheable", |mut c: Caller<'_, Task>, f: i32| {
        c.data_mut().effects.uncacheable = Some(f != 0);
    })?;
    l.func_wrap(
        M,
        "ban",
        |mut c: Caller<'_, Task>, p: i32, n: i32| -> Result<()> {
            let (mem, t) = parts(&mut c)?;
            let d = slice(mem, p, n)?.to_vec();
            t.effects.bans.push(d);
            Ok(())
        },
    )?;
    l.func_wrap(
        M,
        "log",
        |mut c: Caller<'_, Task>, p: i32, n: i32| -> Result<()> {
            let (mem, t) = parts(&mut c)?;
            if t.effects.logs.len() < 256 {
                let d = slice(mem, p, n)?.to_vec();
                t.effects.logs.push(d);
            }
            Ok(())
        },
    )?;
    l.func_wrap(
        M,
        "regex_compile",
        |mut c: Caller<'_, Task>, p: i32, n: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            if !t.booting {
                return Err(format_err!(
                    "regex_compile called outside main: patterns are compiled once, at load"
                ));
            }
            if t.boot_regexes.len() >= t.max_regex {
                return Ok(-3);
            }
            let Ok(pat) = std::str::from_utf8(slice(mem, p, n)?) else {
                return Ok(-2);
            };
            match regex::bytes::Regex::new(pat) {
                Ok(r) => {
                    t.boot_regexes.push(r);
                    Ok(t.boot_regexes.len() as i32 - 1)
                }
                Err(_) => Ok(-2),
            }
        },
    )?;
    l.func_wrap(
        M,
        "regex_match",
        |mut c: Caller<'_, Task>, id: i32, p: i32, n: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let subject = slice(mem, p, n)?;
            Ok(match t.regex(id) {
                Some(r) => i32::from(r.is_match(subject)),
                None => -1,
            })
        },
    )?;
    l.func_wrap(
        M,
        "regex_subst",
        |mut c: Caller<'_, Task>,
         id: i32,
         sp: i32,
         sl: i32,
         tp: i32,
         tl: i32,
         all: i32,
         op: i32,
         oc: i32|
         -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let Some(r) = t.regex(id) else {
                return Ok(-1);
            };
            let subject = slice(mem, sp, sl)?;
            let tmpl = slice(mem, tp, tl)?;
            let out = if all != 0 {
                r.replace_all(subject, tmpl)
            } else {
                r.replace(subject, tmpl)
            }
            .into_owned();
            put(mem, op, oc, &out)
        },
    )?;
    l.func_wrap(
        M,
        "sha256",
        |mut c: Caller<'_, Task>, p: i32, n: i32, op: i32| -> Result<()> {
            let (mem, _) = parts(&mut c)?;
            let d = sha2::Sha256::digest(slice(mem, p, n)?);
            put(mem, op, 32, &d)?;
            Ok(())
        },
    )?;
    l.func_wrap(
        M,
        "base64_encode",
        |mut c: Caller<'_, Task>, p: i32, n: i32, op: i32, oc: i32| -> Result<i32> {
            let (mem, _) = parts(&mut c)?;
            let mut e = Vec::new();
            let data = slice(mem, p, n)?;
            lacquer_http::base64::encode_into(
                &mut e,
                data,
                lacquer_http::base64::STANDARD,
                Some(b'='),
            );
            put(mem, op, oc, &e)
        },
    )?;
    l.func_wrap(
        M,
        "base64_decode",
        |mut c: Caller<'_, Task>, p: i32, n: i32, op: i32, oc: i32| -> Result<i32> {
            let (mem, _) = parts(&mut c)?;
            let data = slice(mem, p, n)?;
            match lacquer_http::base64::decode(data, lacquer_http::base64::STANDARD, Some(b'=')) {
                Ok(d) => put(mem, op, oc, &d),
                Err(_) => Ok(-2),
            }
        },
    )?;
    l.func_wrap(
        M,
        "arg",
        |mut c: Caller<'_, Task>, op: i32, oc: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let a = std::mem::take(&mut t.arg);
            let n = put(mem, op, oc, &a);
            t.arg = a;
            n
        },
    )?;
    l.func_wrap(
        M,
        "result",
        |mut c: Caller<'_, Task>, i: i32, p: i32, n: i32| -> Result<i32> {
            let (mem, t) = parts(&mut c)?;
            let Some(i) = usize::try_from(i).ok().filter(|&i| i < RESULTS) else {
                return Ok(-3);
            };
            let v = slice(mem, p, n)?.to_vec();
            if t.results.len() <= i {
                t.results.resize(i + 1, Vec::new());
            }
            t.results[i] = v;
            Ok(0)
        },
    )?;
    Ok(())
}

impl Task {
    fn regex(&self, id: i32) -> Option<&regex::bytes::Regex> {
        let id = usize::try_from(id).ok()?;
        match &self.program {
            Some(p) => p.regexes.get(id),
            None => self.boot_regexes.get(id),
        }
    }
}
