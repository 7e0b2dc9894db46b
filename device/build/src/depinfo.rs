//! Reading the dep-info (`.d`) file cargo writes next to a build's output, to tell the
//! outer cargo which source files the code objects depend on.

use std::path::{Path, PathBuf};

/// Every prerequisite in make-style dep-info text `text` (`target: dep dep ...`, one
/// rule per line, spaces in paths escaped as `\ `, long rules continued with `\` at
/// the end of a line), in order of first appearance, without repeats.
pub fn parse(text: &str) -> Vec<PathBuf> {
    let mut deps: Vec<PathBuf> = Vec::new();
    let mut token = String::new();
    // Whether the current rule's target (the token ending in `:`) has been passed.
    let mut after_colon = false;
    let mut chars = text.chars().peekable();
    let mut finish = |token: &mut String, after_colon: &mut bool| {
        if token.is_empty() {
            return;
        }
        if !*after_colon {
            // Still in the target part: a token ending in ':' ends it (`out.ptx:`),
            // as does a lone ':' (`out.ptx : dep`).
            if token.ends_with(':') {
                *after_colon = true;
            }
        } else {
            let path = PathBuf::from(&*token);
            if !deps.contains(&path) {
                deps.push(path);
            }
        }
        token.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek() {
                Some(&(' ' | '#' | '\\')) => token.push(chars.next().unwrap_or(' ')),
                Some('\n') => {
                    // A continuation line: the rule goes on.
                    chars.next();
                    finish(&mut token, &mut after_colon);
                }
                Some('\r') => {
                    chars.next();
                    if chars.peek() == Some(&'\n') {
                        chars.next();
                    }
                    finish(&mut token, &mut after_colon);
                }
                _ => token.push('\\'),
            },
            '$' if chars.peek() == Some(&'$') => {
                chars.next();
                token.push('$');
            }
            '\n' => {
                finish(&mut token, &mut after_colon);
                after_colon = false;
            }
            c if c.is_whitespace() => finish(&mut token, &mut after_colon),
            c => token.push(c),
        }
    }
    finish(&mut token, &mut after_colon);
    deps
}

/// `deps` without the paths inside any of `excluded` (the Rust sysroot, cargo's
/// registry and git checkouts, the nested build area): what is left are the user's own
/// sources. A path and a folder are compared as given and canonicalized, so a symlinked
/// `CARGO_HOME` or target dir still matches.
pub fn user_sources(deps: &[PathBuf], excluded: &[PathBuf]) -> Vec<PathBuf> {
    let excluded: Vec<PathBuf> = excluded
        .iter()
        .flat_map(|dir| [Some(dir.clone()), dir.canonicalize().ok()])
        .flatten()
        .collect();
    let inside = |path: &Path| excluded.iter().any(|dir| path.starts_with(dir));
    deps.iter()
        .filter(|path| {
            !inside(path)
                && !path
                    .canonicalize()
                    .is_ok_and(|canonical| inside(&canonical))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_style_rule() {
        let text = "/t/release/k.ptx: /src/k/src/lib.rs /src/dep\\ with\\ spaces/lib.rs /sysroot/core/src/lib.rs\n";
        assert_eq!(
            parse(text),
            [
                "/src/k/src/lib.rs",
                "/src/dep with spaces/lib.rs",
                "/sysroot/core/src/lib.rs"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn several_rules_continuations_and_repeats() {
        let text = "out.elf: a.rs \\\n  b.rs\n\nother.d : a.rs c$$.rs\nempty:\n";
        assert_eq!(parse(text), ["a.rs", "b.rs", "c$.rs"].map(PathBuf::from));
        assert!(parse("").is_empty());
        assert!(parse("only-a-target:\n").is_empty());
    }

    #[test]
    fn filtering_keeps_only_user_sources() {
        let deps = [
            "/home/u/app/kernels/src/lib.rs",
            "/home/u/.cargo/registry/src/index.crates.io-x/libm-0.2/src/lib.rs",
            "/home/u/.cargo/git/checkouts/foo/src/lib.rs",
            "/rust/sysroot/lib/rustlib/src/rust/library/core/src/lib.rs",
            "/home/u/app/target/symmem-device/wrappers/k/src/lib.rs",
            "/home/u/shared/dep/src/lib.rs",
        ]
        .map(PathBuf::from);
        let excluded = [
            "/rust/sysroot",
            "/home/u/.cargo/registry",
            "/home/u/.cargo/git",
            "/home/u/app/target/symmem-device",
        ]
        .map(PathBuf::from);
        assert_eq!(
            user_sources(&deps, &excluded),
            [
                "/home/u/app/kernels/src/lib.rs",
                "/home/u/shared/dep/src/lib.rs"
            ]
            .map(PathBuf::from)
        );
    }

    #[cfg(unix)]
    #[test]
    fn filtering_compares_canonical_paths() {
        let dir = std::env::temp_dir().join(format!("symmem-build-depinfo-{}", std::process::id()));
        let real = dir.join("real");
        std::fs::create_dir_all(real.join("src")).unwrap();
        std::fs::write(real.join("src/lib.rs"), "").unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // The file is named through the link; the excluded folder by its real path.
        let kept = user_sources(&[link.join("src/lib.rs")], std::slice::from_ref(&real));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(kept.is_empty(), "{kept:?}");
    }
}
