// SPDX-License-Identifier: GPL-2.0

//! Misc device nodes registered by hand: the drop-in `/dev/vhost-net`, and
//! on Linux 7.2 every node.
//!
//! QEMU (`-netdev tap,vhost=on` without `vhostfd`) and libvirt open
//! `/dev/vhost-net` themselves. The kernel crate's
//! [`MiscDeviceRegistration`] always asks for a dynamic minor, so this file
//! registers a `struct miscdevice` with the minor the C driver uses
//! (`VHOST_NET_MINOR`, 238) and the crate's file operations for the device.
//! Only one driver can hold a minor: while the C `vhost_net` is loaded,
//! registration fails with `EBUSY`.
//!
//! On 7.2 the crate's file operations name no owning module, so an open
//! file would not pin the module and `rmmod` could unload it under the file.
//! There the node carries its own copy of the operations with the owner set
//! (`compat::misc_fops`), and the main node is registered here too.
//!
//! [`MiscDeviceRegistration`]: kernel::miscdevice::MiscDeviceRegistration

use crate::compat;
use core::marker::PhantomData;
use kernel::{
    bindings,
    error::to_result,
    miscdevice::{MiscDevice, MiscDeviceOptions},
    prelude::*,
    types::Opaque,
};

/// The misc minor of `/dev/vhost-net`, from `<linux/miscdevice.h>`.
pub(crate) const VHOST_NET_MINOR: u32 = bindings::VHOST_NET_MINOR;

/// What the misc core keeps a pointer to: the device and, beside it, the
/// file operations it names.
#[repr(C)]
struct RawNode {
    /// The device. The misc core passes a pointer to it to `open` as the
    /// file's private data, which the crate's `open` casts to
    /// `MiscDeviceRegistration<T>`.
    misc: bindings::miscdevice,
    /// The operations `misc.fops` points to when `compat::misc_fops` had to
    /// copy them; unused otherwise.
    fops: bindings::file_operations,
}

/// A misc device node for device `T`, registered with the misc core.
///
/// # Invariants
///
/// `inner.misc` is a `struct miscdevice` registered with the misc core from
/// successful initialisation until drop. Its file operations are the kernel
/// crate's vtable for `T`, or a copy of it in `inner.fops` whose owner is
/// this module.
///
/// A `MiscNode` is dropped only at module exit (it lives in the module's
/// state): a file opened through it may keep using its file operations
/// after `misc_deregister`, until the file's last close, and an open file
/// holds a reference to the owning module, so module exit, and with it the
/// copy in `inner.fops`, waits for that close.
///
/// A pointer to `inner.misc` is a valid `MiscDeviceRegistration<T>`
/// (`#[repr(transparent)]` over `Opaque<bindings::miscdevice>`): that
/// vtable's `open` casts the `struct miscdevice` it is opened through to
/// one.
#[pin_data(PinnedDrop)]
pub(crate) struct MiscNode<T> {
    #[pin]
    inner: Opaque<RawNode>,
    _t: PhantomData<T>,
}

// SAFETY: `misc_deregister` may be called from any thread.
unsafe impl<T> Send for MiscNode<T> {}
// SAFETY: No method takes `&self`.
unsafe impl<T> Sync for MiscNode<T> {}

impl<T: MiscDevice> MiscNode<T> {
    /// Registers `/dev/NAME` for `T` on misc minor `minor`
    /// (`MISC_DYNAMIC_MINOR` for any). `EBUSY` if another driver holds the
    /// minor.
    pub(crate) fn register(name: &'static CStr, minor: u32) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            inner <- Opaque::try_ffi_init(move |slot: *mut RawNode| {
                let mut misc = MiscDeviceOptions { name }.into_raw::<T>();
                misc.minor = minor as i32;
                // SAFETY: `misc.fops` is the crate's static vtable. The
                // initializer may write to `slot`, so its `fops` field is
                // valid for writes, and it outlives every open file by the
                // type invariants (dropped only at module exit, which open
                // files hold off through the owner the copy names).
                misc.fops = unsafe { compat::misc_fops(misc.fops, &raw mut (*slot).fops) };
                // SAFETY: As above, for `misc`.
                unsafe { (&raw mut (*slot).misc).write(misc) };
                // SAFETY: `slot` holds a valid `struct miscdevice` whose
                // operations live as long as it does, and is pinned;
                // `PinnedDrop` deregisters it before it is freed.
                // INVARIANT: on success it is registered.
                to_result(unsafe { bindings::misc_register(&raw mut (*slot).misc) })
            }),
            _t: PhantomData,
        })
    }
}

#[pinned_drop]
impl<T> PinnedDrop for MiscNode<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered, by the type invariants.
        unsafe { bindings::misc_deregister(&raw mut (*self.inner.get()).misc) };
    }
}
