//! Compiles the module's ring layer (`vring.rs` and `vring/`: the `core`-only
//! guest-input parsers) for the host, so that `cargo test` and cargo-fuzz can
//! exercise them without a kernel.
#![allow(dead_code)]

/// The ring layer, `vring.rs` and its folder, as one module tree: an
/// inline module with a `path` makes `vring.rs` a non-`mod.rs` file of the
/// repository's root, so its submodules resolve to `vring/`, as in the
/// kernel build. The host tests use a part of what the layer exports to the
/// module, hence `unused_imports`.
#[path = "../../.."]
#[allow(unused_imports)]
pub mod module {
    pub mod vring;
}
pub use module::vring;

#[cfg(any(test, feature = "fuzz"))]
pub mod iotlb_model;

pub mod testmem;

#[cfg(test)]
mod dirtylog_tests;
#[cfg(feature = "fuzz")]
pub mod fuzz;
#[cfg(feature = "fuzz")]
pub mod fuzz_iotlb;
#[cfg(test)]
mod iotlb_tests;
#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod net_hdr_tests;
#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod parse_bench;
#[cfg(test)]
mod random_tests;
#[cfg(test)]
mod vring_tests;
