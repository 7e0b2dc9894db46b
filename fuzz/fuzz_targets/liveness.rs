//! The identities ranks exchange for the liveness watchdog.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symmem::fuzzing;

fuzz_target!(|bytes: &[u8]| fuzzing::identity(bytes));
