//! The operator tools: log, ncsa, top, stat, adm.
