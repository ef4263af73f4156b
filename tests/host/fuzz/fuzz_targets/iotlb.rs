//! cargo fuzz target: see tests/host/src/fuzz_iotlb.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|inp: vnr_host_tests::fuzz_iotlb::IotlbInput| vnr_host_tests::fuzz_iotlb::run(inp));
