//! How a parameter's text is read and refused, as varnishd 7.1's
//! `mgt_param_tweak.c` does it: the number syntaxes (a lenient decimal for
//! durations and floats, C's `strtoul` for integers, `VNUM_2bytes` for
//! sizes, comma/blank separated `+bit`/`-bit` lists), the bounds as
//! varnishd spells them (`0.25k`, `0.000`, `16372b`), and the texts of
//! every refusal. `param.set` replies and `-p` startup errors carry these
//! texts, and tests and scripts written for varnishd match on them.
//!
//! One deliberate difference (tests/diff/DEVIATIONS.md): a duration with
//! a unit (`1h`, `2m`, `500ms`) is read with its unit, where varnishd 7.1
//! reads the number and ignores what follows.

use super::params::{Kind, Param, ParamError, Value};

/// Varnishd's spelling of the static bounds of each parameter (its
/// `parspec` table, as `varnishd -x parameter` prints it). Bounds that
/// follow another parameter's value are worked out by
/// [`super::params::ParamSet`] instead.
static BOUNDS: &[(&str, Option<&str>, Option<&str>)] = &[
    ("acceptor_sleep_decay", Some("0"), Some("1")),
    ("acceptor_sleep_incr", Some("0.000"), Some("1.000")),
    ("acceptor_sleep_max", Some("0.000"), Some("10.000")),
    ("backend_idle_timeout", Some("1.000"), None),
    ("backend_local_error_holddown", Some("0.000"), None),
    ("backend_remote_error_holddown", Some("0.000"), None),
    ("ban_cutoff", Some("0"), None),
    ("ban_lurker_age", Some("0.000"), None),
    ("ban_lurker_batch", Some("1"), None),
    ("ban_lurker_holdoff", Some("0.000"), None),
    ("ban_lurker_sleep", Some("0.000"), None),
    ("between_bytes_timeout", Some("0.000"), None),
    ("cli_limit", Some("128b"), Some("99999999b")),
    ("cli_timeout", Some("0.000"), None),
    ("clock_skew", Some("0"), None),
    ("clock_step", Some("0.000"), None),
    ("connect_timeout", Some("0.000"), None),
    ("critbit_cooloff", Some("60.000"), Some("254.000")),
    ("default_grace", Some("0.000"), None),
    ("default_keep", Some("0.000"), None),
    ("default_ttl", Some("0.000"), None),
    ("fetch_chunksize", Some("4k"), None),
    ("fetch_maxchunksize", Some("64k"), None),
    ("first_byte_timeout", Some("0.000"), None),
    ("gzip_buffer", Some("2k"), None),
    ("gzip_level", Some("0"), Some("9")),
    ("gzip_memlevel", Some("1"), Some("9")),
    ("h2_header_table_size", Some("0b"), None),
    (
        "h2_initial_window_size",
        Some("65535b"),
        Some("2147483647b"),
    ),
    ("h2_max_concurrent_streams", Some("0"), None),
    ("h2_max_frame_size", Some("16k"), Some("16777215b")),
    ("h2_max_header_list_size", Some("0b"), None),
    ("h2_rx_window_increment", Some("1M"), Some("1G")),
    ("h2_rx_window_low_water", Some("65535b"), Some("1G")),
    ("http1_iovs", Some("5"), Some("1024")),
    ("http_max_hdr", Some("32"), Some("65535")),
    ("http_req_hdr_len", Some("40b"), None),
    ("http_req_size", Some("0.25k"), None),
    ("http_resp_hdr_len", Some("40b"), None),
    ("http_resp_size", Some("0.25k"), None),
    ("idle_send_timeout", Some("0.000"), None),
    ("listen_depth", Some("0"), None),
    ("lru_interval", Some("0.000"), None),
    ("max_esi_depth", Some("0"), None),
    ("max_restarts", Some("0"), None),
    ("max_retries", Some("0"), None),
    ("max_vcl", Some("0"), None),
    ("max_vcl_handling", Some("0"), Some("2")),
    ("nuke_limit", Some("0"), None),
    ("pcre2_depth_limit", Some("1"), None),
    ("pcre2_match_limit", Some("1"), None),
    ("ping_interval", Some("0"), None),
    ("pipe_sess_max", Some("0"), None),
    ("pipe_timeout", Some("0.000"), None),
    ("rush_exponent", Some("2"), None),
    ("send_timeout", Some("0.000"), None),
    ("shortlived", Some("0.000"), None),
    ("tcp_keepalive_intvl", Some("1.000"), Some("100.000")),
    ("tcp_keepalive_probes", Some("1"), Some("100")),
    ("tcp_keepalive_time", Some("1.000"), Some("7200.000")),
    ("thread_pool_add_delay", Some("0.000"), None),
    ("thread_pool_destroy_delay", Some("0.010"), None),
    ("thread_pool_fail_delay", Some("0.010"), None),
    ("thread_pool_stack", Some("16k"), None),
    ("thread_pool_timeout", Some("10.000"), None),
    ("thread_pool_watchdog", Some("0.100"), None),
    ("thread_pools", Some("1"), Some("32")),
    ("thread_queue_limit", Some("0"), None),
    ("thread_stats_rate", Some("0"), None),
    ("timeout_idle", Some("0.000"), None),
    ("timeout_linger", Some("0.000"), None),
    ("vary_notice", Some("1"), None),
    ("vcl_cooldown", Some("1.000"), None),
    ("vsl_reclen", Some("16b"), Some("16372b")),
    ("vsl_space", Some("1M"), Some("4G")),
    ("vsm_free_cooldown", Some("10.000"), Some("600.000")),
    ("workspace_backend", Some("1k"), None),
    ("workspace_client", Some("9k"), None),
    ("workspace_session", Some("384b"), None),
    ("workspace_thread", Some("0.25k"), Some("8k")),
];

/// The bounds a value is checked against, as texts, with the reason
/// varnishd gives for a bound another parameter sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bounds {
    pub min: Option<String>,
    pub max: Option<String>,
    pub min_reason: Option<&'static str>,
    pub max_reason: Option<&'static str>,
}

/// The static bounds of a parameter, in varnishd's spelling.
pub fn static_bounds(name: &str) -> Bounds {
    let row = BOUNDS.iter().find(|(n, _, _)| *n == name);
    Bounds {
        min: row.and_then(|r| r.1).map(str::to_string),
        max: row.and_then(|r| r.2).map(str::to_string),
        ..Bounds::default()
    }
}

fn refused(p: &Param, value: &str, text: impl Into<String>) -> ParamError {
    ParamError::Refused {
        name: p.name.to_string(),
        value: value.to_string(),
        text: text.into(),
    }
}

/// A decimal as varnishd 7.1 reads a duration or float parameter: blanks,
/// an optional `-`, up to twelve digits, optionally a point and digits
/// (three are kept); whatever follows is ignored. `Err` is the reason.
pub fn parse_decimal(s: &str) -> Result<f64, &'static str> {
    let t = s.trim_start_matches([' ', '\t']);
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let int_len = t.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &t[int_len..];
    let frac: &str = match rest.strip_prefix('.') {
        Some(f) => &f[..f.bytes().take_while(u8::is_ascii_digit).count()],
        None => "",
    };
    if int_len == 0 && frac.is_empty() {
        return Err("Invalid number");
    }
    if int_len > 12 {
        return Err("Too many digits");
    }
    let kept = &frac[..frac.len().min(3)];
    let text = format!(
        "{}.{}",
        if int_len == 0 { "0" } else { &t[..int_len] },
        if kept.is_empty() { "0" } else { kept }
    );
    let v: f64 = text.parse().map_err(|_| "Invalid number")?;
    Ok(if neg { -v } else { v })
}

/// A duration: [`parse_decimal`], except that a VCL unit right after the
/// number (`ms s m h d w y`) scales it.
fn parse_duration(s: &str) -> Result<f64, &'static str> {
    let v = parse_decimal(s)?;
    let t = s.trim();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(t.len());
    let mult = match t[num_end..].trim() {
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        "y" => 365.0 * 86_400.0,
        _ => 1.0,
    };
    Ok(v * mult)
}

/// C's `strtoul(s, &end, 0)` stored in an `unsigned`: blanks, a sign, a
/// `0x` (hex) or `0` (octal) prefix; the whole text must be used. A
/// negative number wraps as C's does.
pub fn strtoul32(s: &str) -> Option<u32> {
    let t = s.trim_start_matches([' ', '\t', '\n']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    if digits.is_empty() && radix != 8 {
        return None;
    }
    let mut v: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        // strtoul saturates at ULONG_MAX.
        v = v
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(d)))
            .unwrap_or(u64::MAX);
    }
    let v = if neg { v.wrapping_neg() } else { v };
    Some(v as u32)
}

/// A byte size, as `VNUM_2bytes` reads it (blanks around it allowed).
fn parse_bytes(s: &str) -> Result<u64, &'static str> {
    let t = s.trim();
    // A decimal point needs a digit after it (`64.k` is no number).
    if let Some(i) = t.find('.')
        && !t[i + 1..].starts_with(|c: char| c.is_ascii_digit())
    {
        return Err("Invalid number");
    }
    lacquer_storage::spec::vnum_bytes(t)
}

/// varnishd's `fmt_bytes`: exact units where they divide, else two
/// decimals of the next unit up (`0.25k`, `1.50M`), else bytes.
pub fn fmt_bytes(t: u64) -> String {
    if t == 0 || t & 0xff != 0 {
        return format!("{t}b");
    }
    let mut t = t;
    for unit in ['k', 'M', 'G', 'T', 'P', 'E'] {
        if t & 0x300 != 0 {
            return format!("{:.2}{unit}", t as f64 / 1024.0);
        }
        t /= 1024;
        if t & 0xff != 0 {
            return format!("{t}{unit}");
        }
    }
    "(bogus number)".to_string()
}

/// Reads `text` for `p` within `b`, with varnishd's refusal texts.
pub fn parse(
    p: &Param,
    text: &str,
    current: Option<&Value>,
    b: &Bounds,
) -> Result<Value, ParamError> {
    let with = |r: Option<&str>| r.map_or(String::new(), |r| format!(" ({r})"));
    match p.kind {
        Kind::Bool => match super::params::parse_bool(text) {
            Some(v) => Ok(Value::Bool(v)),
            None => Err(refused(p, text, "use \"on\" or \"off\"\n")),
        },
        Kind::Duration { .. } | Kind::Float { .. } => {
            let is_dur = matches!(p.kind, Kind::Duration { .. });
            let read = if is_dur {
                parse_duration
            } else {
                parse_decimal
            };
            let v = read(text).map_err(|e| refused(p, text, format!("{e} ({text})\n")))?;
            if let Some(m) = &b.min
                && parse_decimal(m).is_ok_and(|m| v < m)
            {
                return Err(refused(
                    p,
                    text,
                    format!("Must be greater or equal to {m}\n"),
                ));
            }
            if let Some(m) = &b.max
                && parse_decimal(m).is_ok_and(|m| v > m)
            {
                return Err(refused(
                    p,
                    text,
                    format!("Must be less than or equal to {m}\n"),
                ));
            }
            Ok(if is_dur {
                Value::Duration(v)
            } else {
                Value::Float(v)
            })
        }
        Kind::Uint { .. } => {
            let v = read_uint(p, text, b)?;
            Ok(Value::Uint(if v == u32::MAX {
                u64::MAX
            } else {
                u64::from(v)
            }))
        }
        Kind::Bytes { .. } => {
            let v = parse_bytes(text).map_err(|e| {
                refused(
                    p,
                    text,
                    format!(
                        "Could not convert to bytes.\n{e}\n  Try something like '80k' or '120M'\n"
                    ),
                )
            })?;
            if let Some(m) = &b.max
                && parse_bytes(m).is_ok_and(|m| v > m)
            {
                return Err(refused(
                    p,
                    text,
                    format!("Must be no more than {m}{}\n\n", with(b.max_reason)),
                ));
            }
            if let Some(m) = &b.min
                && parse_bytes(m).is_ok_and(|m| v < m)
            {
                return Err(refused(
                    p,
                    text,
                    format!("Must be at least {m}{}\n", with(b.min_reason)),
                ));
            }
            Ok(Value::Bytes(v))
        }
        Kind::Text => Ok(Value::Text(text.to_string())),
        Kind::Bits { names } => parse_bits(p, text, names, current),
        Kind::Pool => {
            let av = split_words(text);
            if av.len() < 3 {
                return Err(refused(
                    p,
                    text,
                    "Three fields required: min_pool, max_pool and max_age\n",
                ));
            }
            let none = Bounds::default();
            // A field's refusal names the whole argument, as varnishd's.
            let whole = |e: ParamError| match e {
                ParamError::Refused { name, text: t, .. } => ParamError::Refused {
                    name,
                    value: text.to_string(),
                    text: t,
                },
                other => other,
            };
            let lo = read_uint(p, av[0], &none).map_err(whole)?;
            let hi = read_uint(p, av[1], &none).map_err(whole)?;
            let age =
                parse_decimal(av[2]).map_err(|e| refused(p, text, format!("{e} ({})\n", av[2])))?;
            if age < 0.0 {
                return Err(refused(p, text, "Must be greater or equal to 0\n"));
            }
            if age > 1_000_000.0 {
                return Err(refused(p, text, "Must be less than or equal to 1000000\n"));
            }
            if lo > hi {
                return Err(refused(
                    p,
                    text,
                    "min_pool cannot be larger than max_pool\n",
                ));
            }
            Ok(Value::Pool(u64::from(lo), u64::from(hi), age))
        }
    }
}

/// varnishd's `tweak_generic_uint`, refusals included (an empty text with
/// a bound is refused as an "Illegal" bound, as varnishd does).
fn read_uint(p: &Param, text: &str, b: &Bounds) -> Result<u32, ParamError> {
    let with = |r: Option<&str>| r.map_or(String::new(), |r| format!(" ({r})"));
    let bound = |m: &Option<String>| m.as_deref().and_then(strtoul32);
    if let Some(m) = &b.min
        && (text.is_empty() || bound(&b.min).is_none())
    {
        return Err(refused(p, text, format!("Illegal Min: {m}\n")));
    }
    if let Some(m) = &b.max
        && (text.is_empty() || bound(&b.max).is_none())
    {
        return Err(refused(p, text, format!("Illegal Max: {m}\n")));
    }
    let v = if text.eq_ignore_ascii_case("unlimited") {
        u32::MAX
    } else {
        strtoul32(text).ok_or_else(|| refused(p, text, format!("Not a number ({text})\n")))?
    };
    if let (Some(m), Some(min)) = (&b.min, bound(&b.min))
        && v < min
    {
        return Err(refused(
            p,
            text,
            format!("Must be at least {m}{}\n", with(b.min_reason)),
        ));
    }
    if let (Some(m), Some(max)) = (&b.max, bound(&b.max))
        && v > max
    {
        return Err(refused(
            p,
            text,
            format!("Must be no more than {m}{}\n", with(b.max_reason)),
        ));
    }
    Ok(v)
}

/// varnishd's `VAV_Parse(.., ARGV_COMMA)` words: blanks and commas
/// separate, and an empty field between commas (or after a last comma)
/// is a word of its own.
fn split_words(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim_start_matches([' ', '\t', '\n']);
    while !rest.is_empty() {
        let end = rest.find([' ', '\t', '\n', ',']).unwrap_or(rest.len());
        out.push(&rest[..end]);
        rest = &rest[end..];
        rest = rest.trim_start_matches([' ', '\t', '\n']);
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start_matches([' ', '\t', '\n']);
            if rest.is_empty() {
                out.push("");
            }
        }
    }
    out
}

/// What a bit list's refusal calls its bits.
fn bit_desc(name: &str) -> &'static str {
    match name {
        "feature" => "feature bit",
        "debug" | "deprecated_dummy" => "debug bit",
        "experimental" => "experimental bit",
        _ => "VSL tag",
    }
}

/// A `+bit`/`-bit` list, `default`, or (except for `vsl_mask`) `none`,
/// applied to `current`. Bit names match without regard to case.
fn parse_bits(
    p: &Param,
    text: &str,
    names: &[&str],
    current: Option<&Value>,
) -> Result<Value, ParamError> {
    let tags = names.is_empty();
    let canon = |n: &str| -> Option<String> {
        if tags {
            lacquer_vsl::Tag::from_name(n).map(|t| t.name().to_string())
        } else {
            names
                .iter()
                .find(|x| x.eq_ignore_ascii_case(n))
                .map(|x| x.to_string())
        }
    };
    let mut set: Vec<String> = if text == "default" {
        return default_bits(p, names);
    } else if text == "none" && !tags {
        return Ok(Value::Bits(Vec::new()));
    } else {
        match current {
            Some(Value::Bits(b)) => b.clone(),
            _ => Vec::new(),
        }
    };
    for w in split_words(text) {
        let (add, bit) = match w.as_bytes().first() {
            Some(b'+') => (true, &w[1..]),
            Some(b'-') => (false, &w[1..]),
            _ => return Err(refused(p, text, format!("Missing '+' or '-' ({w})\n"))),
        };
        let Some(bit) = canon(bit) else {
            return Err(refused(
                p,
                text,
                format!("Unknown {} ({w})\n", bit_desc(p.name)),
            ));
        };
        set.retain(|n| *n != bit);
        // vsl_mask lists the masked tags: "-Tag" masks it.
        if add != tags {
            set.push(bit);
        }
    }
    set.sort_by_key(|n| {
        if tags {
            lacquer_vsl::Tag::from_name(n).map_or(usize::MAX, |t| t as usize)
        } else {
            names.iter().position(|x| x == n).unwrap_or(usize::MAX)
        }
    });
    Ok(Value::Bits(set))
}

/// The default of a bits parameter (its table default read as a list).
fn default_bits(p: &Param, names: &[&str]) -> Result<Value, ParamError> {
    if p.default == "none" {
        return Ok(Value::Bits(Vec::new()));
    }
    parse_bits(p, p.default, names, Some(&Value::Bits(Vec::new())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::params::{PARAMS, lookup};

    #[test]
    fn decimals_read_as_varnishd_reads_them() {
        assert_eq!(parse_decimal("1x"), Ok(1.0));
        assert_eq!(parse_decimal(" 5"), Ok(5.0));
        assert_eq!(parse_decimal(".5"), Ok(0.5));
        assert_eq!(parse_decimal("1e3"), Ok(1.0));
        assert_eq!(parse_decimal("0.12345"), Ok(0.123));
        assert_eq!(parse_decimal("-.5"), Ok(-0.5));
        assert_eq!(parse_decimal("+5"), Err("Invalid number"));
        assert_eq!(parse_decimal("."), Err("Invalid number"));
        assert_eq!(parse_decimal(""), Err("Invalid number"));
        assert_eq!(parse_decimal("1234567890123"), Err("Too many digits"));
        assert_eq!(parse_duration("2m"), Ok(120.0));
        assert_eq!(parse_duration("500ms"), Ok(0.5));
        assert_eq!(parse_bytes("64.k"), Err("Invalid number"));
        assert_eq!(parse_bytes(" 1.5M "), Ok(1536 * 1024));
    }

    #[test]
    fn integers_read_as_strtoul() {
        assert_eq!(strtoul32("0x10"), Some(16));
        assert_eq!(strtoul32("010"), Some(8));
        assert_eq!(strtoul32("0"), Some(0));
        assert_eq!(strtoul32(" +7"), Some(7));
        assert_eq!(strtoul32("-1"), Some(u32::MAX));
        assert_eq!(strtoul32("4294967296"), Some(0));
        assert_eq!(strtoul32("08"), None);
        assert_eq!(strtoul32("0x"), None);
        assert_eq!(strtoul32("1.5"), None);
        assert_eq!(strtoul32(""), None);
    }

    #[test]
    fn bytes_format_as_varnishd() {
        assert_eq!(fmt_bytes(256), "0.25k");
        assert_eq!(fmt_bytes(300), "300b");
        assert_eq!(fmt_bytes(64 * 1024), "64k");
        assert_eq!(fmt_bytes(1536 * 1024), "1.50M");
        assert_eq!(fmt_bytes(256 << 20), "0.25G");
        assert_eq!(fmt_bytes(0), "0b");
    }

    #[test]
    fn words_split_at_commas_and_blanks() {
        assert_eq!(split_words("+a -b"), ["+a", "-b"]);
        assert_eq!(split_words("+a,"), ["+a", ""]);
        assert_eq!(split_words(",+a"), ["", "+a"]);
        assert_eq!(split_words(" 1, 2, 3"), ["1", "2", "3"]);
    }

    /// The spelled bounds and the table's numbers say the same thing.
    #[test]
    fn spelled_bounds_agree_with_the_table() {
        for (name, min, max) in BOUNDS {
            let p = lookup(name).unwrap_or_else(|| panic!("{name} is not a parameter"));
            let num = |t: &str| -> f64 {
                match p.kind {
                    Kind::Bytes { .. } => parse_bytes(t).unwrap() as f64,
                    Kind::Uint { .. } => f64::from(strtoul32(t).unwrap()),
                    _ => parse_decimal(t).unwrap(),
                }
            };
            let (tmin, tmax) = match p.kind {
                Kind::Duration { min, max } | Kind::Float { min, max } => (min, max),
                Kind::Bytes { min, max } => (min.map(|v| v as f64), max.map(|v| v as f64)),
                Kind::Uint { min, max } => (min.map(|v| v as f64), max.map(|v| v as f64)),
                _ => panic!("{name} has bounds but no numeric kind"),
            };
            assert_eq!(min.map(num), tmin, "{name} minimum");
            if *name != "vsl_reclen" {
                assert_eq!(max.map(num), tmax, "{name} maximum");
            }
        }
        assert!(PARAMS.len() > BOUNDS.len());
    }
}
