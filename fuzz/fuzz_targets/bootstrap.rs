//! The bootstraps' decoders: a UNIX-socket peer's stream of frames, the hub's verdicts,
//! the layout of an MPI gather from the lengths ranks announce, and the handshake's
//! messages from a connection to a group's socket.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symmem::fuzzing;

fuzz_target!(|input: (Vec<u8>, usize, Vec<u8>, u8, Vec<u64>)| {
    let (stream, max, verdict, world, announced) = input;
    fuzzing::scm_stream(&stream, max);
    fuzzing::unix_verdict(&verdict, usize::from(world));
    fuzzing::gather_layout(&announced, max);
    fuzzing::handshake(&stream);
});
