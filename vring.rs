// SPDX-License-Identifier: GPL-2.0

//! The ring layer: everything that parses or writes guest- or
//! owner-supplied data, with `core` only.
//!
//! Everything here reads memory that the guest or the device's owner
//! writes, so nothing read is trusted: every index is bounded by the ring
//! size, every chain is bounded in length, every address goes through the
//! memory table (or the IOTLB), and every sum is checked. A malformed ring
//! yields a [`VringError`]; the caller signals the queue's error eventfd and
//! stops processing that ring.
//!
//! No file in this folder uses the `kernel` crate. Memory is reached through
//! the [`UserMemory`] trait, implemented over the owner's address space by
//! the glue layer (`tap_glue/uaccess.rs`) and over a plain buffer in the
//! host tests (`tests/host`), so the same parsers run in the module, under
//! `cargo test` and under cargo-fuzz. `tests/host` includes this folder as
//! one module tree.
//!
//! Ring indices and flags are read and written with single-copy-atomic
//! 16-bit accesses ([`UserMemory::read_u16`]/[`UserMemory::write_u16`]),
//! ordered by the barriers the virtio spec requires.
//!
//! - [`chain`]: descriptors, chains, iovecs, used elements, the bounded
//!   chain walk;
//! - [`split`] and [`packed`]: the two ring formats; [`ring`]: either;
//! - [`mem_table`]: the owner's memory table (`VHOST_SET_MEM_TABLE`);
//! - [`iotlb`]: the device IOTLB's table and its messages;
//! - [`dirty_log`]: the migration log;
//! - [`net_hdr`]: the virtio-net header;
//! - [`staged`]: used entries staged before they are written, the one
//!   `unsafe` in this layer;
//! - [`error`], [`features`], [`user_memory`]: the vocabulary they share.

pub(crate) mod chain;
pub(crate) mod dirty_log;
pub(crate) mod error;
pub(crate) mod features;
pub(crate) mod iotlb;
pub(crate) mod mem_table;
pub(crate) mod net_hdr;
pub(crate) mod packed;
pub(crate) mod ring;
pub(crate) mod split;
pub(crate) mod staged;
pub(crate) mod user_memory;

pub(crate) use chain::{
    positions, segments_from, Chain, ChainBuilder, IndirectTable, Iov, UsedElem, DESC_F_INDIRECT,
    DESC_F_NEXT, DESC_F_WRITE, DESC_SIZE, MAX_SEGMENTS,
};
pub(crate) use error::{Stop, VringError};
pub(crate) use features::Features;
pub(crate) use split::{RingLayout, SplitRing, MAX_NUM};
pub(crate) use user_memory::{read_16_flags_first, Store8, UserMemory};
