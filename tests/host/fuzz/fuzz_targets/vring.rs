//! cargo fuzz target: see tests/host/src/fuzz.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|inp: vnr_host_tests::fuzz::Input| vnr_host_tests::fuzz::run(inp));
