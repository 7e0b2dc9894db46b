#!/bin/sh
# compare-objects.sh OLD_DIR NEW_DIR [NEW_DIR..]
#
# Checks that the GPU code objects of two builds are the same code: run it around a
# change that should not change codegen (a refactor of kernel declarations, a macro
# rewrite). Every `*.ptx` and `*.hsaco` in OLD_DIR must have a namesake in one of the
# NEW_DIRs (the first that has one counts; files only there are not checked), and:
#
# * PTX: the text, equal once Rust's symbol hashes are normalised (the legacy
#   mangling's `17h<16 hex>E`, the v0 mangling's crate disambiguators `Cs<base-62>_`,
#   anonymous constants' `anon_$_<32 hex>_$_`).
# * AMD (`NAME-gfxNNN.hsaco`): `llvm-objdump -d --mcpu=gfxNNN` (the disassembly) and
#   `llvm-readobj --notes` (the HSA metadata: kernel arguments, register and LDS
#   counts), equal once the hashes are normalised and the file names dropped.
#
# When a file differs only in the order of its functions (definition order moved),
# the comparison is repeated per function, sorted, without addresses, and the file
# passes with "same functions, other order" (the notes: "same lines, other order",
# their lines sorted). Anything else fails with a diff. (On AMD a reorder also moves
# the PC-relative offsets of calls and constants, which this does not undo: such a
# file fails, and its diff shows whether only those offsets moved.)
#
# Code objects of a build: target/debug/build/<crate>/<hash>/out/symmem-kernels/ of the
# crate whose build.rs builds them: `symmem` for symmem's own (symmem_kernels*),
# `symmem-tests` for the examples' kernel crates. For example:
#   device/compare-objects.sh /tmp/objects-before target/debug/build/symmem/*/out/symmem-kernels \
#       target/debug/build/symmem-tests/*/out/symmem-kernels
# (with one build of each there). llvm-objdump and llvm-readobj come from the device
# toolchain's llvm-tools ($SYMMEM_DEVICE_TOOLCHAIN, else symmem-build's
# PINNED_NIGHTLY), or from $LLVM_OBJDUMP and $LLVM_READOBJ when set.
#
# Prints one line per file; exits 0 when every file is the same code, 1 on a
# difference or a missing file, 2 on a usage error.
set -eu

if [ "$#" -lt 2 ]; then
    echo "usage: $0 OLD_DIR NEW_DIR [NEW_DIR..]" >&2
    exit 2
fi
for dir in "$@"; do
    if [ ! -d "$dir" ]; then
        echo "$0: not a directory: $dir" >&2
        exit 2
    fi
done
old_dir=$1
shift
here=$(cd "$(dirname "$0")" && pwd)

tools() {
    toolchain=${SYMMEM_DEVICE_TOOLCHAIN:-$(sed -n 's/^pub const PINNED_NIGHTLY: &str = "\(.*\)";$/\1/p' "$here/build/src/toolchain.rs")}
    bin=$(dirname "$(ls "$(rustc +"$toolchain" --print sysroot)"/lib/rustlib/*/bin/llvm-objdump | head -n 1)")
    LLVM_OBJDUMP=${LLVM_OBJDUMP:-$bin/llvm-objdump}
    LLVM_READOBJ=${LLVM_READOBJ:-$bin/llvm-readobj}
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Rust's symbol hashes: the legacy mangling's `17h<16 hex>E`, the v0 mangling's
# crate disambiguators (`Cs<base-62>_` inside an `_R` symbol), and the hash in the
# names of anonymous constants (`anon_$_<32 hex>_$_N`), which move with a crate's
# contents, dependencies and build settings.
normalise() {
    sed -e 's/17h[0-9a-f]\{16\}E/17hHASHE/g' \
        -e 's/anon_\$_[0-9a-f]\{32\}_\$_/anon_$_HASH_$_/g' \
        -e ':v' -e 's/\(_R[0-9A-Za-z_~]*\)Cs[0-9A-Za-z]\{1,\}_/\1C~_/' -e 'tv'
}

# Text of one function per line (newlines as \001), sorted. PTX: a function (or
# prototype, or global) starts at each top-level `.` directive; comments, blank lines
# and the function numbers in block labels (`$L__BB<n>_`) are dropped. Disassembly: a
# function starts at `ADDRESS <name>:`; addresses are dropped, encodings kept.
by_function() {
    awk -v kind="$1" '
        function flush() { if (chunk != "") print chunk; chunk = "" }
        kind == "ptx" {
            sub(/[ \t]*\/\/.*$/, "")
            if ($0 == "") next
            gsub(/\$L__BB[0-9]+_/, "$L__BB_")
            if (/^\./) flush()
        }
        kind == "asm" && /^[0-9a-f]+ <.*>:$/ { flush(); sub(/^[0-9a-f]+ /, "") }
        kind == "asm" { gsub(/\/\/ [0-9A-F]+:/, "//") }
        { chunk = chunk $0 "\001" }
        END { flush() }
    ' | sort
}

status=0
# $1: label, $2: kind (ptx or asm), $3 and $4: the normalised texts.
same() {
    if cmp -s "$3" "$4"; then
        echo "same: $1"
        return 0
    fi
    by_function "$2" <"$3" >"$3.sorted"
    by_function "$2" <"$4" >"$4.sorted"
    if cmp -s "$3.sorted" "$4.sorted"; then
        echo "same functions, other order: $1"
        return 0
    fi
    echo "DIFFERENT: $1"
    tr '\001' '\n' <"$3.sorted" >"$3.lines"
    tr '\001' '\n' <"$4.sorted" >"$4.lines"
    diff "$3.lines" "$4.lines" | head -n 40 || true
    status=1
}

found=0
for old in "$old_dir"/*.ptx "$old_dir"/*.hsaco; do
    [ -e "$old" ] || continue
    found=1
    name=$(basename "$old")
    new=
    for dir in "$@"; do
        if [ -e "$dir/$name" ]; then
            new=$dir/$name
            break
        fi
    done
    if [ -z "$new" ]; then
        echo "MISSING in every NEW_DIR: $name"
        status=1
        continue
    fi
    case $name in
    *.ptx)
        normalise <"$old" >"$work/old"
        normalise <"$new" >"$work/new"
        same "$name" ptx "$work/old" "$work/new"
        ;;
    *.hsaco)
        [ -n "${bin-}" ] || tools
        cpu=${name##*-}
        cpu=${cpu%.hsaco}
        for side in old new; do
            if [ "$side" = old ]; then file=$old; else file=$new; fi
            # Past the header that names the file.
            "$LLVM_OBJDUMP" -d --mcpu="$cpu" "$file" | sed -e '1,/^Disassembly of section/d' |
                normalise >"$work/$side.asm"
            "$LLVM_READOBJ" --notes "$file" | sed -e '/^File:/d' | normalise >"$work/$side.notes"
        done
        same "$name (disassembly)" asm "$work/old.asm" "$work/new.asm"
        sort "$work/old.notes" >"$work/old.notes.sorted"
        sort "$work/new.notes" >"$work/new.notes.sorted"
        if cmp -s "$work/old.notes" "$work/new.notes"; then
            echo "same: $name (notes)"
        elif cmp -s "$work/old.notes.sorted" "$work/new.notes.sorted"; then
            echo "same lines, other order: $name (notes)"
        else
            echo "DIFFERENT: $name (notes)"
            diff "$work/old.notes" "$work/new.notes" | head -n 40 || true
            status=1
        fi
        ;;
    esac
done
if [ "$found" = 0 ]; then
    echo "no .ptx or .hsaco in $old_dir" >&2
    exit 2
fi
exit "$status"
