//! Stand-alone entry point for the runner (`cargo run -p lacquer-vtc
//! --example vtc -- [options] FILE...`), handy until `lacquer vtc` wires
//! [`lacquer_vtc::cli_main`] in.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(lacquer_vtc::cli_main(&args));
}
