// SPDX-License-Identifier: GPL-2.0

//! Workers: one kernel thread per virtqueue that runs the queue's data path
//! when something (a kick, the tap, a requeue) wakes it.
//!
//! A [`Worker`] is a `vhost_task`: a thread of the owner process, sharing its
//! address space, accounted to it, and killed with it. A [`Waker`] is where
//! wakeups go: it may be reached from any context, including wait-queue
//! callbacks with a spinlock held, so it only touches atomics and wakes the
//! task inside an RCU read-side section.
//!
//! # Lifetime of the task pointer
//!
//! The task is freed by `vhost_task_stop`. [`Worker::drop`] first clears the
//! waker's task pointer, then waits for an RCU grace period, then stops the
//! task. [`Waker::wake`] loads the pointer and calls `vhost_task_wake` inside
//! one RCU read-side section, so any wake that saw the pointer has returned
//! before the grace period ends, and no later wake can see it: the task is
//! never woken after it is freed (the C driver's `vhost_worker` RCU rule).
//!
//! The atomics are `core` atomics: the kernel crate's `Atomic<T>` has no
//! pointer type in this kernel, and these are plain flags and counters with
//! the orderings written at each use.

use crate::shim;
use core::{
    ffi::c_void,
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering},
};
use kernel::{error::from_err_ptr, prelude::*, sync::Arc};

/// Where wakeups of one queue go: a pending-work flag and the worker to wake.
///
/// # Invariants
///
/// `task` is null or a started `vhost_task` that is not freed before an RCU
/// grace period has passed since `task` was cleared (see the module doc).
pub(crate) struct Waker {
    pending: AtomicBool,
    task: AtomicPtr<shim::VhostTask>,
    wakeups: AtomicU64,
}

impl Waker {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                pending: AtomicBool::new(false),
                task: AtomicPtr::new(core::ptr::null_mut()),
                wakeups: AtomicU64::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// Marks work pending and wakes the worker, if there is one. Work that
    /// is pending already has had its wakeup, and the worker takes the flag
    /// before it runs, so only the first of a burst of events wakes the
    /// task (as `VHOST_WORK_QUEUED` does in C).
    pub(crate) fn wake(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        // SeqCst: the event that led here happens before the worker's run,
        // and this swap and the load of `task` below pair with
        // `Worker::start`'s store of `task` and load of `pending`.
        if self.pending.swap(true, Ordering::SeqCst) {
            return;
        }
        let _rcu = kernel::sync::rcu::read_lock();
        let task = self.task.load(Ordering::SeqCst);
        if !task.is_null() {
            // SAFETY: By the type invariant the task is not freed before a
            // grace period after `task` was cleared, and we are inside a
            // read-side section that began before we loaded it.
            unsafe { shim::vhost_task_wake(task) };
        }
    }

    /// How many times `wake` was called (kicks, socket events, requeues).
    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Consumes the pending flag.
    fn take_pending(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }
}

/// Work run by a [`Worker`].
pub(crate) trait Work: Send + Sync {
    /// The waker whose pending flag starts a run.
    fn waker(&self) -> &Waker;
    /// Processes pending work. Called in the worker, in process context.
    /// Returns true if work remains (the weight ran out): the worker then
    /// runs again after a chance to reschedule.
    fn run(&self) -> bool;
}

/// A running `vhost_task` that services `work`.
///
/// # Invariants
///
/// `task` was returned by `vhost_task_create` and started; it is stopped
/// exactly once, in `Drop`. `work` outlives the task, whose argument points
/// to it.
pub(crate) struct Worker<T: Work> {
    task: NonNull<shim::VhostTask>,
    work: Arc<T>,
}

// SAFETY: The vhost_task API may be used from any thread.
unsafe impl<T: Work> Send for Worker<T> {}
// SAFETY: `Worker` has no `&self` methods.
unsafe impl<T: Work> Sync for Worker<T> {}

/// The vhost_task body: runs the work if it is pending. Returns whether it
/// did anything (vhost_task sleeps when it did not).
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
    // SAFETY: Sets the current task's own state, as the C helper does.
    unsafe { shim::vnr_set_current_running() };
    if work.run() {
        // The weight ran out: requeue, and let the scheduler in before the
        // next run, as C's vhost_run_work_list does between works.
        work.waker().wake();
        // SAFETY: Process context, no locks held.
        unsafe { shim::vnr_cond_resched() };
    }
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
        let raw = from_err_ptr(unsafe {
            shim::vhost_task_create(worker_fn::<T>, worker_killed, arg, name.as_char_ptr())
        })?;
        let task = NonNull::new(raw).ok_or(ENOMEM)?;
        // SAFETY: A freshly created task, started once.
        unsafe { shim::vhost_task_start(task.as_ptr()) };
        let waker = work.waker();
        waker.task.store(task.as_ptr(), Ordering::SeqCst);
        // A wake that came before the store set `pending` but found no task
        // to wake; later ones find `pending` set and wake nobody. Either
        // that wake's load of `task` (SeqCst, after its swap of `pending`)
        // saw the store above, or this load sees its `pending`.
        if waker.pending.load(Ordering::SeqCst) {
            // SAFETY: The task was started above and is not stopped before
            // this `Worker` is dropped.
            unsafe { shim::vhost_task_wake(task.as_ptr()) };
        }
        // INVARIANT: created and started above; `work` is held.
        Ok(Self { task, work })
    }
}

impl<T: Work> Drop for Worker<T> {
    fn drop(&mut self) {
        self.work.waker().task.store(core::ptr::null_mut(), Ordering::Release);
        // Every wake that saw the pointer has returned after this.
        kernel::sync::rcu::synchronize_rcu();
        // SAFETY: Started in `start`, stopped only here. This waits for the
        // task to leave `worker_fn`, after which `work` is no longer used.
        unsafe { shim::vhost_task_stop(self.task.as_ptr()) };
    }
}
