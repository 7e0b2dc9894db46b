//! The off-node engine's wire: a peer's request applied to this rank's heap, and a
//! target's reply to this rank's request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symmem::fuzzing;

fuzz_target!(|input: (Vec<u8>, usize, u8, Vec<u8>)| {
    let (message, heap_len, from, reply) = input;
    fuzzing::engine_wire(&message, heap_len, usize::from(from), &reply);
});
