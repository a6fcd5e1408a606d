//! `-j` jail specifications, checked as varnishd checks them.
//!
//! varnishd runs its worker process under unprivileged users chosen by
//! `-j unix[,user=U][,workuser=W][,ccgroup=G]` (`-j none` keeps the
//! invoking user). Lacquer is a single process and does not switch users
//! itself, but it accepts the same arguments and refuses the same mistakes
//! with varnishd's messages, so command lines and their failures carry
//! over; [`Jail::notice`] says what is not applied.

use nix::unistd::{Group, User};

/// varnishd's default jail users.
const JAIL_USER: &str = "varnish";
const JAIL_WORKUSER: &str = "vcache";

/// A checked `-j` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Jail {
    None,
    Unix {
        user: String,
        workuser: String,
        ccgroup: Option<String>,
    },
}

fn user(name: &str) -> Result<User, String> {
    User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| format!("Unix jail: {name} user not found."))
}

/// Parses and checks `-j method[,sub-arg…]` (the argument after `-j`).
pub fn parse_jail(arg: &str) -> Result<Jail, String> {
    let mut parts = arg.split(',');
    let method = parts.next().unwrap_or_default();
    let subs: Vec<&str> = parts.collect();
    match method {
        "none" if subs.is_empty() => Ok(Jail::None),
        "none" => Err("-jnone takes no arguments.".to_string()),
        "unix" => {
            let (mut u, mut w, mut g) = (None, None, None);
            for s in subs {
                if let Some(v) = s.strip_prefix("user=") {
                    u = Some(user(v)?);
                } else if let Some(v) = s.strip_prefix("workuser=") {
                    w = Some(user(v)?);
                } else if let Some(v) = s.strip_prefix("ccgroup=") {
                    let grp = Group::from_name(v).ok().flatten();
                    g = Some(
                        grp.ok_or_else(|| format!("Unix jail: {v} group not found."))?
                            .name,
                    );
                } else {
                    return Err(format!("Unix jail: unknown sub-argument '{s}'"));
                }
            }
            let u = match u {
                Some(u) => u,
                None => user(JAIL_USER)?,
            };
            let w = match w {
                Some(w) => w,
                None => user(JAIL_WORKUSER)?,
            };
            if u.gid != w.gid {
                return Err(format!(
                    "Unix jail: user {} and {} have different login groups",
                    u.name, w.name
                ));
            }
            Ok(Jail::Unix {
                user: u.name,
                workuser: w.name,
                ccgroup: g,
            })
        }
        other => Err(format!("Unknown jail method \"{other}\"")),
    }
}

impl Jail {
    /// What lacquerd tells the operator about a jail it does not apply.
    pub fn notice(&self) -> Option<String> {
        match self {
            Jail::None => None,
            Jail::Unix { workuser, .. } => Some(format!(
                "Info: -j unix: Lacquer runs as a single process and keeps the user it was \
                 started as; to serve as {workuser}, start lacquerd as {workuser}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_errors() {
        assert_eq!(parse_jail("none"), Ok(Jail::None));
        assert_eq!(
            parse_jail("none,x=1").unwrap_err(),
            "-jnone takes no arguments."
        );
        assert_eq!(
            parse_jail("foo").unwrap_err(),
            "Unknown jail method \"foo\""
        );
        assert_eq!(
            parse_jail("unix,bla=foo").unwrap_err(),
            "Unix jail: unknown sub-argument 'bla=foo'"
        );
        assert_eq!(
            parse_jail("unix,user=///").unwrap_err(),
            "Unix jail: /// user not found."
        );
        assert_eq!(
            parse_jail("unix,workuser=///").unwrap_err(),
            "Unix jail: /// user not found."
        );
        assert_eq!(
            parse_jail("unix,ccgroup=///").unwrap_err(),
            "Unix jail: /// group not found."
        );
    }

    #[test]
    fn login_groups_must_match() {
        // root and nobody exist everywhere and never share a login group.
        let e = parse_jail("unix,user=root,workuser=nobody").unwrap_err();
        assert_eq!(
            e,
            "Unix jail: user root and nobody have different login groups"
        );
        let j = parse_jail("unix,user=root,workuser=root,ccgroup=root").unwrap();
        assert_eq!(
            j,
            Jail::Unix {
                user: "root".into(),
                workuser: "root".into(),
                ccgroup: Some("root".into())
            }
        );
        assert!(j.notice().unwrap().contains("start lacquerd as root"));
    }
}
