//! What the benches' command lines share, on clap (a dev-dependency of symmem, never one
//! of the library): the `--bench` flag `cargo bench` appends, byte sizes, and the log
//! (`SYMMEM_LOG`).
//!
//! One module that each bench reading arguments includes (`mod cli;`), rather than a
//! size parser copied into every bench or a crate of its own for twenty lines; a folder
//! (`cli/mod.rs`, as `common/`), so that cargo does not take it for a bench target. Not
//! part of `common`, which is the CUDA benches' timing and would be dead code in the
//! others.

// Each bench uses part of this module (small_messages only `CargoBench`).
#![allow(dead_code)]

use clap::Args;

/// Prints symmem's `tracing` events on stderr, filtered by `SYMMEM_LOG` (RUST_LOG syntax):
/// what every bench does first. Unset, no subscriber is installed at all, so that a bench
/// measures the library as a program without one sees it (the cost table of issue 30 sets
/// `SYMMEM_LOG=info` for the other line).
pub fn log() {
    if std::env::var_os("SYMMEM_LOG").is_none() {
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("SYMMEM_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// `cargo bench` runs a `harness = false` bench as `<bench> [ARGS...] --bench`: accepted,
/// hidden from `--help`, and ignored.
#[derive(Args, Debug)]
pub struct CargoBench {
    /// Set by `cargo bench`.
    #[arg(long = "bench", hide = true)]
    bench: bool,
}

/// A byte count: a number, optionally with `K`, `M` or `G` (binary multiples): `4096`,
/// `64K`, `16M`, `1G`. Zero is one.
pub fn bytes(s: &str) -> Result<usize, String> {
    let bad = || format!("`{s}` is not a size (a number, optionally with K, M or G: 64M)");
    let text = s.trim();
    let (num, mul) = match text.chars().last().ok_or_else(bad)? {
        'K' | 'k' => (&text[..text.len() - 1], 1 << 10),
        'M' | 'm' => (&text[..text.len() - 1], 1 << 20),
        'G' | 'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(bad)
}

/// A size of a sweep ([`bytes`]): a positive multiple of 16 bytes (a vector per thread),
/// at most `MAX`.
pub fn sweep_bytes<const MAX: usize>(s: &str) -> Result<usize, String> {
    let n = bytes(s)?;
    if n == 0 || n % 16 != 0 || n > MAX {
        return Err(format!(
            "`{s}`: sizes must be positive multiples of 16 bytes up to {}G",
            MAX >> 30
        ));
    }
    Ok(n)
}
