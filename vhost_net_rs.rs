// SPDX-License-Identifier: GPL-2.0

//! vhost-net-rs: the vhost-net data path, in Rust.
//!
//! Registers the misc device `/dev/vhost-net-rs`, which speaks the vhost ioctl
//! ABI of the in-tree `/dev/vhost-net` (Linux 7.3 `drivers/vhost/net.c`), so
//! that an unmodified QEMU can use it through `-netdev tap,vhostfd=N`. With
//! `drop_in=1` it serves `/dev/vhost-net` too, in place of the C driver.
//!
//! This file is the crate root only: the module's declaration and
//! parameters, read once here and passed down as values, and its layers,
//! each a folder, each using only the layers below it:
//!
//! - [`net`]: virtio-net (C's `drivers/vhost/net.c`): the misc device,
//!   `VHOST_NET_SET_BACKEND`, TX and RX;
//! - [`vhost`]: the vhost core any vhost device would share (C's
//!   `drivers/vhost/vhost.c`): device state and its ioctls, the virtqueue's
//!   configuration rules and its run, the device IOTLB channel, the ABI;
//! - [`tap_glue`]: the kernel's C API, the only layer that calls C or has
//!   unsafe code (but for one documented block in the ring layer): tap
//!   sockets, eventfds, file polling, workers, user memory, the misc nodes,
//!   the C shim;
//! - [`vring`]: the `core`-only parsers of guest input (rings, memory
//!   table, IOTLB, dirty log), host-tested and fuzzed.

module! {
    type: VhostNetModule,
    name: "vhost_net_rs",
    authors: ["The vhost-net-rs developers"],
    description: "vhost-net data path in Rust: /dev/vhost-net-rs, ABI-compatible with /dev/vhost-net",
    license: "GPL",
    // Those of the C vhost_net, so that opening /dev/vhost-net loads this
    // module too where it is installed; only with drop_in=1 does it take
    // the node (see misc_node.rs). The parameters (drop_in,
    // max_mem_regions, max_iotlb_entries, workers) are declared in the C shim, so
    // that they show under /sys/module/vhost_net_rs/parameters/.
    alias: ["devname:vhost-net", "char-major-10-238"],
}

mod net;
mod tap_glue;
mod vhost;
mod vring;

use kernel::prelude::*;
use net::device::{DevNodes, VhostNet};
use tap_glue::shim;
use vhost::dev::Limits;

#[pin_data]
struct VhostNetModule {
    #[pin]
    nodes: DevNodes,
}

impl kernel::InPlaceModule for VhostNetModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        let mut params = shim::params();
        let limits = Limits::new(params.max_mem_regions, params.max_iotlb_entries);
        params.max_mem_regions = limits.mem_regions as u32;
        params.max_iotlb_entries = limits.iotlb_entries as u32;
        params.workers = VhostNet::workers(params.workers);
        shim::set_effective_params(&params);
        let drop_in = params.drop_in;
        try_pin_init!(Self {
            nodes <- VhostNet::register(limits, drop_in, params.workers),
        })
        .pin_chain(move |_| {
            shim::announce(drop_in == 1);
            Ok(())
        })
    }
}
