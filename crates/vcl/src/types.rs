//! VCL value types and the conversion / operator rules of Varnish 7.1's
//! expression compiler (`vcc_expr.c`, `vcc_types.c`).
//!
//! The checker asks this module which binary operators exist for a pair of
//! types, which types convert implicitly to a string, which types have a
//! truth value, and which comparison operators apply, so that every rule lives
//! in one table instead of being scattered through the type checker.

use std::fmt;

/// A VCL type, named as Varnish names it in diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Void,
    String,
    Strands,
    Bool,
    Int,
    Real,
    Duration,
    Bytes,
    Time,
    Ip,
    Backend,
    Acl,
    Probe,
    Blob,
    Header,
    Http,
    Stevedore,
    Sub,
    Enum,
    Body,
    Regex,
    /// An object instance (`new x = vmod.obj(...)`), typed by its class.
    Instance,
}

/// Arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl ArithOp {
    /// The operator's source spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Mod => "%",
        }
    }
}

/// Comparison operators (including regex / ACL match).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Match,
    NoMatch,
}

impl CmpOp {
    /// The operator's source spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Match => "~",
            CmpOp::NoMatch => "!~",
        }
    }

    /// True for `==` and `!=`.
    pub fn is_equality(self) -> bool {
        matches!(self, CmpOp::Eq | CmpOp::Ne)
    }

    /// True for `~` and `!~`.
    pub fn is_match(self) -> bool {
        matches!(self, CmpOp::Match | CmpOp::NoMatch)
    }
}

/// What a comparison `a OP b` means once the left type is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpKind {
    /// Both sides must have the left side's type.
    Simple,
    /// Right side is converted to a string; string comparison.
    String,
    /// Right side is a regex literal; left side is a string.
    Regex,
    /// Right side names an ACL; left side is an IP.
    Acl,
}

impl Type {
    /// Varnish's name for the type, as printed in diagnostics.
    pub fn name(self) -> &'static str {
        match self {
            Type::Void => "VOID",
            Type::String => "STRING",
            Type::Strands => "STRANDS",
            Type::Bool => "BOOL",
            Type::Int => "INT",
            Type::Real => "REAL",
            Type::Duration => "DURATION",
            Type::Bytes => "BYTES",
            Type::Time => "TIME",
            Type::Ip => "IP",
            Type::Backend => "BACKEND",
            Type::Acl => "ACL",
            Type::Probe => "PROBE",
            Type::Blob => "BLOB",
            Type::Header => "HEADER",
            Type::Http => "HTTP",
            Type::Stevedore => "STEVEDORE",
            Type::Sub => "SUB",
            Type::Enum => "ENUM",
            Type::Body => "BODY",
            Type::Regex => "REGEX",
            Type::Instance => "INSTANCE",
        }
    }

    /// Parses a type name as written in vmod declarations (`STRING`,
    /// `STRING_LIST`, `STRANDS`, ...). `STRING_LIST` is treated as `STRANDS`.
    pub fn from_name(name: &str) -> Option<Type> {
        Some(match name {
            "VOID" => Type::Void,
            "STRING" => Type::String,
            "STRANDS" | "STRING_LIST" => Type::Strands,
            "BOOL" => Type::Bool,
            "INT" => Type::Int,
            "REAL" => Type::Real,
            "DURATION" => Type::Duration,
            "BYTES" => Type::Bytes,
            "TIME" => Type::Time,
            "IP" => Type::Ip,
            "BACKEND" => Type::Backend,
            "ACL" => Type::Acl,
            "PROBE" => Type::Probe,
            "BLOB" => Type::Blob,
            "HEADER" => Type::Header,
            "HTTP" => Type::Http,
            "STEVEDORE" => Type::Stevedore,
            "SUB" => Type::Sub,
            "ENUM" => Type::Enum,
            "BODY" => Type::Body,
            "REGEX" => Type::Regex,
            "INSTANCE" => Type::Instance,
            _ => return None,
        })
    }

    /// The name Varnish uses in user-facing messages: string-like types are
    /// all reported as `STRING` (`vcc_utype`).
    pub fn user_name(self) -> &'static str {
        if self.is_stringish() {
            "STRING"
        } else {
            self.name()
        }
    }

    /// STRING, STRANDS (string forms) and HEADER values read as strings.
    pub fn is_stringish(self) -> bool {
        matches!(self, Type::String | Type::Strands)
    }

    /// Whether a value of this type converts implicitly to a string
    /// (Varnish's `tostring` slot). HTTP, ACL, PROBE, SUB, BODY, REGEX and
    /// instances do not (named objects read as their name instead).
    pub fn to_string_ok(self) -> bool {
        matches!(
            self,
            Type::String
                | Type::Strands
                | Type::Bool
                | Type::Int
                | Type::Real
                | Type::Duration
                | Type::Bytes
                | Type::Time
                | Type::Ip
                | Type::Backend
                | Type::Header
                | Type::Stevedore
                | Type::Enum
                | Type::Blob
        )
    }

    /// The message Varnish prints when a value cannot become a string.
    pub fn to_string_error(self) -> String {
        format!("Cannot convert {} to STRING.", self.user_name())
    }

    /// Whether the type has an implicit truth value in boolean context
    /// (`if (req.http.x)`, `if (backend)`, `if (int)`, `if (duration)`).
    /// REAL deliberately has none, like Varnish.
    pub fn to_bool_ok(self) -> bool {
        matches!(
            self,
            Type::Bool
                | Type::Backend
                | Type::Int
                | Type::Duration
                | Type::String
                | Type::Strands
                | Type::Header
        )
    }

    /// Type of the right operand accepted by `*` and `/` (`multype`), or
    /// `None` if the type cannot be multiplied.
    pub fn mul_type(self) -> Option<Type> {
        match self {
            Type::Int => Some(Type::Int),
            Type::Real | Type::Duration | Type::Bytes => Some(Type::Real),
            _ => None,
        }
    }

    /// How the comparison `self OP right` is compiled, or `None` if the
    /// operator is not defined on this type (`Operator > not possible on IP`).
    pub fn comparison(self, op: CmpOp) -> Option<CmpKind> {
        use CmpOp::*;
        match self {
            Type::Int | Type::Duration | Type::Bytes | Type::Real | Type::Time => {
                (!op.is_match()).then_some(CmpKind::Simple)
            }
            Type::Backend
            | Type::Acl
            | Type::Probe
            | Type::Stevedore
            | Type::Sub
            | Type::Instance
            | Type::Bool => op.is_equality().then_some(CmpKind::Simple),
            Type::Ip => match op {
                Eq | Ne => Some(CmpKind::Simple),
                Match | NoMatch => Some(CmpKind::Acl),
                _ => None,
            },
            Type::String | Type::Strands | Type::Header => {
                if op.is_match() {
                    Some(CmpKind::Regex)
                } else {
                    Some(CmpKind::String)
                }
            }
            _ => None,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Result type of `a + b` / `a - b` when it is a numeric/time operation
/// (Varnish's `vcc_adds` table). `None` means the pair is not arithmetic; the
/// checker then tries string concatenation for `+` or reports
/// `"A + B not possible."`.
pub fn add_result(op: ArithOp, a: Type, b: Type) -> Option<Type> {
    use Type::*;
    let add_or_sub = matches!(op, ArithOp::Add | ArithOp::Sub);
    if !add_or_sub {
        return None;
    }
    match (a, b) {
        (Bytes, Bytes) => Some(Bytes),
        (Duration, Duration) => Some(Duration),
        (Int, Int) => Some(Int),
        (Int, Real) | (Real, Int) | (Real, Real) => Some(Real),
        (Time, Time) if op == ArithOp::Sub => Some(Duration),
        (Time, Duration) => Some(Time),
        _ => None,
    }
}

/// Whether the left type has any `+`/`-` entry in the arithmetic table; used
/// to pick the expected type of the right operand like Varnish does.
pub fn has_add_entry(op: ArithOp, a: Type) -> bool {
    use Type::*;
    match op {
        ArithOp::Add => matches!(a, Bytes | Duration | Int | Real | Time),
        ArithOp::Sub => matches!(a, Bytes | Duration | Int | Real | Time),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in [
            Type::String,
            Type::Bool,
            Type::Int,
            Type::Real,
            Type::Duration,
            Type::Bytes,
            Type::Time,
            Type::Ip,
            Type::Backend,
            Type::Blob,
            Type::Http,
            Type::Stevedore,
            Type::Sub,
            Type::Body,
        ] {
            assert_eq!(Type::from_name(t.name()), Some(t));
        }
        assert_eq!(Type::from_name("STRING_LIST"), Some(Type::Strands));
        assert_eq!(Type::from_name("NOPE"), None);
    }

    #[test]
    fn arithmetic_table() {
        assert_eq!(
            add_result(ArithOp::Sub, Type::Time, Type::Time),
            Some(Type::Duration)
        );
        assert_eq!(add_result(ArithOp::Add, Type::Time, Type::Time), None);
        assert_eq!(
            add_result(ArithOp::Add, Type::Time, Type::Duration),
            Some(Type::Time)
        );
        assert_eq!(add_result(ArithOp::Add, Type::Duration, Type::Int), None);
        assert_eq!(
            add_result(ArithOp::Add, Type::Int, Type::Real),
            Some(Type::Real)
        );
        assert_eq!(add_result(ArithOp::Mul, Type::Int, Type::Int), None);
    }

    #[test]
    fn conversions() {
        assert!(Type::Backend.to_string_ok());
        assert!(!Type::Http.to_string_ok());
        assert_eq!(
            Type::Http.to_string_error(),
            "Cannot convert HTTP to STRING."
        );
        assert!(Type::Blob.to_string_ok());
        assert!(!Type::Real.to_bool_ok());
        assert!(Type::Duration.to_bool_ok());
        assert_eq!(Type::Duration.mul_type(), Some(Type::Real));
        assert_eq!(Type::String.mul_type(), None);
        assert_eq!(Type::Ip.comparison(CmpOp::Gt), None);
        assert_eq!(Type::Ip.comparison(CmpOp::Match), Some(CmpKind::Acl));
        assert_eq!(Type::Backend.comparison(CmpOp::Gt), None);
        assert_eq!(Type::String.comparison(CmpOp::Lt), Some(CmpKind::String));
        assert_eq!(Type::Strands.user_name(), "STRING");
    }
}
