//! The reference documents keep up with the code: the README shows the first program
//! exactly as `host/src/first_program.md` has it (which the crate runs as a doctest), every
//! variant of `symmem::Error` and `symmem_build::BuildError` has a row in
//! `docs/troubleshooting.md`, and every `SYMMEM_*` environment variable the code names has
//! one in `docs/environment.md`.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The variant names of `pub enum NAME` in `source` (declared at four spaces' indent).
fn variants(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("pub enum {name} {{"))
        .unwrap_or_else(|| panic!("no enum {name}"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("the enum's end")];
    body.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("    ")?;
            let first = rest.chars().next()?;
            first.is_ascii_uppercase().then(|| {
                rest.chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect()
            })
        })
        .collect()
}

#[test]
fn the_readme_shows_the_first_program_as_it_runs() {
    let doc = read("host/src/first_program.md");
    let start = doc.find("```rust\n").expect("a rust block");
    let end = start + doc[start + 8..].find("```\n").expect("the block's end") + 8 + 4;
    assert!(
        read("README.md").contains(&doc[start..end]),
        "README.md's first program differs from host/src/first_program.md"
    );
}

/// The README's kernel is the peer-put example's `add_to_peer`, word for word: CI builds
/// the README's blocks as a user's crate (`.ci/user-crate`), launches the example's copy
/// from safe code past its buffer's end, and runs its body under Miri.
#[test]
fn the_readme_kernel_is_the_one_ci_runs() {
    let readme = read("README.md");
    let example = read("examples/peer-put/kernels/src/lib.rs");
    let kernel = |text: &str, from: &str| -> String {
        let start = text.find(from).expect("the kernel's doc comment");
        let end = start + text[start..].find("\n}\n").expect("the kernel's end") + 3;
        text[start..end].to_owned()
    };
    let doc = "/// Adds `value` to elements `0..n` of rank `to`'s copy of `data`";
    assert_eq!(
        kernel(&readme, doc),
        kernel(&example, doc),
        "README.md's kernel differs from examples/peer-put/kernels' add_to_peer"
    );
}

#[test]
fn every_error_has_a_row_in_the_troubleshooting_table() {
    let table = read("docs/troubleshooting.md");
    for (file, name) in [
        ("host/src/error/mod.rs", "Error"),
        ("device/build/src/error.rs", "BuildError"),
    ] {
        let names = variants(&read(file), name);
        assert!(names.len() > 5, "{name}: found only {names:?}");
        for variant in names {
            assert!(
                table.contains(&format!("| `{variant}")),
                "docs/troubleshooting.md has no row for {name}::{variant}"
            );
        }
    }
}

#[test]
fn every_environment_variable_has_a_row_in_the_environment_table() {
    let table = read("docs/environment.md");
    // Names that are not environment variables: the device globals of the control block,
    // of the engine's ring and of NVSHMEM's heap alias.
    let not_variables = ["SYMMEM_CONTROL", "SYMMEM_ENGINE", "SYMMEM_NVSHMEM"];
    let mut missing = Vec::new();
    let roots = [
        "host/src",
        "host/benches",
        "device/build/src",
        "crates",
        "tests/src",
        "tests/tests",
        "examples",
    ];
    let mut stack: Vec<PathBuf> = roots.iter().map(|r| repo().join(r)).collect();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("a readable folder") {
                let entry = entry.expect("a folder entry").path();
                if entry
                    .file_name()
                    .is_some_and(|n| n != "target" && n != "results")
                {
                    stack.push(entry);
                }
            }
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (at, _) in text.match_indices("SYMMEM_") {
            // `DEP_SYMMEM_KERNELS_SOURCE` is cargo's (the `links` key), not a name of ours.
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name.len() > "SYMMEM_".len()
                && !not_variables.contains(&name.as_str())
                && !table.contains(&format!("`{name}`"))
            {
                missing.push(format!("{name} ({})", path.display()));
            }
        }
    }
    assert!(missing.is_empty(), "docs/environment.md lacks {missing:?}");
}
