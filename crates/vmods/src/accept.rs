//! `vmod_accept` (varnish-modules): sanitises `Accept*` headers to one of
//! a list of known values, else a fallback, so that the cache keeps one
//! variant per value instead of one per client spelling.
//!
//! `accept.rule(fallback)` makes a rule; `.add()`/`.remove()` edit its
//! list of valid values (compared without regard to case, as the
//! module of varnish-modules 0.20 does); `.filter(header)`
//! reads the header as a comma-separated list of `value;param=x` elements
//! and answers the valid value with the highest `q` (the first of equals;
//! `q=0` never wins), or the fallback when none is valid or the header
//! does not parse. Only a first parameter named `q` is a weight, and its
//! value must start with `0` or `1` and lie in 0..=1, as the C module
//! reads it.

use std::sync::Mutex;

use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::{AnyObj, ClassImpl, Env, MethodImpl, ModuleImpl, Obj, this};

const DECL: &str = r#"
$Module accept
$Object rule(STRING string)
$Method VOID .add(STRING string)
$Method VOID .remove(STRING string)
$Method STRING .filter(STRING string)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[],
    classes: &[ClassImpl {
        name: "rule",
        ctor: new_rule,
        methods: &[
            ("add", rule_add as MethodImpl),
            ("remove", rule_remove),
            ("filter", rule_filter),
        ],
    }],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// One rule: the fallback and the valid values, the latest added first.
struct Rule {
    fallback: Vec<u8>,
    valid: Mutex<Vec<Vec<u8>>>,
}

fn new_rule(_: &Env, _: &mut dyn Context, _: &str, a: &Args<'_>) -> Result<Obj, String> {
    Ok(std::sync::Arc::new(Rule {
        fallback: a.str(0)?.unwrap_or_default().to_vec(),
        valid: Mutex::new(Vec::new()),
    }))
}

fn valid(r: &Rule) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
    r.valid.lock().unwrap_or_else(|e| e.into_inner())
}

fn rule_add(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    if let Some(s) = a.str(0)? {
        let mut v = valid(this::<Rule>(o));
        if !v.iter().any(|x| x.eq_ignore_ascii_case(s)) {
            v.insert(0, s.to_vec());
        }
    }
    Ok(Value::Null)
}

fn rule_remove(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    if let Some(s) = a.str(0)? {
        valid(this::<Rule>(o)).retain(|x| !x.eq_ignore_ascii_case(s));
    }
    Ok(Value::Null)
}

fn rule_filter(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let rule = this::<Rule>(o);
    let list = valid(rule);
    let header = a.str(0)?;
    let chosen = header
        .and_then(|h| choose(h, &list))
        .unwrap_or(&rule.fallback);
    Ok(Value::Str(bytes::Bytes::copy_from_slice(chosen)))
}

/// The valid value `header` selects, `None` for the fallback.
fn choose<'v>(header: &[u8], valid: &'v [Vec<u8>]) -> Option<&'v [u8]> {
    let mut best: Option<(&'v [u8], f64)> = None;
    let mut lx = Lexer { s: header, at: 0 };
    loop {
        match lx.element() {
            Element::End => return best.map(|(v, _)| v),
            Element::Bad => return None,
            Element::Item(value, q) => {
                if let Some(v) = valid.iter().find(|v| v.eq_ignore_ascii_case(value))
                    && q > best.map_or(0.0, |(_, b)| b)
                {
                    best = Some((v, q));
                }
            }
        }
    }
}

/// One element of the header list.
enum Element<'a> {
    /// A value and its weight.
    Item(&'a [u8], f64),
    /// The end of the header.
    End,
    /// Something that does not parse: the whole header is refused.
    Bad,
}

/// The tokens of the header: runs of whitespace, `,`, `;`, `=`, and
/// strings of anything else.
#[derive(PartialEq)]
enum Tok<'a> {
    Ws,
    End,
    Comma,
    Semi,
    Eq,
    Str(&'a [u8]),
}

struct Lexer<'a> {
    s: &'a [u8],
    at: usize,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

impl<'a> Lexer<'a> {
    fn next(&mut self) -> Tok<'a> {
        let rest = &self.s[self.at..];
        let Some(&c) = rest.first() else {
            return Tok::End;
        };
        let n = match c {
            b',' | b';' | b'=' => 1,
            c if is_space(c) => rest.iter().take_while(|c| is_space(**c)).count(),
            _ => rest
                .iter()
                .take_while(|c| !matches!(c, b',' | b';' | b'=') && !is_space(**c))
                .count(),
        };
        self.at += n;
        match c {
            b',' => Tok::Comma,
            b';' => Tok::Semi,
            b'=' => Tok::Eq,
            c if is_space(c) => Tok::Ws,
            _ => Tok::Str(&rest[..n]),
        }
    }

    fn next_after_ws(&mut self) -> Tok<'a> {
        match self.next() {
            Tok::Ws => self.next(),
            t => t,
        }
    }

    fn element(&mut self) -> Element<'a> {
        let value = match self.next_after_ws() {
            Tok::End => return Element::End,
            Tok::Str(v) => v,
            _ => return Element::Bad,
        };
        let mut q = 1.0;
        let mut first = true;
        loop {
            match self.next_after_ws() {
                Tok::End | Tok::Comma => return Element::Item(value, q),
                Tok::Semi => {}
                _ => return Element::Bad,
            }
            let Tok::Str(name) = self.next_after_ws() else {
                return Element::Bad;
            };
            if self.next() != Tok::Eq {
                return Element::Bad;
            }
            let start = self.at;
            let Tok::Str(v) = self.next() else {
                return Element::Bad;
            };
            if first && name == b"q" {
                let Some((w, used)) = weight(v) else {
                    return Element::Bad;
                };
                q = w;
                // What follows the number is read as the next token.
                self.at = start + used;
            }
            first = false;
        }
    }
}

/// A `q` value as the C module reads it (`strtod` on a string that must
/// start with `0` or `1`, not hexadecimal, within 0..=1): the weight and
/// how many bytes the number took.
fn weight(v: &[u8]) -> Option<(f64, usize)> {
    if !matches!(v.first(), Some(b'0' | b'1')) || matches!(v.get(1), Some(b'x' | b'X')) {
        return None;
    }
    let digits = |from: usize| v[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut n = digits(0);
    if v.get(n) == Some(&b'.') {
        n += 1 + digits(n + 1);
    }
    if matches!(v.get(n), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(v.get(n + 1), Some(b'+' | b'-')));
        let exp = digits(n + 1 + sign);
        if exp > 0 {
            n += 1 + sign + exp;
        }
    }
    let q: f64 = std::str::from_utf8(&v[..n]).ok()?.parse().ok()?;
    (0.0..=1.0).contains(&q).then_some((q, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(header: &str, valid: &[&str]) -> Option<String> {
        let valid: Vec<Vec<u8>> = valid.iter().map(|v| v.as_bytes().to_vec()).collect();
        choose(header.as_bytes(), &valid).map(|v| String::from_utf8_lossy(v).into_owned())
    }

    #[test]
    fn the_first_valid_value_of_the_highest_weight_wins() {
        let v = ["text/html", "application/json"];
        assert_eq!(
            pick("application/json, text/html", &v).as_deref(),
            Some("application/json")
        );
        assert_eq!(
            pick("a/b, text/html;q=0.5, application/json;q=0.9", &v).as_deref(),
            Some("application/json")
        );
        assert_eq!(
            pick("text/html;q=0, application/json", &v).as_deref(),
            Some("application/json")
        );
        assert_eq!(pick("text/html;q=0", &v), None);
        assert_eq!(
            pick("  application/json  ;  q=1", &v).as_deref(),
            Some("application/json")
        );
        assert_eq!(pick("text/*, */*", &v), None);
        assert_eq!(pick("TEXT/HTML", &v).as_deref(), Some("text/html"));
        assert_eq!(pick("text/html,", &v).as_deref(), Some("text/html"));
    }

    #[test]
    fn a_header_that_does_not_parse_selects_the_fallback() {
        let v = ["text/html"];
        assert_eq!(pick("text/html, , x", &v), None);
        assert_eq!(pick("text/html;q=2", &v), None);
        assert_eq!(pick("text/html;q=0x1", &v), None);
        assert_eq!(pick("text/html;q=.5", &v), None);
        assert_eq!(pick("text/html;q=0.5abc", &v), None);
        assert_eq!(pick("text/html;level", &v), None);
        // Only a first parameter is a weight.
        assert_eq!(
            pick("text/html;level=1;q=zz", &v).as_deref(),
            Some("text/html")
        );
    }

    #[test]
    fn weights_read_as_strtod() {
        assert_eq!(weight(b"0.5"), Some((0.5, 3)));
        assert_eq!(weight(b"1."), Some((1.0, 2)));
        assert_eq!(weight(b"1e-1x"), Some((0.1, 4)));
        assert_eq!(weight(b"1e"), Some((1.0, 1)));
        assert_eq!(weight(b"1.5"), None);
        assert_eq!(weight(b"2"), None);
    }
}
