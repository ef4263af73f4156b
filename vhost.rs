// SPDX-License-Identifier: GPL-2.0

//! The vhost core: what any vhost device shares (C's
//! `drivers/vhost/vhost.c`), with nothing specific to networking.
//!
//! - [`dev`]: the device's control-plane state and the rules of its
//!   ioctls (owner, memory table, features, log);
//! - [`virtqueue`]: one queue: its configuration rules (`config`), and a run
//!   of its data path (`run`), which a device-specific [`virtqueue::Backend`]
//!   fills in;
//! - [`device_iotlb`]: the device IOTLB as a device serves it: per-queue
//!   tables and the channel that carries misses to userspace;
//! - [`uapi`]: the vhost ioctl ABI, decoded from user bytes.
//!
//! # Lock order
//!
//! 1. The device's control-plane mutex (`VhostNet::state` for the net
//!    device), held for one ioctl or one IOTLB message.
//! 2. A queue's lock (`VirtQueue::state`), also held by its worker while it
//!    processes the ring.
//! 3. The device IOTLB's miss channel (`MissChannel`), taken by a worker
//!    to post a miss, and by `read()`, `poll()` and updates.
//!
//! Never the other way round; workers never take the device's mutex, and no
//! code holds two queue locks at once.

pub(crate) mod dev;
pub(crate) mod device_iotlb;
pub(crate) mod uapi;
pub(crate) mod virtqueue;
