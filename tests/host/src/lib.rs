//! Compiles the module's `core`-only parsing code for the host, so that
//! `cargo test` (and later cargo-fuzz) can exercise it without a kernel.
#![allow(dead_code)]

#[path = "../../../memory.rs"]
pub mod memory;

#[cfg(test)]
mod memory_tests;
