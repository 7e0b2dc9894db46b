//! The two names symmem-build needs from a kernel crate's `Cargo.toml`: its package
//! name and its library's crate name, read line by line.
//!
//! Why not the `toml` crate (or `cargo_metadata`): symmem-build is a build-dependency,
//! so its dependencies compile before any build script that uses it can start, on the
//! critical path of every user's cold build. `toml` 0.9 with `serde_json` cost 15.9 s
//! of wall time (8.2 s CPU) to build on the 2-core CI machine (2026-12-04), against two
//! keys read here; the nested device builds cannot start before that. (The keys read
//! are `[package] name` and `[lib] name`; the tests cover comments, quoting and other
//! sections.)

/// Names read from a `Cargo.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// `[package] name`.
    pub package: String,
    /// `[lib] name` if the manifest sets one, else the package name with `-` as `_`:
    /// the name `extern crate` takes.
    pub lib: String,
}

/// The names in manifest text `toml`, or `None` if it has no `[package] name`.
pub fn names(toml: &str) -> Option<Names> {
    let mut section = String::new();
    let (mut package, mut lib) = (None, None);
    for line in toml.lines() {
        let line = strip_comment(line).trim();
        if let Some(header) = line.strip_prefix('[') {
            // `[package]`, `[lib]`, `[[bin]]`, `[dependencies.foo]`...
            section = header
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if unquote(key.trim()) != Some("name") {
            continue;
        }
        let value = unquote(value.trim()).map(str::to_owned);
        match section.as_str() {
            "package" | "project" => package = package.or(value),
            "lib" => lib = lib.or(value),
            _ => {}
        }
    }
    let package = package?;
    let lib = lib.unwrap_or_else(|| crate_name(&package));
    Some(Names { package, lib })
}

/// The crate name of package `package`: `-` becomes `_`.
pub fn crate_name(package: &str) -> String {
    package.replace('-', "_")
}

/// `line` without a trailing `# comment` (a `#` inside a string stays).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

/// The text of a bare key or of a quoted (`"…"` or `'…'`) string without escapes.
fn unquote(s: &str) -> Option<&str> {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q) {
            return inner.strip_suffix(q).filter(|i| !i.contains(q));
        }
    }
    let bare = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    (bare && !s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_name_and_default_lib_name() {
        let toml = "\
# a comment: name = \"not-this\"
[package]
name = \"my-kernels\" # trailing comment
version.workspace = true
edition = \"2024\"

[dependencies]
foo = { path = \"../foo\" }
[dependencies.bar]
name = \"nope\"
";
        assert_eq!(
            names(toml),
            Some(Names {
                package: "my-kernels".into(),
                lib: "my_kernels".into()
            })
        );
    }

    #[test]
    fn lib_name_overrides_and_single_quotes() {
        let toml = "[lib]\nname = 'gpu_stuff'\npath = \"src/lib.rs\"\n\n[package]\n  name='peer-put-kernels'\n";
        assert_eq!(
            names(toml),
            Some(Names {
                package: "peer-put-kernels".into(),
                lib: "gpu_stuff".into()
            })
        );
    }

    #[test]
    fn bins_and_virtual_manifests_have_no_package() {
        assert_eq!(names("[workspace]\nmembers = [\"a\"]\n"), None);
        assert_eq!(names("[[bin]]\nname = \"tool\"\n"), None);
        assert_eq!(names(""), None);
    }

    #[test]
    fn hash_inside_a_string_is_not_a_comment() {
        assert_eq!(strip_comment("name = \"a#b\" # c"), "name = \"a#b\" ");
        assert_eq!(unquote("\"a\"b\""), None);
    }
}
