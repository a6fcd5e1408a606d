//! Macro store and `${...}` expansion, as varnishtest does it.
//!
//! Plain macros are name/value pairs (`${tmpdir}`, `${s1_sock}`, `-D` ones).
//! Function macros take comma-separated arguments: `${date}` gives the
//! current HTTP date and `${string,repeat,N,TEXT}` repeats TEXT N times.
//! An unknown macro is an error unless the test declared
//! `feature ignore_unknown_macro`, in which case it is left as written.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// The macros of one test.
#[derive(Debug, Clone, Default)]
pub struct Macros {
    vars: HashMap<String, String>,
    /// Leave unknown `${...}` references untouched instead of failing.
    pub ignore_unknown: bool,
}

impl Macros {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Define (or redefine) a macro.
    pub fn define(&mut self, name: &str, value: &str) {
        self.vars.insert(name.to_string(), value.to_string());
    }

    /// Forget a macro.
    pub fn undefine(&mut self, name: &str) {
        self.vars.remove(name);
    }

    /// Value of a plain macro.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Expand every `${...}` reference in `text`.
    pub fn expand(&self, text: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        loop {
            let Some(p) = rest.find("${") else {
                out.push_str(rest);
                break;
            };
            let Some(q) = rest[p..].find('}').map(|q| p + q) else {
                out.push_str(rest);
                break;
            };
            out.push_str(&rest[..p]);
            let inner = &rest[p + 2..q];
            match self.lookup(inner)? {
                Some(v) => out.push_str(&v),
                None if self.ignore_unknown => {
                    out.push_str(&rest[p..=q]);
                }
                None => return Err(format!("Macro ${{{inner}}} not found")),
            }
            rest = &rest[q + 1..];
        }
        Ok(out)
    }

    fn lookup(&self, inner: &str) -> Result<Option<String>, String> {
        let args = split_args(inner);
        let name = args.first().map(String::as_str).unwrap_or("");
        match name {
            "date" if args.len() == 1 => Ok(Some(http_date(SystemTime::now()))),
            "string" => string_func(&args[1..]).map(Some),
            _ if args.len() == 1 => Ok(self.vars.get(name).cloned()),
            _ => Ok(None),
        }
    }
}

/// Split function macro arguments on commas; `"..."` groups with backslash
/// escapes are honoured, like varnishtest's argument parser.
fn split_args(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut i = 0;
    let mut quoted = false;
    while i < chars.len() {
        let c = chars[i];
        if quoted {
            if c == '"' {
                quoted = false;
                i += 1;
            } else if c == '\\' {
                let (ch, used) = crate::lexer::backslash(&chars, i);
                cur.push(ch);
                i += used;
            } else {
                cur.push(c);
                i += 1;
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
        i += 1;
    }
    out.push(cur);
    out
}

fn string_func(args: &[String]) -> Result<String, String> {
    match args.first().map(String::as_str) {
        Some("repeat") => {
            if args.len() != 3 {
                return Err("${string,repeat,N,TEXT} needs exactly 2 arguments".into());
            }
            let n: usize = args[1]
                .trim()
                .parse()
                .map_err(|_| format!("${{string,repeat}}: bad count '{}'", args[1]))?;
            Ok(args[2].repeat(n))
        }
        Some(other) => Err(format!("${{string,{other}}}: unknown string function")),
        None => Err("${string} needs a function name".into()),
    }
}

/// Format a time as an RFC 1123 HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`);
/// a clock before 1970 reads as the epoch.
pub fn http_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    lacquer_http::date::format_http_date(secs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn plain_and_unknown() {
        let mut m = Macros::new();
        m.define("a", "1");
        assert_eq!(m.expand("x${a}y${a}").unwrap(), "x1y1");
        assert_eq!(m.expand("${b}").unwrap_err(), "Macro ${b} not found");
        assert_eq!(m.expand("no ${ close").unwrap(), "no ${ close");
        m.ignore_unknown = true;
        assert_eq!(m.expand("${b}-${a}").unwrap(), "${b}-1");
    }

    #[test]
    fn functions() {
        let m = Macros::new();
        assert_eq!(m.expand("${string,repeat,3,ab}").unwrap(), "ababab");
        assert_eq!(m.expand("${string,repeat,2,\" \"}").unwrap(), "  ");
        assert_eq!(m.expand("${string,repeat,2,\"61 \"}").unwrap(), "61 61 ");
        assert!(m.expand("${string,repeat,x,a}").is_err());
        assert!(m.expand("${date}").unwrap().ends_with(" GMT"));
    }

    #[test]
    fn date_format() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
