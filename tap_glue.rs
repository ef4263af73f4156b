// SPDX-License-Identifier: GPL-2.0

//! The glue layer: the only code that calls the kernel's C API.
//!
//! Every `bindings::` use, raw pointer and `unsafe` block of the module
//! (but for the ring layer's one documented exception, `vring/staged.rs`)
//! lies in this folder. Each C object the module holds is wrapped here in
//! an owning type whose `Drop` releases it; the layers above see safe
//! types only.
//!
//! - [`tap`], [`tx_batch`], [`rx_batch`]: the tun/macvtap socket;
//! - [`eventfd`]: kick, call and error eventfds;
//! - [`file_poll`]: polling another file's wait queue (the kick eventfd,
//!   the tap);
//! - [`worker`]: the per-queue workers (`vhost_task` or kthread);
//! - [`uaccess`]: the owner's user memory, and the capability that says the
//!   current address space is the owner's;
//! - [`misc_node`]: the misc device nodes;
//! - [`shim`] and `vnr_shim.c`: what bindgen cannot reach (16-bit user
//!   accesses, `vhost_task`, inline helpers);
//! - [`compat`]: what differs between the Linux 7.2 and 7.3 kernel crates.

pub(crate) mod compat;
pub(crate) mod eventfd;
pub(crate) mod file_poll;
pub(crate) mod misc_node;
pub(crate) mod rx_batch;
pub(crate) mod shim;
pub(crate) mod tap;
pub(crate) mod tx_batch;
pub(crate) mod uaccess;
pub(crate) mod worker;
