//! VCL: lexer, parser, type checker and compiler to an executable program.
