//! Compiles the module's `core`-only guest-input parsers (memory table,
//! split and packed rings, device IOTLB) for the host, so that `cargo test` and cargo-fuzz can
//! exercise them without a kernel.
#![allow(dead_code)]

#[path = "../../../memory.rs"]
pub mod memory;
#[path = "../../../vring.rs"]
pub mod vring;
#[path = "../../../staged.rs"]
pub mod staged;
#[path = "../../../dirtylog.rs"]
pub mod dirtylog;
#[path = "../../../packed.rs"]
pub mod packed;
#[path = "../../../ring.rs"]
pub mod ring;
#[path = "../../../iotlb.rs"]
pub mod iotlb;
pub mod iotlb_model;

pub mod testmem;

#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod vring_tests;
#[cfg(test)]
mod dirtylog_tests;
#[cfg(test)]
mod random_tests;
#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod iotlb_tests;
#[cfg(test)]
mod parse_bench;
#[cfg(feature = "fuzz")]
pub mod fuzz;
#[cfg(feature = "fuzz")]
pub mod fuzz_iotlb;

