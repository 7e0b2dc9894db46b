//! The reference documents keep up with the code: the README shows the first program
//! exactly as `host/src/first_program.md` has it (which the crate runs as a doctest), every
//! variant of `symmem::Error` and `symmem_build::BuildError` has a row in
//! `docs/troubleshooting.md`, every environment variable the code reads has one in
//! `docs/environment.md`, every example has a README the README links, the mpirun guide
//! shows the program CI runs, and the reference documents (README, docs/, the guides, the
//! examples' READMEs) keep no diary.

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
    for (path, text) in sources(&ROOTS) {
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

/// The folders whose sources name environment variables.
const ROOTS: [&str; 8] = [
    "host/src",
    "host/benches",
    "device/build",
    "crates",
    "tests/src",
    "tests/tests",
    "examples",
    "demo",
];

/// Every readable file under `roots` (but build outputs and bench results), with its text.
fn sources(roots: &[&str]) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
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
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, text));
        }
    }
    out
}

/// Every variable any code reads with `std::env::var` or `var_os` (not only symmem's own
/// `SYMMEM_*` names: `CUDA_MODULE_LOADING`, cargo's `OUT_DIR`, `HOME`...) has a row in
/// `docs/environment.md`. A call's argument is a string literal, or a constant whose
/// `const NAME: &str = "VALUE"` the sources define, or one of the few variables whose name
/// is data (a hardware-queue setting's `variable: "..."`, a list walked in a loop),
/// collected from those definitions.
#[test]
fn every_variable_the_code_reads_has_a_row_in_the_environment_table() {
    let table = read("docs/environment.md");
    let files = sources(&ROOTS);
    let quoted = |rest: &str| -> Option<String> {
        let rest = rest.strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_owned())
    };
    // `const NAME: &str = "VALUE";` and `variable: "VALUE"` anywhere in the sources.
    let mut constants = std::collections::HashMap::new();
    let mut data_names = Vec::new();
    for (_, text) in &files {
        for (at, _) in text.match_indices("const ") {
            let rest = &text[at + 6..];
            let Some((name, rest)) = rest.split_once(": &str = ") else {
                continue;
            };
            if let Some(value) = quoted(rest) {
                constants.insert(name.trim().to_owned(), value);
            }
        }
        for (at, _) in text.match_indices("variable: ") {
            data_names.extend(quoted(&text[at + 10..]));
        }
    }
    let mut read = std::collections::BTreeMap::new();
    for (path, text) in &files {
        for call in ["env::var(", "env::var_os("] {
            for (at, _) in text.match_indices(call) {
                let rest = text[at + call.len()..].trim_start();
                let arg: String = rest
                    .chars()
                    .take_while(|c| !matches!(c, ')' | ','))
                    .collect();
                let name = quoted(rest).or_else(|| {
                    let last = arg.rsplit("::").next().unwrap_or(&arg).trim();
                    constants.get(last).cloned()
                });
                match name {
                    Some(name) => {
                        read.insert(name, path.display().to_string());
                    }
                    // A name held in a variable: one of `data_names`, or a list's element
                    // (the MPI launchers' `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `PMIX_RANK`),
                    // each checked below.
                    None => assert!(
                        matches!(arg.trim(), "setting.variable" | "var" | "v" | "name"),
                        "{}: env::var of `{arg}`: name it with a literal or a constant",
                        path.display()
                    ),
                }
            }
        }
    }
    for name in data_names
        .into_iter()
        .chain(["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"].map(String::from))
    {
        read.insert(name, "a setting's name".to_owned());
    }
    let missing: Vec<String> = read
        .into_iter()
        .filter(|(name, _)| !table.contains(&format!("`{name}`")))
        .map(|(name, at)| format!("{name} ({at})"))
        .collect();
    assert!(missing.is_empty(), "docs/environment.md lacks {missing:?}");
}

/// The reference documents say what is, not what happened: README.md and docs/ hold no
/// commit hash, no "this machine", and no date of a measurement (history goes to the
/// changelog and BENCHMARKS-history.md). A toolchain's name (a `nightly-` date) and a
/// link's target are no dates of ours; a section headed "Tested on" may date its rows.
#[test]
fn the_reference_documents_keep_no_diary() {
    let mut files = vec![repo().join("README.md")];
    for dir in ["docs", "host/src/guides"] {
        for entry in std::fs::read_dir(repo().join(dir)).expect(dir) {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    for entry in std::fs::read_dir(repo().join("examples")).expect("examples/") {
        let readme = entry.expect("an entry").path().join("README.md");
        if readme.exists() {
            files.push(readme);
        }
    }
    let mut diary = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        let mut tested_on = false;
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') {
                tested_on = line.contains("Tested on");
            }
            if tested_on {
                continue;
            }
            let at = format!("{}:{}", path.display(), n + 1);
            if line.to_lowercase().contains("this machine") {
                diary.push(format!("{at}: \"this machine\""));
            }
            // Link targets and toolchain names removed, a date left is a diary's.
            let mut plain = String::new();
            let mut rest = line;
            while let Some(open) = rest.find("](") {
                plain.push_str(&rest[..open]);
                rest = rest[open..].split_once(')').map_or("", |(_, after)| after);
            }
            plain.push_str(rest);
            let bytes = plain.as_bytes();
            for i in 0..bytes.len().saturating_sub(9) {
                let date = &bytes[i..i + 10];
                let shape = date.iter().enumerate().all(|(k, &b)| match k {
                    4 | 7 => b == b'-',
                    _ => b.is_ascii_digit(),
                });
                // A date inside a name (`nightly-2026-09-15`) follows a `-`.
                let alone =
                    i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'-');
                if shape && alone && date.starts_with(b"20") {
                    diary.push(format!("{at}: a date ({})", &plain[i..i + 10]));
                }
            }
            // A commit hash in backticks: 7 to 12 lower-case hex digits, letters and digits.
            for quoted in line.split('`').skip(1).step_by(2) {
                let hex = quoted
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                let mixed = quoted.bytes().any(|b| b.is_ascii_digit())
                    && quoted.bytes().any(|b| b.is_ascii_alphabetic());
                if hex && mixed && (7..=12).contains(&quoted.len()) {
                    diary.push(format!("{at}: a commit hash ({quoted})"));
                }
            }
        }
    }
    assert!(
        diary.is_empty(),
        "history in the reference documents: {diary:#?}"
    );
}

#[test]
fn every_example_has_a_readme_with_its_run_command_and_the_readme_links_it() {
    let readme = read("README.md");
    let mut examples = 0;
    for entry in std::fs::read_dir(repo().join("examples")).expect("examples/") {
        let dir = entry.expect("examples/ entry").path();
        if !dir.join("Cargo.toml").exists() {
            continue;
        }
        examples += 1;
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name");
        let guide = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("examples/{name}/README.md: {e}"));
        let run = format!("cargo run --release -p {name}");
        assert!(
            guide.contains(&run) && guide.contains("## Where CI runs it"),
            "examples/{name}/README.md must give `{run}` and say where CI runs it"
        );
        assert!(
            readme.contains(&format!("examples/{name}/README.md")),
            "README.md must link examples/{name}/README.md"
        );
    }
    assert!(examples >= 4, "only {examples} examples found");
}

#[test]
fn the_mpirun_guide_shows_the_example_ci_runs_under_mpirun() {
    let guide = read("host/src/guides/mpirun.md");
    let start = guide.find("```rust,ignore\n").expect("the guide's program") + 15;
    let program = &guide[start..start + guide[start..].find("```").expect("its end")];
    assert!(
        program.starts_with("fn mpi_rank(")
            && read("examples/fused-allreduce-rmsnorm/src/main.rs").contains(program),
        "host/src/guides/mpirun.md's program must be the fused example's `mpi_rank`, \
         word for word:\n{program}"
    );
}

#[test]
fn the_readme_links_into_the_repository_name_files_that_exist() {
    // Absolute, so they work on crates.io too (the README is the crate's page there).
    let base = "](https://github.com/symmem/symmem/blob/main/";
    let readme = read("README.md");
    let mut missing = Vec::new();
    for link in readme.split(base).skip(1) {
        let target = link.split([')', '#']).next().unwrap_or("");
        if !repo().join(target).exists() {
            missing.push(target.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "README links to files that do not exist: {missing:?}"
    );
    assert!(
        !readme.contains("](docs/") && !readme.contains("](examples/"),
        "README links must be absolute (relative ones break on crates.io)"
    );
}
