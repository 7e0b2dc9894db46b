//! The host crate's floors: every module of `host/src` stands on a floor, and imports
//! only from its own floor or below (`crate::` paths in code, `use` lines and inline
//! alike), with no cycle among modules. Read from the bottom up:
//!
//! | floor | modules | what |
//! | --- | --- | --- |
//! | 0 | `error`, `offset_alloc`, `control`, `table` | errors, the heap allocator, the abort word, peer tables |
//! | 1 | `backend`, `ledger` | the backend contract and its implementations; the ledger |
//! | 2 | `transport` | off-node transports |
//! | 3 | `bootstrap`, `topology`, `liveness` | who the peers are, where they live, whether alive |
//! | 4 | `world` | forming and leaving, the heap, agreement, faults |
//! | 5 | `memory`, `launch`, `io`, `provider`, `graph`, `cudarc_view` | typed handles, launch, host I/O, providers, graphs, memory lent to cudarc |
//! | 6 | `collectives` | built on launch, as a user's code is |
//! | 7 | `guides` | documentation only: one guide per way of running, over everything |
//!
//! `lib.rs` (declarations and re-exports) stands on no floor. A new module must be given a
//! floor here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const FLOORS: &[(&str, u32)] = &[
    ("error", 0),
    ("offset_alloc", 0),
    ("control", 0),
    ("table", 0),
    ("backend", 1),
    ("ledger", 1),
    ("transport", 2),
    ("bootstrap", 3),
    ("topology", 3),
    ("liveness", 3),
    ("world", 4),
    ("memory", 5),
    ("launch", 5),
    ("io", 5),
    ("provider", 5),
    ("graph", 5),
    ("cudarc_view", 5),
    ("collectives", 6),
    ("guides", 7),
];

/// The top-level module a file of `host/src` belongs to (`backend/cuda/mod.rs` ->
/// `backend`), or `None` for `lib.rs`.
fn module_of(path: &str) -> Option<&str> {
    let first = path.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then_some(name)
}

/// The top-level modules `source` names through `crate::` paths, outside comments.
fn imports(source: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            // `$crate::` and `symmem_crate::` are not this crate's paths.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `use crate::{a, b}`: every module named in the braces.
            if name.is_empty() && rest.starts_with('{') {
                let group = rest[1..].split('}').next().unwrap_or("");
                for item in group.split(',') {
                    let item = item.trim().split("::").next().unwrap_or("").trim();
                    if !item.is_empty() {
                        found.insert(item.to_owned());
                    }
                }
            } else if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Every rule the files break: `(path, source)` pairs of `host/src`, paths relative to
/// it with `/`.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let floors: BTreeMap<&str, u32> = FLOORS.iter().copied().collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut found = Vec::new();
    for (path, source) in files {
        let Some(from) = module_of(path) else {
            continue;
        };
        let Some(&floor) = floors.get(from) else {
            found.push(format!("{path}: module `{from}` has no floor in FLOORS"));
            continue;
        };
        for to in imports(source) {
            // Items that lib.rs itself defines or re-exports (`crate::Error`,
            // `crate::include_kernels!`) are not modules.
            let Some(&to_floor) = floors.get(to.as_str()) else {
                continue;
            };
            if to == from {
                continue;
            }
            if to_floor > floor {
                found.push(format!(
                    "{path}: `{from}` (floor {floor}) imports `{to}` (floor {to_floor}) above it"
                ));
            }
            edges.entry(from.to_owned()).or_default().insert(to);
        }
    }
    // A cycle among modules, found by depth-first search.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == node) {
            found.push(format!(
                "import cycle: {} -> {node}",
                path[at..].join(" -> ")
            ));
            return;
        }
        if !done.insert(node.to_owned()) {
            return;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, path, done, found);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        visit(node, &edges, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

/// Every `.rs` file under `dir`, as (path relative to `root`, source).
fn sources(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("reading host/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under host/src");
            let relative = relative.to_string_lossy().replace('\\', "/");
            out.push((
                relative,
                std::fs::read_to_string(&path).expect("a source file"),
            ));
        }
    }
}

#[test]
fn every_module_imports_only_from_its_floor_or_below_with_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    assert!(files.len() > 20, "host/src read: {} files", files.len());
    let found = violations(&files);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn an_upward_import_a_cycle_and_a_module_without_a_floor_are_found() {
    let file = |path: &str, source: &str| (path.to_owned(), source.to_owned());
    let upward = [file(
        "backend/mod.rs",
        "use crate::launch::CodeObjects;\nuse crate::error::Result;",
    )];
    assert_eq!(
        violations(&upward),
        ["backend/mod.rs: `backend` (floor 1) imports `launch` (floor 5) above it"]
    );
    // Same floor both ways: no upward import, but a cycle.
    let cycle = [
        file("memory.rs", "use crate::{launch::KernelArg, world::World};"),
        file(
            "launch.rs",
            "fn f() { crate::memory::bounds(); } // crate::io",
        ),
    ];
    assert_eq!(
        violations(&cycle),
        ["import cycle: launch -> memory -> launch"]
    );
    let unplaced = [file("newroom.rs", "use crate::error::Result;")];
    assert_eq!(
        violations(&unplaced),
        ["newroom.rs: module `newroom` has no floor in FLOORS"]
    );
    // Comments, `$crate::` and lib.rs are not imports.
    let quiet = [
        file(
            "error.rs",
            "// use crate::world::World;\n$crate::launch!();",
        ),
        file("lib.rs", "use crate::collectives::Collectives;"),
    ];
    assert!(violations(&quiet).is_empty());
}
