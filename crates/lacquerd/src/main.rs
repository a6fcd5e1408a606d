//! `lacquerd`: the cache daemon. A thin command-line layer over `lacquer-server`.
fn main() {
    println!("lacquerd {}", env!("CARGO_PKG_VERSION"));
}
