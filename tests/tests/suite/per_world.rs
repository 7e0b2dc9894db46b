//! The suite's one `per_world!`: a `#[test]` per world size for each body.

/// One `#[test]` per world size (1, 2, 3, 4 and 8), `<name>::world_<n>`, each calling
/// `$f(n)` unless the backend is missing (`skip`).
macro_rules! per_world {
    ($($f:ident;)*) => {
        $(
            mod $f {
                #[test]
                fn world_1() {
                    if super::super::skip() { return; }
                    super::$f(1)
                }
                #[test]
                fn world_2() {
                    if super::super::skip() { return; }
                    super::$f(2)
                }
                #[test]
                fn world_3() {
                    if super::super::skip() { return; }
                    super::$f(3)
                }
                #[test]
                fn world_4() {
                    if super::super::skip() { return; }
                    super::$f(4)
                }
                #[test]
                fn world_8() {
                    if super::super::skip() { return; }
                    super::$f(8)
                }
            }
        )*
    };
}
