//! Fuzz target: VCL's regex matcher against the `regex` crate. The first
//! byte gives the pattern's length, the rest is pattern then subject. The
//! fast paths (literals, DFA runs from candidate starts, groups read off the
//! match) must answer `~` and the first `regsub` exactly as the general
//! engine does, and `regsuball` with `\0` must give the subject back.

#![no_main]

use lacquer_vcl::exec::regex::Regex;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (pattern, subject) = rest.split_at(usize::from(n).min(rest.len()));
    let Ok(pattern) = std::str::from_utf8(pattern) else {
        return;
    };
    let Ok(reference) = regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
    else {
        return;
    };
    let re = Regex::new(pattern).expect("the regex crate accepted the pattern");
    assert_eq!(
        re.is_match(subject).expect("no backtracking engine here"),
        reference.is_match(subject),
        "{pattern:?} on {subject:?}"
    );
    let mut first = Vec::new();
    re.substitute(subject, b"<\\0|\\1>", false, &mut first)
        .expect("no backtracking engine here");
    let want = match reference.captures(subject) {
        None => subject.to_vec(),
        Some(c) => {
            let m = c.get(0).expect("group 0");
            let g1 = c.get(1).map_or(&b""[..], |g| g.as_bytes());
            [
                &subject[..m.start()],
                b"<",
                m.as_bytes(),
                b"|",
                g1,
                b">",
                &subject[m.end()..],
            ]
            .concat()
        }
    };
    assert_eq!(first, want, "{pattern:?} on {subject:?}");
    let mut all = Vec::new();
    re.substitute(subject, b"\\0", true, &mut all)
        .expect("no backtracking engine here");
    assert_eq!(all, subject, "{pattern:?} on {subject:?}");
});
