//! Agreements: every rank's ledger proposal, decoded and decided on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symmem::fuzzing;

fuzz_target!(|contributions: Vec<Vec<u8>>| {
    // A world of at most 64 ranks: the decision compares every pair.
    fuzzing::agreement(&contributions[..contributions.len().min(64)]);
});
