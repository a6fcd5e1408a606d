//! VCL: lexer, parser, type checker and compiler to an executable program.

pub mod ast;
pub mod diag;
pub mod exec;
pub mod include;
pub mod lexer;
pub mod parser;
pub mod source;

pub mod check;
pub mod compile;
pub mod ir;
pub mod subs;
pub mod types;
pub mod vars;
pub mod vmod;
