//! `ExternalTable::new`'s check of a user's peer-base table.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symmem::fuzzing;

fuzz_target!(|input: (u8, Vec<bool>, u64, Option<usize>, Vec<u64>)| {
    let (rank, on_node, local, bytes, entries) = input;
    fuzzing::external_table(usize::from(rank), &on_node, local, bytes, &entries);
});
