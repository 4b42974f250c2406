//! Project automation, run as `cargo xtask <job>`; one file per job.
//!
//! Dependency-free on purpose: it must build in seconds on a fresh machine.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        _ => {
            eprintln!("usage: cargo xtask <integ|bench>");
            2
        }
    };
    std::process::exit(code);
}
