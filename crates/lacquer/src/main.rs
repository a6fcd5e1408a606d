//! `lacquer`: the operator tool binary (log, stat, adm, vtc, vcl check).
fn main() {
    println!("lacquer {}", env!("CARGO_PKG_VERSION"));
}
