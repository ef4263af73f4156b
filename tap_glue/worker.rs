// SPDX-License-Identifier: GPL-2.0

//! Workers: kernel threads that run virtqueues' data paths when something
//! (a kick, the tap, a requeue) wakes them. A worker serves one queue, or
//! several ([`Pair`]): the C driver's model, where `vhost_dev_set_owner`
//! attaches every queue of a device to the device's one worker, so that
//! work queued while the worker runs is done in the same wakeup.
//!
//! A [`Worker`] is a `vhost_task`, a thread of the owner process sharing its
//! address space, accounted to it and killed with it (the default,
//! `VHOST_FORK_OWNER_TASK`), or, with `VHOST_SET_FORK_FROM_OWNER 0`, a
//! kthread that adopts the owner's address space (`kthread_use_mm`) and
//! cgroups, as the C driver's older workers do. A [`Waker`] is where
//! wakeups go: it may be reached from any context, including wait-queue
//! callbacks with a spinlock held, so it only touches atomics and wakes the
//! task inside an RCU read-side section.
//!
//! # Lifetime of the task pointer
//!
//! The task is freed by `vhost_task_stop` (or ends at `kthread_stop`).
//! [`Worker::drop`] first clears the waker's task pointer, then waits for an
//! RCU grace period, then stops the task. [`Waker::wake`] loads the pointer and calls `vhost_task_wake` inside
//! one RCU read-side section, so any wake that saw the pointer has returned
//! before the grace period ends, and no later wake can see it: the task is
//! never woken after it is freed (the C driver's `vhost_worker` RCU rule).

use crate::tap_glue::shim;
use crate::tap_glue::uaccess::OwnerMem;
use core::{ffi::c_void, ptr::NonNull};
use kernel::{
    bindings,
    error::from_err_ptr,
    ffi::c_int,
    mm::MmWithUser,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        Arc,
    },
};

/// [`Waker::state`]'s bit that says no work is pending: the worker has
/// taken every wakeup so far, so the next one must wake its task (C's
/// `VHOST_WORK_QUEUED`, inverted).
const IDLE: u64 = 1;
/// One wakeup in [`Waker::state`]'s count, above [`IDLE`].
const ONE_WAKEUP: u64 = 2;

/// Where wakeups of one queue go: a pending-work flag and the worker to wake.
///
/// # Invariants
///
/// `task` is null or a started thread of the kind `kthread` says (a
/// kthread's `struct task_struct`, or else a `struct vhost_task`) that is
/// not freed before an RCU grace period has passed since `task` was cleared
/// (see the module doc). `kthread` is written before `task` is set.
///
/// In `state`, only [`Waker::take_pending`] sets [`IDLE`] and only a wakeup
/// clears it, each with a compare-exchange; the count above it only grows
/// (wrapping), by [`ONE_WAKEUP`] per wakeup, which leaves [`IDLE`] as it is.
pub(crate) struct Waker {
    /// The wakeups so far, counted in units of [`ONE_WAKEUP`], and the
    /// [`IDLE`] bit: in one word, so that a wakeup whose work is pending
    /// already is one atomic operation (one call: the kernel's atomics are
    /// C helpers that a Rust module cannot inline). The count wraps.
    state: Atomic<u64>,
    task: Atomic<*mut c_void>,
    kthread: Atomic<bool>,
}

impl Waker {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                state: Atomic::new(IDLE),
                task: Atomic::new(core::ptr::null_mut()),
                kthread: Atomic::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    /// Marks work pending and wakes the worker, if there is one. Work that
    /// is pending already has had its wakeup, and the worker takes the flag
    /// before it runs, so only the first of a burst of events wakes the
    /// task (as `VHOST_WORK_QUEUED` does in C).
    #[inline]
    pub(crate) fn wake(&self) {
        // Fully ordered: the event that led here happens before the
        // worker's run. If the work was pending, the worker's taking of it
        // comes later in `state`'s order, and its run sees the event.
        let old = self.state.fetch_add(ONE_WAKEUP, Full);
        if old & IDLE != 0 {
            self.wake_idle(old.wrapping_add(ONE_WAKEUP));
        }
    }

    /// The worker had taken all work when [`Waker::wake`] counted itself
    /// (`state` was `seen`): marks work pending, and, unless another
    /// wakeup did it first, wakes the task.
    #[cold]
    #[inline(never)]
    fn wake_idle(&self, mut seen: u64) {
        loop {
            if seen & IDLE == 0 {
                // Another wakeup marked it pending, and wakes the task.
                return;
            }
            // Fully ordered: this exchange and the load of `task` below
            // pair with `Worker::publish`'s store of `task`, full barrier
            // and load of `state`.
            match self.state.cmpxchg(seen, seen & !IDLE, Full) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        let _rcu = kernel::sync::rcu::read_lock();
        let task = self.task.load(Acquire);
        if !task.is_null() {
            // SAFETY: By the type invariant the task is of the kind
            // `kthread` says and is not freed before a grace period after
            // `task` was cleared, and we are inside a read-side section that
            // began before we loaded it.
            unsafe { Self::wake_task(self.kthread.load(Relaxed), task) };
        }
    }

    /// Wakes `task`, a kthread if `kthread`, else a vhost_task.
    ///
    /// # Safety
    ///
    /// `task` is a live, started thread of that kind.
    unsafe fn wake_task(kthread: bool, task: *mut c_void) {
        if kthread {
            // SAFETY: A live task_struct, by the caller's contract.
            unsafe { bindings::wake_up_process(task.cast()) };
        } else {
            // SAFETY: A live, started vhost_task, by the caller's contract.
            unsafe { shim::vhost_task_wake(task.cast()) };
        }
    }

    /// How many times `wake` was called (kicks, socket events, requeues).
    pub(crate) fn wakeups(&self) -> u64 {
        self.state.load(Relaxed) / ONE_WAKEUP
    }

    /// Whether work is pending.
    fn is_pending(&self) -> bool {
        self.state.load(Relaxed) & IDLE == 0
    }

    /// Consumes the pending flag. Called by the worker in
    /// `TASK_INTERRUPTIBLE`: a wakeup that this load misses wakes the task
    /// out of the sleep that follows.
    fn take_pending(&self) -> bool {
        let mut seen = self.state.load(Relaxed);
        loop {
            if seen & IDLE != 0 {
                return false;
            }
            // Fully ordered: the run that follows sees the events of the
            // wakeups counted before.
            match self.state.cmpxchg(seen, seen | IDLE, Full) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }
}

/// Whether a worker that busy-polls must stop: the scheduler wants the CPU
/// or a signal is pending (C's `vhost_can_busy_poll`).
pub(crate) fn should_stop_polling() -> bool {
    // SAFETY: Reads the current task's flags.
    unsafe { shim::vnr_busy_poll_should_stop() }
}

/// Work run by a [`Worker`]: one or more queues, each with its waker.
pub(crate) trait Work: Send + Sync {
    /// How many queues the work serves.
    const QUEUES: usize;
    /// The waker of queue `i` (below [`Work::QUEUES`]), whose pending flag
    /// starts a run of that queue.
    fn waker(&self, i: usize) -> &Waker;
    /// Processes queue `i`'s pending work. Called in the worker, in process
    /// context, in the owner's address space (`owner`). Returns true if
    /// work remains (the weight ran out): the worker then runs it again
    /// after a chance to reschedule.
    fn run(&self, i: usize, owner: &OwnerMem) -> bool;
}

/// Two works served by one worker, in the order `A`, then `B`: the C
/// driver's one worker per device (`vhost_dev_set_owner` attaches every
/// queue to it, and `vhost_run_work_list` runs all work queued on it).
pub(crate) struct Pair<A: Work, B: Work>(pub(crate) Arc<A>, pub(crate) Arc<B>);

impl<A: Work, B: Work> Work for Pair<A, B> {
    const QUEUES: usize = A::QUEUES + B::QUEUES;

    fn waker(&self, i: usize) -> &Waker {
        if i < A::QUEUES {
            self.0.waker(i)
        } else {
            self.1.waker(i - A::QUEUES)
        }
    }

    fn run(&self, i: usize, owner: &OwnerMem) -> bool {
        if i < A::QUEUES {
            self.0.run(i, owner)
        } else {
            self.1.run(i - A::QUEUES, owner)
        }
    }
}

/// Runs each of `work`'s queues whose pending flag is set, as C's
/// `vhost_run_work_list` runs the works it took off the list, with a chance
/// to reschedule after one whose weight ran out. Returns whether any was
/// pending. `running` is called once, before the first run.
///
/// # Safety
///
/// Called by a worker thread in the owner's address space: a vhost_task
/// (a thread of the owner's process), or a kthread between
/// `kthread_use_mm` of the owner's `mm` and its unuse.
unsafe fn run_pending<T: Work>(work: &T, running: impl Fn()) -> bool {
    let mut ran = false;
    for i in 0..T::QUEUES {
        let waker = work.waker(i);
        if !waker.take_pending() {
            continue;
        }
        if !ran {
            running();
            ran = true;
        }
        // SAFETY: In the owner's address space, by the caller's contract.
        let owner = unsafe { OwnerMem::assume() };
        if work.run(i, &owner) {
            // The weight ran out: requeue.
            waker.wake();
        }
        // After every run, however short, as C's vhost_run_work_list (and
        // vhost_run_work_kthread_list) calls cond_resched() after every
        // work item: a guest that kicks an empty ring in a loop sets the
        // work pending again before each run ends, the worker then runs it
        // again without sleeping, and on a kernel without forced preemption
        // nothing else would let the scheduler in.
        // SAFETY: Process context, no locks held.
        unsafe { shim::vnr_cond_resched() };
    }
    ran
}

/// The thread of a [`Worker`].
enum Thread<T: Work> {
    /// A `vhost_task` of the owner.
    Task(NonNull<shim::VhostTask>),
    /// A kthread in the owner's address space; `args` is its argument and
    /// lives until the thread has stopped.
    Kthread {
        task: NonNull<bindings::task_struct>,
        _args: KBox<KthreadArgs<T>>,
    },
}

/// What a kthread worker runs with.
struct KthreadArgs<T: Work> {
    work: Arc<T>,
    mm: ARef<MmWithUser>,
}

/// A running thread that services `work` (all of its queues).
///
/// # Invariants
///
/// `thread` was created and started; it is stopped exactly once, in
/// `Drop`. `work` outlives the thread, whose argument points to it.
pub(crate) struct Worker<T: Work> {
    thread: Thread<T>,
    work: Arc<T>,
}

// SAFETY: The vhost_task and kthread APIs may be used from any thread.
// (Not `Sync`: a device's workers live under its lock.)
unsafe impl<T: Work> Send for Worker<T> {}

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
    let running = || {
        // vhost_task calls us in TASK_INTERRUPTIBLE so that it can sleep
        // when there is no work; there is, and it may sleep on locks and
        // faults.
        // SAFETY: Sets the current task's own state, as the C helper does.
        unsafe { shim::vnr_set_current_running() };
    };
    // SAFETY: A vhost_task is a thread of the owner's process: its `mm` is
    // the owner's for as long as it runs.
    unsafe { run_pending(work, running) }
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

/// The kthread body: the C driver's `vhost_run_work_kthread_list` for one
/// work item. Sleeps until woken with work pending, runs it, and stops when
/// `kthread_stop` asks.
///
/// # Safety
///
/// `arg` must point to a live `KthreadArgs<T>` (the `Worker` guarantees it
/// until `kthread_stop` has returned).
unsafe extern "C" fn kthread_fn<T: Work>(arg: *mut c_void) -> c_int {
    // SAFETY: See above.
    let args = unsafe { &*arg.cast::<KthreadArgs<T>>() };
    let mm = args.mm.as_raw();
    // SAFETY: A kthread adopting a live address space (`args.mm` holds a
    // user reference on it) until the matching unuse below.
    unsafe { bindings::kthread_use_mm(mm) };
    loop {
        // Pairs with the barrier in kthread_stop and wake_up_process: a
        // stop or a wakeup after this line is seen below or ends schedule.
        // SAFETY: Sets the current task's own state.
        unsafe { shim::vnr_set_current_interruptible() };
        // SAFETY: Called from a kthread.
        if unsafe { bindings::kthread_should_stop() } {
            // SAFETY: As above.
            unsafe { shim::vnr_set_current_running() };
            break;
        }
        let running = || {
            // SAFETY: As above.
            unsafe { shim::vnr_set_current_running() };
        };
        // SAFETY: Between `kthread_use_mm` of the owner's `mm` above and
        // its unuse below.
        let ran = unsafe { run_pending(&*args.work, running) };
        if !ran {
            // SAFETY: Process context, no locks held.
            unsafe { bindings::schedule() };
        }
    }
    // SAFETY: Undoes the use above.
    unsafe { bindings::kthread_unuse_mm(mm) };
    0
}

impl<T: Work> Worker<T> {
    /// Creates and starts a kthread worker for `work` that runs in `mm`
    /// and in the calling task's cgroups (`VHOST_FORK_OWNER_KTHREAD`).
    pub(crate) fn start_kthread(
        work: Arc<T>,
        name: &'static CStr,
        mm: ARef<MmWithUser>,
    ) -> Result<Self> {
        let args = KBox::new(
            KthreadArgs {
                work: work.clone(),
                mm,
            },
            GFP_KERNEL,
        )?;
        let arg = core::ptr::from_ref::<KthreadArgs<T>>(&args)
            .cast_mut()
            .cast::<c_void>();
        // SAFETY: `kthread_fn::<T>` matches the thread function type, `arg`
        // stays valid while `args` is held by the returned `Worker` (until
        // the thread has stopped), and "%s" takes the NUL-terminated
        // `name`.
        let raw = from_err_ptr(unsafe {
            bindings::kthread_create_on_node(
                Some(kthread_fn::<T>),
                arg,
                bindings::NUMA_NO_NODE,
                c"%s".as_char_ptr(),
                name.as_char_ptr(),
            )
        })?;
        let task = NonNull::new(raw).ok_or(ENOMEM)?;
        // Accounted like the C driver's kthread workers: the owner's
        // cgroups (vhost_attach_task_to_cgroups).
        // SAFETY: `task` is a live kthread that has not run yet; `current`
        // is the owner.
        let attached = unsafe {
            bindings::cgroup_attach_task_all(kernel::task::Task::current_raw(), task.as_ptr())
        };
        let worker = Self::publish(
            work,
            Thread::Kthread { task, _args: args },
            true,
            task.as_ptr().cast(),
        );
        // SAFETY: A created kthread, woken once to start it.
        unsafe { bindings::wake_up_process(task.as_ptr()) };
        if attached != 0 {
            // Dropping the worker stops the thread.
            return Err(Error::from_errno(attached));
        }
        Ok(worker)
    }

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
        Ok(Self::publish(
            work,
            Thread::Task(task),
            false,
            task.as_ptr().cast(),
        ))
    }

    /// Makes the started thread `task` (a kthread if `kthread`) the one
    /// `work`'s waker wakes, and wakes it if a wakeup came first.
    fn publish(work: Arc<T>, thread: Thread<T>, kthread: bool, task: *mut c_void) -> Self {
        for i in 0..T::QUEUES {
            let waker = work.waker(i);
            waker.kthread.store(kthread, Relaxed);
            waker.task.store(task, Release);
        }
        // A wake that came before the stores marked work pending but found
        // no task to wake; later ones find it pending and wake nobody. With
        // the full barriers here and in that wake's exchange of `state`,
        // either its load of `task` saw the store above, or this load sees
        // the work pending.
        crate::tap_glue::compat::smp_mb();
        if (0..T::QUEUES).any(|i| work.waker(i).is_pending()) {
            // SAFETY: The thread was started by the caller and is not
            // stopped before the returned `Worker` is dropped.
            unsafe { Waker::wake_task(kthread, task) };
        }
        // INVARIANT: the caller created and started `thread`; `work` is
        // held.
        Self { thread, work }
    }
}

impl<T: Work> Drop for Worker<T> {
    fn drop(&mut self) {
        for i in 0..T::QUEUES {
            self.work
                .waker(i)
                .task
                .store(core::ptr::null_mut(), Release);
        }
        // Every wake that saw the pointer has returned after this.
        crate::tap_glue::compat::synchronize_rcu();
        match &self.thread {
            // SAFETY: Started in `start`, stopped only here. This waits for
            // the task to leave `worker_fn`, after which `work` is no longer
            // used.
            Thread::Task(task) => unsafe { shim::vhost_task_stop(task.as_ptr()) },
            Thread::Kthread { task, .. } => {
                // SAFETY: Started in `start_kthread` and not stopped before;
                // kthread_stop takes its own reference and waits for
                // `kthread_fn` to return, after which its argument is no
                // longer used.
                unsafe { bindings::kthread_stop(task.as_ptr()) };
            }
        }
    }
}
