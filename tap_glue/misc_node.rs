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
    sync::LockClassKey,
    task::TASK_NORMAL,
    types::{ForeignOwnable, Opaque},
};

/// The misc minor of `/dev/vhost-net`, from `<linux/miscdevice.h>`.
pub(crate) const VHOST_NET_MINOR: u32 = bindings::VHOST_NET_MINOR;
/// Any free minor (`MISC_DYNAMIC_MINOR`).
pub(crate) const DYNAMIC_MINOR: u32 = bindings::MISC_DYNAMIC_MINOR;

/// A misc device whose files can be polled.
pub(crate) trait PollableDevice: MiscDevice {
    /// `poll()` on a file of the device: registers the poller on the
    /// device's [`PollQueue`] with `wait`, and returns the `EPOLL*` events
    /// ready now.
    fn poll(device: <Self::Ptr as ForeignOwnable>::Borrowed<'_>, wait: &PollWait<'_>) -> u32;
}

/// The wait queue `poll()` registers on, owned by the device of an open
/// file: the C driver's `vhost_dev::wait`.
///
/// The kernel crate's `PollCondVar` cannot know when its last poller is
/// gone, so its destructor waits for an RCU grace period (or, boxed,
/// defers its free past one). A device's queue knows: it is freed with
/// the device, at the file's release, when epoll has removed its entries
/// (`eventpoll_release`, before `->release`) and no `poll()` or `select()`
/// can hold one (they hold a reference to the file while their entries
/// exist). Freed at once, it leaves nothing behind for each closed file
/// (the boxed `PollCondVar` left about 150 bytes per file in the slab for
/// seconds, which the open/close leak tests saw).
///
/// # Invariants
///
/// `head` is an initialised `wait_queue_head`, and it is dropped only after
/// every file whose `poll()` may have registered on it has been released
/// (the contract of [`PollQueue::new`]).
#[pin_data]
pub(crate) struct PollQueue {
    #[pin]
    head: Opaque<bindings::wait_queue_head>,
}

// SAFETY: A wait queue is used from any thread, under its own spinlock.
unsafe impl Send for PollQueue {}
// SAFETY: As above.
unsafe impl Sync for PollQueue {}

impl PollQueue {
    /// A new queue.
    ///
    /// # Safety
    ///
    /// The queue must be dropped only after every file whose `poll()` may
    /// register on it (through [`PollWait::register`]) has been released:
    /// it must belong to those files' device.
    pub(crate) unsafe fn new(name: &'static CStr, key: Pin<&'static LockClassKey>) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `slot` is valid for writes; `__init_waitqueue_head`
            // initialises it, with a name and a lock class that are static.
            head <- Opaque::ffi_init(|slot| unsafe {
                bindings::__init_waitqueue_head(slot, name.as_char_ptr(), key.as_ptr())
            }),
        })
    }

    /// Wakes every poller (and every task waiting on the queue).
    pub(crate) fn wake(&self) {
        // SAFETY: `head` is initialised (type invariants).
        unsafe { bindings::__wake_up(self.head.get(), TASK_NORMAL, 0, core::ptr::null_mut()) };
    }
}

/// The poll table of one `poll()` call on a file of a [`MiscNode`].
///
/// # Invariants
///
/// `file` is the file being polled and `table` null or a valid
/// `poll_table`, both for `'a`.
pub(crate) struct PollWait<'a> {
    file: *mut bindings::file,
    table: *mut bindings::poll_table_struct,
    _call: PhantomData<&'a ()>,
}

impl PollWait<'_> {
    /// Registers the poller on `queue`.
    pub(crate) fn register(&self, queue: &PollQueue) {
        // SAFETY: `file` and `table` are valid for the call (type
        // invariants); `queue` is initialised and outlives the entry,
        // which lives no longer than the file (`PollQueue::new`'s
        // contract).
        unsafe { bindings::poll_wait(self.file, queue.head.get(), self.table) };
    }
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
    // INVARIANT: the file and the table are valid for the call (safety
    // requirements).
    let wait = PollWait { file, table, _call: PhantomData };
    T::poll(device, &wait)
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
