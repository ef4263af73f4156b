// SPDX-License-Identifier: GPL-2.0

//! The drop-in node: `/dev/vhost-net` on the misc minor the C driver uses
//! (`VHOST_NET_MINOR`, 238), served by vhost-net-rs.
//!
//! QEMU (`-netdev tap,vhost=on` without `vhostfd`) and libvirt open
//! `/dev/vhost-net` themselves. The kernel crate's
//! [`MiscDeviceRegistration`] always asks for a dynamic minor, so this file
//! registers a second `struct miscdevice` with the fixed minor and the same
//! file operations. Only one driver can hold a minor: while the C
//! `vhost_net` is loaded, registration fails with `EBUSY`.
//!
//! [`MiscDeviceRegistration`]: kernel::miscdevice::MiscDeviceRegistration

use core::marker::PhantomData;
use kernel::{
    bindings,
    error::to_result,
    miscdevice::{MiscDevice, MiscDeviceOptions},
    prelude::*,
    types::Opaque,
};

/// The misc minor of `/dev/vhost-net`, from `<linux/miscdevice.h>`.
const VHOST_NET_MINOR: u32 = bindings::VHOST_NET_MINOR;

/// `/dev/vhost-net`, registered with the misc core for device `T`.
///
/// # Invariants
///
/// `inner` is a `struct miscdevice` registered with the misc core, whose
/// file operations are the kernel crate's vtable for `T`, from successful
/// initialisation until drop.
///
/// This type has the layout of `MiscDeviceRegistration<T>`
/// (`#[repr(transparent)]` over `Opaque<bindings::miscdevice>`): that
/// vtable's `open` casts the `struct miscdevice` it is opened through to a
/// `MiscDeviceRegistration<T>`.
#[repr(transparent)]
#[pin_data(PinnedDrop)]
pub(crate) struct DropInNode<T> {
    #[pin]
    inner: Opaque<bindings::miscdevice>,
    _t: PhantomData<T>,
}

// SAFETY: `misc_deregister` may be called from any thread.
unsafe impl<T> Send for DropInNode<T> {}
// SAFETY: No method takes `&self`.
unsafe impl<T> Sync for DropInNode<T> {}

impl<T: MiscDevice> DropInNode<T> {
    /// Registers `/dev/vhost-net` for `T`. `EBUSY` if another driver (the
    /// C `vhost_net`) holds the minor.
    pub(crate) fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            inner <- Opaque::try_ffi_init(move |slot: *mut bindings::miscdevice| {
                let mut raw = MiscDeviceOptions { name: c"vhost-net" }.into_raw::<T>();
                raw.minor = VHOST_NET_MINOR as i32;
                // SAFETY: The initializer may write to `slot`.
                unsafe { slot.write(raw) };
                // SAFETY: `slot` holds a valid `struct miscdevice` and is
                // pinned; `PinnedDrop` deregisters it before it is freed.
                // INVARIANT: on success it is registered.
                to_result(unsafe { bindings::misc_register(slot) })
            }),
            _t: PhantomData,
        })
    }
}

#[pinned_drop]
impl<T> PinnedDrop for DropInNode<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered, by the type invariants.
        unsafe { bindings::misc_deregister(self.inner.get()) };
    }
}
