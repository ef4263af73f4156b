// SPDX-License-Identifier: GPL-2.0

//! The module's misc device nodes, registered by hand: `/dev/vhost-net-rs`
//! and, with `drop_in=1`, `/dev/vhost-net`.
//!
//! The kernel crate's [`MiscDeviceRegistration`] does not fit, for three
//! reasons:
//!
//! - **`poll`.** Its file operations have no `poll` hook (Linux 7.2 and
//!   7.3), and the vhost fd must be pollable: QEMU waits for device IOTLB
//!   misses in its main loop, which polls the fd. Each node here carries a
//!   copy of the crate's operations with `poll` added ([`PollableDevice`]),
//!   so everything else (open, release, ioctl, read/write, fdinfo) stays
//!   the crate's. Registering the node through a C shim with Rust handlers
//!   behind it was the alternative; copying the table keeps the crate's
//!   handlers, and their `SAFETY` reasoning, in charge, and adds one
//!   function.
//! - **The minor.** QEMU (`-netdev tap,vhost=on` without `vhostfd`) and
//!   libvirt open `/dev/vhost-net` themselves; the crate always asks for a
//!   dynamic minor, and the drop-in node needs the C driver's
//!   (`VHOST_NET_MINOR`, 238). Only one driver can hold a minor: while the C
//!   `vhost_net` is loaded, registration fails with `EBUSY`.
//! - **The owner.** On 7.2 the crate's operations name no owning module,
//!   so an open file would not pin the module and `rmmod` could unload it
//!   under the file. The copy names this module on either release.
//!
//! [`MiscDeviceRegistration`]: kernel::miscdevice::MiscDeviceRegistration

use core::marker::PhantomData;
use kernel::{
    bindings,
    error::to_result,
    fs::{file::flags::O_NONBLOCK, File, Kiocb},
    miscdevice::{MiscDevice, MiscDeviceOptions},
    prelude::*,
    sync::poll::PollTable,
    types::{ForeignOwnable, Opaque},
};

/// The misc minor of `/dev/vhost-net`, from `<linux/miscdevice.h>`.
pub(crate) const VHOST_NET_MINOR: u32 = bindings::VHOST_NET_MINOR;
/// Any free minor (`MISC_DYNAMIC_MINOR`).
pub(crate) const DYNAMIC_MINOR: u32 = bindings::MISC_DYNAMIC_MINOR;

/// A misc device whose files can be polled.
pub(crate) trait PollableDevice: MiscDevice {
    /// `poll()` on `file`, a file of the device: registers the poller with
    /// `table` on a wait queue of the device, and returns the `EPOLL*`
    /// events ready now.
    fn poll(
        device: <Self::Ptr as ForeignOwnable>::Borrowed<'_>,
        file: &File,
        table: &PollTable<'_>,
    ) -> u32;
}

/// Whether the file of a `read()` or `write()` was opened (or set)
/// `O_NONBLOCK`.
pub(crate) fn nonblocking<T: ForeignOwnable>(kiocb: &Kiocb<'_, T>) -> bool {
    // SAFETY: The kiocb of a read or write in progress is valid and names
    // the file being read or written, which stays open for the call.
    let file = unsafe { File::from_raw_file((*kiocb.as_raw()).ki_filp) };
    file.flags() & O_NONBLOCK != 0
}

/// The `poll` file operation of device `T`.
///
/// # Safety
///
/// `file` is a file of a [`MiscNode<T>`], opened (so its private data is
/// the device, as the kernel crate's `open` stored it), and `table` is
/// null or a valid `poll_table`, both for the duration of the call.
unsafe extern "C" fn poll_fn<T: PollableDevice>(
    file: *mut bindings::file,
    table: *mut bindings::poll_table_struct,
) -> bindings::__poll_t {
    // SAFETY: By the function's safety requirements, the file is open and
    // its private data is what the crate's `open` made of `T::Ptr` with
    // `into_foreign`; it is not released while the file is being polled.
    let device = unsafe { <T::Ptr as ForeignOwnable>::borrow((*file).private_data) };
    // SAFETY: The file is open for the call (safety requirements).
    let file = unsafe { File::from_raw_file(file) };
    // SAFETY: The table is null or valid for the call (safety
    // requirements).
    let table = unsafe { PollTable::from_raw(table) };
    T::poll(device, file, &table)
}

/// What the misc core keeps a pointer to: the device and, beside it, the
/// file operations it names.
#[repr(C)]
struct RawNode {
    /// The device. The misc core passes a pointer to it to `open` as the
    /// file's private data, which the crate's `open` casts to
    /// `MiscDeviceRegistration<T>`.
    misc: bindings::miscdevice,
    /// The operations `misc.fops` points to: the crate's, with this module
    /// as their owner and [`poll_fn`] added.
    fops: bindings::file_operations,
}

/// A misc device node for device `T`, registered with the misc core.
///
/// # Invariants
///
/// `inner.misc` is a `struct miscdevice` registered with the misc core from
/// successful initialisation until drop. Its file operations are
/// `inner.fops`: a copy of the kernel crate's vtable for `T` whose owner is
/// this module and whose `poll` is `poll_fn::<T>`.
///
/// A `MiscNode` is dropped only at module exit (it lives in the module's
/// state): a file opened through it may keep using its file operations
/// after `misc_deregister`, until the file's last close, and an open file
/// holds a reference to the owning module, so module exit, and with it
/// `inner.fops`, waits for that close.
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

impl<T: PollableDevice> MiscNode<T> {
    /// Registers `/dev/NAME` for `T` on misc minor `minor`
    /// (`MISC_DYNAMIC_MINOR` for any). `EBUSY` if another driver holds the
    /// minor.
    pub(crate) fn register(name: &'static CStr, minor: u32) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            inner <- Opaque::try_ffi_init(move |slot: *mut RawNode| {
                let mut misc = MiscDeviceOptions { name }.into_raw::<T>();
                misc.minor = minor as i32;
                // SAFETY: `misc.fops` is the crate's static vtable, valid
                // for reads. The initializer may write to `slot`, so its
                // `fops` field is valid for writes; it outlives every open
                // file by the type invariants (dropped only at module exit,
                // which open files hold off through the owner set here).
                unsafe {
                    let mut fops = core::ptr::read(misc.fops);
                    crate::tap_glue::compat::own_fops(&mut fops);
                    fops.poll = Some(poll_fn::<T>);
                    (&raw mut (*slot).fops).write(fops);
                    misc.fops = &raw const (*slot).fops;
                }
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
