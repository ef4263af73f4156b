// SPDX-License-Identifier: GPL-2.0

//! FFI glue for what the `kernel` crate has no abstraction for yet:
//! eventfds, wait-queue polling of a file, and vhost_task workers.
//!
//! Each C object is wrapped in an owning type whose `Drop` releases it, so
//! the rest of the driver never touches a raw pointer.

use core::{
    cell::Cell,
    ffi::{c_char, c_int, c_uint, c_void},
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering},
};
use kernel::{
    bindings,
    error::from_err_ptr,
    fs::{File, LocalFile},
    prelude::*,
    sync::{
        aref::ARef,
        barrier::{smp_mb, Full},
        Arc,
    },
    types::Opaque,
};

pub(crate) const EPOLLIN: u32 = 0x0001;
pub(crate) const EPOLLOUT: u32 = 0x0004;
pub(crate) const EPOLLERR: u32 = 0x0008;
const DEFAULT_POLLMASK: u32 = 0x0001 | 0x0004 | 0x0040 | 0x0100;

/// Opaque `struct vhost_task` (kernel/vhost_task.c).
#[repr(C)]
pub(crate) struct RawVhostTask {
    _p: [u8; 0],
}

extern "C" {
    // include/linux/sched/vhost_task.h
    fn vhost_task_create(
        f: unsafe extern "C" fn(*mut c_void) -> bool,
        handle_kill: unsafe extern "C" fn(*mut c_void),
        arg: *mut c_void,
        name: *const c_char,
    ) -> *mut RawVhostTask;
    fn vhost_task_start(t: *mut RawVhostTask);
    fn vhost_task_stop(t: *mut RawVhostTask);
    fn vhost_task_wake(t: *mut RawVhostTask);
}

/// Takes a file reference for `fd` from the calling process's table.
pub(crate) fn fget(fd: i32) -> Result<ARef<File>> {
    let fd = u32::try_from(fd).map_err(|_| EBADF)?;
    let f = LocalFile::fget(fd).map_err(|_| EBADF)?;
    // SAFETY: Called from an ioctl, which does not hold an `fdget_pos` on
    // this thread.
    Ok(unsafe { LocalFile::assume_no_fdget_pos(f) })
}

/// The eventfd file behind `fd`, for polling it; `-EBADF` or `-EINVAL` if
/// it is not one.
pub(crate) fn eventfd_file(fd: i32) -> Result<ARef<File>> {
    // SAFETY: FFI call; any fd is accepted, errors come back as ERR_PTR.
    let p = from_err_ptr(unsafe { bindings::eventfd_fget(fd) })?;
    let p = NonNull::new(p).ok_or(EBADF)?;
    // SAFETY: `eventfd_fget` returned a file with a reference that we take
    // over; `File` is a transparent wrapper of `struct file`, and the
    // reference is not used for `fdget_pos`.
    Ok(unsafe { ARef::from_raw(p.cast::<File>()) })
}

/// A reference to an eventfd context, used to signal userspace.
///
/// # Invariants
///
/// `ctx` is a valid `struct eventfd_ctx` on which this object owns one
/// reference.
pub(crate) struct EventFd {
    ctx: NonNull<bindings::eventfd_ctx>,
}

// SAFETY: An eventfd context may be signalled and released from any thread.
unsafe impl Send for EventFd {}
// SAFETY: `eventfd_signal_mask` may be called concurrently.
unsafe impl Sync for EventFd {}

impl EventFd {
    /// The eventfd behind `fd`; `-EBADF` or `-EINVAL` if it is not one.
    pub(crate) fn from_fd(fd: i32) -> Result<Self> {
        // SAFETY: FFI call; any fd is accepted, errors come back as ERR_PTR.
        let p = from_err_ptr(unsafe { bindings::eventfd_ctx_fdget(fd) })?;
        // INVARIANT: `eventfd_ctx_fdget` returned a referenced context.
        Ok(Self { ctx: NonNull::new(p).ok_or(EINVAL)? })
    }

    /// Adds 1 to the counter and wakes readers.
    pub(crate) fn signal(&self) {
        // SAFETY: `ctx` is valid by the type invariant.
        unsafe { bindings::eventfd_signal_mask(self.ctx.as_ptr(), 0) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: We own one reference by the type invariant.
        unsafe { bindings::eventfd_ctx_put(self.ctx.as_ptr()) };
    }
}

/// Where wakeups go: a pending-work flag and the worker to wake.
///
/// Wakeups may come from any context, including hard wait-queue callbacks,
/// so this only touches atomics and calls `vhost_task_wake`.
pub(crate) struct Waker {
    pending: AtomicBool,
    task: AtomicPtr<RawVhostTask>,
    wakeups: AtomicU64,
}

impl Waker {
    pub(crate) const fn new() -> Self {
        Self {
            pending: AtomicBool::new(false),
            task: AtomicPtr::new(core::ptr::null_mut()),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Marks work pending and wakes the worker, if there is one. Work that
    /// is pending already has had its wakeup, and the worker takes the flag
    /// before it runs, so only the first of a burst of events wakes the
    /// task (as `VHOST_WORK_QUEUED` does in C).
    pub(crate) fn wake(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let t = self.task.load(Ordering::Acquire);
        if !t.is_null() {
            // SAFETY: `task` is only non-null between `Worker::start` and
            // the start of `Worker::drop`, which clears it before stopping
            // the task, and the task is freed only by that stop.
            unsafe { vhost_task_wake(t) };
        }
    }

    /// How many times `wake` was called (kicks, socket events, requeues).
    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Consumes the pending flag.
    pub(crate) fn take_pending(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }
}

/// Work run by a [`Worker`].
pub(crate) trait Work: Send + Sync {
    /// The waker whose pending flag starts a run.
    fn waker(&self) -> &Waker;
    /// Processes pending work. Called in the worker, in process context.
    fn run(&self);
}

/// A vhost_task: a kernel worker thread inside the owner process, sharing
/// its address space, accounted to it, and killed with it.
///
/// # Invariants
///
/// `task` was returned by `vhost_task_create` and started; it is stopped
/// exactly once, in `Drop`. `work` outlives the task.
pub(crate) struct Worker<T: Work> {
    task: NonNull<RawVhostTask>,
    work: Arc<T>,
}

// SAFETY: The vhost_task API may be used from any thread.
unsafe impl<T: Work> Send for Worker<T> {}
// SAFETY: `Worker` has no `&self` methods that mutate.
unsafe impl<T: Work> Sync for Worker<T> {}

/// The vhost_task body: runs the work if it is pending.
///
/// # Safety
///
/// `arg` must point to a live `T` (the `Worker` guarantees it).
unsafe extern "C" fn worker_fn<T: Work>(arg: *mut c_void) -> bool {
    // SAFETY: `arg` is the `Arc<T>` payload kept alive by the `Worker` until
    // the task has stopped.
    let work = unsafe { &*arg.cast::<T>() };
    if !work.waker().take_pending() {
        return false;
    }
    // vhost_task calls us in TASK_INTERRUPTIBLE so that it can sleep when
    // there is no work; there is, and it may sleep on locks and faults.
    // SAFETY: Writing our own task state, as `__set_current_state` does.
    unsafe {
        let cur = kernel::task::Task::current_raw();
        core::ptr::write_volatile(
            core::ptr::addr_of_mut!((*cur).__state),
            bindings::TASK_RUNNING as c_uint,
        );
    }
    work.run();
    true
}

/// Called by vhost_task when the owner process is killed.
///
/// # Safety
///
/// Called only by vhost_task; the argument is not used.
unsafe extern "C" fn worker_killed(_arg: *mut c_void) {
    // The owner was killed and the task has exited its loop. Nothing runs
    // on it any more; the device is torn down when its file is released.
}

impl<T: Work> Worker<T> {
    /// Creates and starts a worker in the calling process.
    pub(crate) fn start(work: Arc<T>, name: &'static CStr) -> Result<Self> {
        let arg = Arc::as_ptr(&work).cast_mut().cast::<c_void>();
        // SAFETY: `worker_fn::<T>` matches the callback type, `arg` stays
        // valid while `work` is held by the returned `Worker`, and `name` is
        // a NUL-terminated string that is copied.
        let t = from_err_ptr(unsafe {
            vhost_task_create(worker_fn::<T>, worker_killed, arg, name.as_char_ptr().cast())
        })?;
        let task = NonNull::new(t).ok_or(ENOMEM)?;
        // SAFETY: A freshly created task, started once.
        unsafe { vhost_task_start(task.as_ptr()) };
        work.waker().task.store(task.as_ptr(), Ordering::Release);
        Ok(Self { task, work })
    }
}

impl<T: Work> Drop for Worker<T> {
    fn drop(&mut self) {
        self.work.waker().task.store(core::ptr::null_mut(), Ordering::Release);
        // SAFETY: Started in `start`, stopped only here. This waits for the
        // task to leave `worker_fn`, after which `work` is no longer used.
        unsafe { vhost_task_stop(self.task.as_ptr()) };
    }
}

/// A wait-queue entry on a file (an eventfd or a tap) that wakes a [`Waker`]
/// when the file signals one of `mask`'s events: `vhost_poll` in Rust.
///
/// # Invariants
///
/// While `wqh` is non-null, `wait` is linked on that wait queue head, which
/// belongs to `file` and so stays valid while `file` is held. `waker` points
/// to a `Waker` that outlives this object.
#[pin_data(PinnedDrop)]
pub(crate) struct Poll {
    #[pin]
    wait: Opaque<bindings::wait_queue_entry>,
    #[pin]
    table: Opaque<bindings::poll_table_struct>,
    wqh: Cell<*mut bindings::wait_queue_head>,
    file: ARef<File>,
    mask: u32,
    waker: *const Waker,
    /// Whether events wake the worker; see [`Poll::set_armed`].
    armed: AtomicBool,
}

// SAFETY: The raw pointers are only used under the rules in the type
// invariants; the wait-queue lock serialises the callback with removal.
unsafe impl Send for Poll {}
// SAFETY: See above; `wqh` is only written during `start`, before sharing.
unsafe impl Sync for Poll {}

/// The poll-table callback: links our entry on the file's wait queue.
///
/// # Safety
///
/// `pt` must be the `table` of a pinned, live [`Poll`].
unsafe extern "C" fn poll_queue_proc(
    _file: *mut bindings::file,
    wqh: *mut bindings::wait_queue_head,
    pt: *mut bindings::poll_table_struct,
) {
    // SAFETY: `pt` is the `table` field of a pinned `Poll`, passed by us to
    // the file's `poll` in `Poll::start`.
    let p = unsafe { &*kernel::container_of!(Opaque::cast_from(pt), Poll, table) };
    if !p.wqh.get().is_null() {
        // A file that registers two queues; one is all we need.
        return;
    }
    p.wqh.set(wqh);
    // SAFETY: `wqh` is a live wait queue head of the file being polled, and
    // `wait` is an initialised, unlinked entry.
    unsafe { bindings::add_wait_queue(wqh, p.wait.get()) };
}

/// The wait-queue callback: wakes the worker on a matching event.
///
/// # Safety
///
/// `wait` must be the `wait` of a live [`Poll`], as linked by
/// [`poll_queue_proc`].
unsafe extern "C" fn poll_wakeup(
    wait: *mut bindings::wait_queue_entry,
    _mode: c_uint,
    _sync: c_int,
    key: *mut c_void,
) -> c_int {
    // SAFETY: `wait` is the `wait` field of a `Poll` linked by
    // `poll_queue_proc`; it is unlinked before the `Poll` is freed.
    let p = unsafe { &*kernel::container_of!(Opaque::cast_from(wait), Poll, wait) };
    let k = key as usize as u32;
    if (k != 0 && k & p.mask == 0) || !p.armed.load(Ordering::Relaxed) {
        return 0;
    }
    // SAFETY: By the type invariant the waker outlives the poll.
    unsafe { (*p.waker).wake() };
    0
}

impl Poll {
    /// Starts polling `file` for `mask`, waking `waker` on each event; wakes
    /// it at once if the file is already ready. `-EINVAL` if the file reports
    /// an error.
    ///
    /// # Safety
    ///
    /// `waker` must outlive the returned `Poll`.
    pub(crate) unsafe fn start(file: ARef<File>, mask: u32, waker: &Waker) -> Result<Pin<KBox<Self>>> {
        let p = KBox::pin_init(
            pin_init!(Poll {
                wait <- Opaque::ffi_init(|w: *mut bindings::wait_queue_entry| {
                    // SAFETY: `w` is valid for writes; this is
                    // `init_waitqueue_func_entry`.
                    unsafe {
                        w.write(bindings::wait_queue_entry {
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
                table <- Opaque::ffi_init(move |t: *mut bindings::poll_table_struct| {
                    // SAFETY: `t` is valid for writes; this is
                    // `init_poll_funcptr` plus the key.
                    unsafe {
                        t.write(bindings::poll_table_struct {
                            _qproc: Some(poll_queue_proc),
                            _key: mask,
                        })
                    }
                }),
                wqh: Cell::new(core::ptr::null_mut()),
                file: file,
                mask,
                waker: core::ptr::from_ref(waker),
                armed: AtomicBool::new(true),
            }),
            GFP_KERNEL,
        )?;
        // vfs_poll(): call the file's poll with our table.
        let fp = p.file.as_ptr();
        // SAFETY: `fp` is a live file we hold a reference on; `f_op` is
        // always set on an open file.
        let ready = unsafe {
            match (*(*fp).f_op).poll {
                Some(poll) => poll(fp, p.table.get()),
                None => DEFAULT_POLLMASK,
            }
        };
        if ready & EPOLLERR != 0 {
            return Err(EINVAL);
        }
        if ready & mask != 0 {
            waker.wake();
        }
        Ok(p)
    }
}

impl Poll {
    /// Stops or resumes waking the worker, without leaving the wait queue:
    /// the RX worker ignores the tap while it drains it, as C's handle_rx
    /// does with `vhost_net_disable_vq`, instead of being woken for every
    /// packet. After re-arming, the caller must look at the file once more:
    /// the full barrier here pairs with the one before the file's waker
    /// checks its wait queue (`skwq_has_sleeper`), so either that look sees
    /// the new event or the event sees the entry armed.
    pub(crate) fn set_armed(&self, on: bool) {
        self.armed.store(on, Ordering::Relaxed);
        if on {
            smp_mb(Full);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for Poll {
    fn drop(self: Pin<&mut Self>) {
        let wqh = self.wqh.get();
        if !wqh.is_null() {
            // SAFETY: By the type invariant `wait` is linked on `wqh`, which
            // is still valid because `file` is dropped after this.
            unsafe { bindings::remove_wait_queue(wqh, self.wait.get()) };
        }
    }
}
