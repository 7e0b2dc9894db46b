//! The bytes GPU backends put in a `Shareable`: IPC exports and heap sizes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symmem::fuzzing;

fuzz_target!(|input: (Vec<u8>, usize)| {
    let (bytes, covering) = input;
    fuzzing::handle_bytes(&bytes, covering);
});
