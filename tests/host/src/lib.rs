//! Compiles the module's `core`-only guest-input parsers (memory table and
//! split ring) for the host, so that `cargo test` and cargo-fuzz can
//! exercise them without a kernel.
#![allow(dead_code)]

#[path = "../../../memory.rs"]
pub mod memory;
#[path = "../../../vring.rs"]
pub mod vring;
#[path = "../../../dirtylog.rs"]
pub mod dirtylog;

pub mod testmem;

#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod vring_tests;
#[cfg(test)]
mod dirtylog_tests;
#[cfg(test)]
mod random_tests;
#[cfg(feature = "fuzz")]
pub mod fuzz;

