// SPDX-License-Identifier: GPL-2.0

//! Polling another file's wait queue: `vhost_poll` in Rust.
//!
//! A [`FilePoll`] links an entry on a file's wait queue (an eventfd for
//! kicks, the tap for packets and for send space) and wakes a queue's
//! [`Waker`] when the file signals one of the events it waits for.

use crate::tap_glue::worker::Waker;
use core::{
    cell::Cell,
    ffi::c_void,
    sync::atomic::{AtomicBool, Ordering::Relaxed},
};
use kernel::{
    bindings,
    ffi::{c_int, c_uint},
    fs::File,
    prelude::*,
    sync::{aref::ARef, Arc},
    types::Opaque,
};

// Poll events, as `__poll_t` bits. The uapi header defines them with a
// `(__force __poll_t)` cast that bindgen cannot evaluate, so they are
// written here and `vnr_shim.c` asserts at compile time that they match.
/// `EPOLLIN`.
pub(crate) const POLLIN: u32 = 0x0001;
/// `EPOLLOUT`.
pub(crate) const POLLOUT: u32 = 0x0004;
/// `EPOLLRDNORM`.
pub(crate) const POLLRDNORM: u32 = 0x0040;
/// `EPOLLERR`.
pub(crate) const POLLERR: u32 = 0x0008;
/// `DEFAULT_POLLMASK`: what `vfs_poll` reports for a file without a `poll`
/// method (`EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLWRNORM`).
const DEFAULT_POLLMASK: u32 = 0x0001 | 0x0004 | 0x0040 | 0x0100;

/// A file that may be polled by a [`FilePoll`]: one whose wait queues live
/// as long as the file. Files that free a wait queue while open, and say so
/// with `POLLFREE` (signalfd, for one), are never wrapped.
///
/// # Invariants
///
/// The wait queues `file`'s `poll` registers stay valid while `file` is
/// held.
pub(crate) struct PollableFile(ARef<File>);

impl PollableFile {
    /// # Safety
    ///
    /// The wait queues that `file`'s `poll` registers must stay valid while
    /// the file is held.
    pub(crate) unsafe fn new(file: ARef<File>) -> Self {
        // INVARIANT: the caller's guarantee.
        Self(file)
    }
}

/// A wait-queue entry on `file` that wakes `waker` on the events of `mask`.
///
/// # Invariants
///
/// `wqh`, once non-null, is the wait queue head that `file`'s `poll`
/// registered, which stays valid while `file` is held (the
/// [`PollableFile`] invariant). `wait` is linked on it exactly while
/// `linked` is true. `wqh` is only written by the file's `poll` during
/// [`FilePoll::start`], before the entry can be reached from elsewhere;
/// after that `linked` only changes through [`FilePoll::leave`] and
/// [`FilePoll::listen`], which take the poll exclusively.
#[pin_data(PinnedDrop)]
pub(crate) struct FilePoll {
    #[pin]
    wait: Opaque<bindings::wait_queue_entry>,
    #[pin]
    table: Opaque<bindings::poll_table_struct>,
    wqh: Cell<*mut bindings::wait_queue_head>,
    file: PollableFile,
    mask: u32,
    waker: Arc<Waker>,
    /// Whether `wait` is on `wqh`; see [`FilePoll::leave`].
    linked: Cell<bool>,
    /// Whether events wake the worker; see [`FilePoll::quiet`].
    ///
    /// A `core` atomic, unlike the module's others: the callback reads it
    /// for every packet the tap queues while we are on its wait queue, and
    /// every RX run writes it, and
    /// each access to a `kernel::sync::atomic` is a call into a C helper,
    /// which a module cannot inline. Relaxed, a core atomic's load and
    /// store are the plain accesses `READ_ONCE` and `WRITE_ONCE` make; the
    /// ordering with the worker's look at the tap is [`FilePoll::listen`]'s
    /// full barrier.
    armed: AtomicBool,
}

// SAFETY: `wqh` and `linked` are only used under the rules in the type
// invariants; the wait-queue lock serialises the callback with removal.
unsafe impl Send for FilePoll {}
// SAFETY: See above; `wqh` is only written during `start`, before sharing,
// and `linked` only by `leave` and `listen`, which take the poll
// exclusively (the callback, which shares it, reads neither; `armed` is
// atomic).
unsafe impl Sync for FilePoll {}

/// The poll-table callback: links our entry on the file's wait queue.
///
/// # Safety
///
/// `pt` must be the `table` of a pinned, live [`FilePoll`].
unsafe extern "C" fn poll_queue_proc(
    _file: *mut bindings::file,
    wqh: *mut bindings::wait_queue_head,
    pt: *mut bindings::poll_table_struct,
) {
    // SAFETY: `pt` is the `table` field of a pinned `FilePoll`, passed by us
    // to the file's `poll` in `FilePoll::start`.
    let poll = unsafe { &*kernel::container_of!(Opaque::cast_from(pt), FilePoll, table) };
    if !poll.wqh.get().is_null() {
        // A file that registers two queues; one is all we need.
        return;
    }
    poll.wqh.set(wqh);
    // SAFETY: `wqh` is a live wait queue head of the file being polled, and
    // `wait` is an initialised, unlinked entry.
    unsafe { bindings::add_wait_queue(wqh, poll.wait.get()) };
    // INVARIANT: linked just now.
    poll.linked.set(true);
}

/// The wait-queue callback: wakes the worker on a matching event.
///
/// # Safety
///
/// `wait` must be the `wait` of a live [`FilePoll`], as linked by
/// [`poll_queue_proc`].
unsafe extern "C" fn poll_wakeup(
    wait: *mut bindings::wait_queue_entry,
    _mode: c_uint,
    _sync: c_int,
    key: *mut c_void,
) -> c_int {
    // SAFETY: `wait` is the `wait` field of a `FilePoll` linked by
    // `poll_queue_proc`; it is unlinked (under the wait-queue lock that is
    // held while we run) before the `FilePoll` is freed.
    let poll = unsafe { &*kernel::container_of!(Opaque::cast_from(wait), FilePoll, wait) };
    // The key is the event mask, passed as a pointer-sized integer.
    let events = key as usize as u32;
    if (events != 0 && events & poll.mask == 0) || !poll.armed.load(Relaxed) {
        return 0;
    }
    poll.waker.wake();
    0
}

impl FilePoll {
    /// Starts polling `file` for `mask`, waking `waker` on each event; wakes
    /// it at once if the file is already ready. `-EINVAL` if the file reports
    /// an error.
    pub(crate) fn start(
        file: PollableFile,
        mask: u32,
        waker: Arc<Waker>,
    ) -> Result<Pin<KBox<Self>>> {
        let poll = KBox::pin_init(
            pin_init!(FilePoll {
                wait <- Opaque::ffi_init(|entry: *mut bindings::wait_queue_entry| {
                    // SAFETY: `entry` is valid for writes; this is
                    // `init_waitqueue_func_entry`.
                    unsafe {
                        entry.write(bindings::wait_queue_entry {
                            flags: 0,
                            private: core::ptr::null_mut(),
                            func: Some(poll_wakeup),
                            entry: bindings::list_head {
                                next: core::ptr::null_mut(),
                                prev: core::ptr::null_mut(),
                            },
                        })
                    }
                }),
                table <- Opaque::ffi_init(move |table: *mut bindings::poll_table_struct| {
                    // SAFETY: `table` is valid for writes; this is
                    // `init_poll_funcptr` plus the key.
                    unsafe {
                        table.write(bindings::poll_table_struct {
                            _qproc: Some(poll_queue_proc),
                            _key: mask,
                        })
                    }
                }),
                wqh: Cell::new(core::ptr::null_mut()),
                file,
                mask,
                waker,
                linked: Cell::new(false),
                armed: AtomicBool::new(true),
            }),
            GFP_KERNEL,
        )?;
        // vfs_poll(): call the file's poll with our table.
        let raw_file = poll.file.0.as_ptr();
        // SAFETY: `raw_file` is a live file we hold a reference on; `f_op`
        // is always set on an open file, and `table` is pinned in `poll`,
        // which unlinks the entry before it is freed.
        let ready = unsafe {
            match (*(*raw_file).f_op).poll {
                Some(file_poll) => file_poll(raw_file, poll.table.get()),
                None => DEFAULT_POLLMASK,
            }
        };
        if ready & POLLERR != 0 {
            return Err(EINVAL);
        }
        if ready & mask != 0 {
            poll.waker.wake();
        }
        Ok(poll)
    }

    /// Stops waking the worker, staying on the file's wait queue: the RX
    /// worker ignores the tap while it drains it, as C's handle_rx does
    /// with `vhost_net_disable_vq`, instead of being woken for every
    /// packet. Two stores per run where a run moves one packet (a round
    /// trip); a run that finds more also [`FilePoll::leave`]s the queue.
    pub(crate) fn quiet(&self) {
        self.armed.store(false, Relaxed);
    }

    /// Leaves the file's wait queue (`vhost_poll_stop`), so that a sender
    /// that finds it empty skips the wakeup entirely (`skwq_has_sleeper`)
    /// instead of taking the queue's lock and running our callback for
    /// every packet on the sender's CPU while the RX worker drains a busy
    /// tap.
    pub(crate) fn leave(self: Pin<&mut Self>) {
        // Nothing is moved out: only the `Cell`s are used.
        let this = self.into_ref().get_ref();
        let wqh = this.wqh.get();
        if wqh.is_null() || !this.linked.get() {
            return;
        }
        // SAFETY: By the type invariant `wait` is linked on `wqh`, which is
        // valid; the wait-queue lock it takes waits out a callback running
        // on another CPU.
        unsafe { bindings::remove_wait_queue(wqh, this.wait.get()) };
        // INVARIANT: unlinked just now; `self` is exclusive.
        this.linked.set(false);
    }

    /// Wakes the worker on events again, back on the file's wait queue if
    /// it left it (`vhost_poll_start`). The caller must then look at the
    /// file once more: the full barrier here pairs with the one in
    /// `skwq_has_sleeper`, so either that look sees the new event or the
    /// sender sees the entry linked and armed and wakes us.
    pub(crate) fn listen(self: Pin<&mut Self>) {
        let this = self.into_ref().get_ref();
        let wqh = this.wqh.get();
        if !wqh.is_null() && !this.linked.get() {
            // SAFETY: By the type invariant `wqh` is valid while `file` is
            // held, and `wait` is not linked (`linked` is false); it was
            // initialised in `start` and unlinked by `remove_wait_queue`.
            unsafe { bindings::add_wait_queue(wqh, this.wait.get()) };
            // INVARIANT: linked just now; `self` is exclusive.
            this.linked.set(true);
        }
        this.armed.store(true, Relaxed);
        crate::tap_glue::compat::smp_mb();
    }
}

#[pinned_drop]
impl PinnedDrop for FilePoll {
    fn drop(self: Pin<&mut Self>) {
        let wqh = self.wqh.get();
        if !wqh.is_null() && self.linked.get() {
            // SAFETY: By the type invariant `wait` is linked on `wqh`, which
            // is still valid because `file` is dropped after this.
            unsafe { bindings::remove_wait_queue(wqh, self.wait.get()) };
        }
    }
}
