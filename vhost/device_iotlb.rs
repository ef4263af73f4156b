// SPDX-License-Identifier: GPL-2.0

//! The device IOTLB as the module serves it (`VIRTIO_F_ACCESS_PLATFORM`):
//! each queue's table, and the channel through which misses reach
//! userspace.
//!
//! # Where the table lives
//!
//! The C driver keeps one table per device and lets a worker read it under
//! its own queue's mutex, because an update takes every queue's mutex
//! (`vhost_dev_lock_vqs`). Here each queue keeps its own copy inside its
//! lock ([`crate::vhost::virtqueue::VqState`]), and a `write()` applies every
//! message to each copy in turn, under that queue's lock. The copies see
//! the same messages in the same order, so they hold the same mappings;
//! a worker translates without any lock but its own; and a `write()` that
//! invalidates has waited for each queue's lock, so no run that could still
//! use the old translation is in progress when it returns.
//!
//! # The channel
//!
//! A queue that misses posts the miss here ([`MissChannel::post`]); a
//! `read()` takes it ([`MissChannel::read`]), waking on the channel's
//! condition variable, which `poll()` registers too. An update answers the
//! misses it covers ([`MissChannel::answer`]) and names the queues to wake.
//!
//! # Lock order
//!
//! The channel's lock comes last: after the device's state and after a
//! queue's lock (a worker posts with its queue locked).

use crate::vring::iotlb::{Iotlb, Mapping, Miss, Misses, UpdateError};
use kernel::{
    alloc::KVVec,
    new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, Mutex},
};
use kernel::{
    fs::File,
    new_poll_condvar,
    sync::{
        poll::{PollCondVar, PollTable},
        SetOnce,
    },
};

/// The control of a device's miss channel, whatever its number of queues.
pub(crate) trait MissControl {
    /// Updates answered the misses of the queues in the returned mask (bit
    /// `q` for queue `q`) that lie in `iova..iova + size`.
    fn answer(&self, iova: u64, size: u64) -> u64;
    /// `VHOST_IOTLB_BATCH_BEGIN`.
    fn begin_batch(&self);
    /// `VHOST_IOTLB_BATCH_END`: the queues whose misses the batch answered.
    fn end_batch(&self) -> u64;
    /// The device has an IOTLB (`ACCESS_PLATFORM` acked) or not.
    fn set_enabled(&self, enabled: bool);
}

/// Where a queue posts its device IOTLB misses: the channel of its device,
/// whatever the device's number of queues.
pub(crate) trait PostMiss: Send + Sync {
    /// Queue `queue` missed; returns whether the miss is new.
    fn post(&self, queue: usize, miss: Miss) -> bool;
}

/// One queue's copy of the device IOTLB, its storage grown as mappings
/// arrive, up to the table's capacity ([`make_room`]).
pub(crate) type QueueIotlb = Iotlb<KVVec<Mapping>>;

/// An empty table of at most `capacity` mappings. Nothing is allocated
/// yet: a guest without a vIOMMU's mappings costs nothing, and QEMU's
/// SET_FEATURES at every start and migration allocates nothing either.
pub(crate) fn new_table(capacity: usize) -> QueueIotlb {
    Iotlb::with_capacity(KVVec::new(), capacity)
}

/// Makes room in `table` for the next update, growing its storage if it
/// is full below its capacity. C allocates each mapping as it arrives
/// (`vhost_iotlb_add_range_ctx`, `-ENOMEM` when it cannot); here the
/// allocation may sleep (a `write()`, the queue's lock held), and is
/// charged to the writer's memory cgroup (`GFP_KERNEL_ACCOUNT`, as C
/// charges its other per-device allocations): the table is the owner's,
/// up to `max_iotlb_entries` mappings per queue.
pub(crate) fn make_room(table: &mut QueueIotlb) -> Result<(), MessageError> {
    table.make_room(|slots, len| {
        slots
            .resize(len, Mapping::default(), GFP_KERNEL_ACCOUNT)
            .map_err(|_| MessageError::NoMemory)
    })
}

/// Why a message written to the device was refused. The C driver reports
/// each as `-EFAULT`; they are kept apart for the debug log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MessageError {
    /// An update or invalidation while the device has no IOTLB
    /// (`ACCESS_PLATFORM` not acked).
    NoIotlb,
    /// The table's storage could not grow for the update (`-ENOMEM`, as
    /// in C).
    NoMemory,
    /// The table refused the update.
    Update(UpdateError),
    /// An invalidation of size 0.
    EmptyInvalidate,
    /// A message type the device does not take from userspace (a miss, an
    /// access failure, a batch without `VHOST_BACKEND_F_IOTLB_BATCH`).
    Unsupported(u8),
}

/// What the channel's lock protects.
struct ChannelState<const N: usize> {
    misses: Misses<N>,
    /// The device has an IOTLB (`ACCESS_PLATFORM` acked): a blocking
    /// `read()` without one fails (`-EBADFD`), as in C.
    enabled: bool,
    /// Inside a `VHOST_IOTLB_BATCH_BEGIN`/`END` pair: the queues that
    /// updates answered, woken at the end.
    batch: Option<u64>,
}

/// The misses of a device's `N` queues, on their way to userspace.
///
/// # Invariants
///
/// `readers` and `pollers` are woken whenever a miss becomes readable or
/// the IOTLB goes away, so that blocked `read()`s and pollers look again.
#[pin_data]
pub(crate) struct MissChannel<const N: usize> {
    #[pin]
    state: Mutex<ChannelState<N>>,
    #[pin]
    readers: CondVar,
    /// The pollers' wait queue (C's `vhost_dev::wait`), made at the first
    /// `poll()`: only QEMU with a vIOMMU polls the fd, and a `PollCondVar`
    /// waits for an RCU grace period when it goes.
    pollers: SetOnce<Pin<KBox<PollCondVar>>>,
}

/// What a `read()` found.
pub(crate) enum ReadOutcome {
    /// The oldest unread miss, now pending, and its queue.
    Miss(usize, Miss),
    /// Nothing to read, and the caller does not wait (`O_NONBLOCK`).
    WouldBlock,
    /// Nothing to read, and there is no IOTLB to miss in.
    NoIotlb,
}

impl<const N: usize> MissChannel<N> {
    /// The channel of one device, to be shared by its queues only.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(MissChannel {
                state <- new_mutex!(ChannelState { misses: Misses::new(), enabled: false, batch: None }),
                readers <- new_condvar!("vhost_net_rs_iotlb_readers"),
                pollers: SetOnce::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// Wakes blocked readers and pollers.
    fn notify(&self) {
        self.readers.notify_all();
        if let Some(pollers) = self.pollers.as_ref() {
            pollers.notify_all();
        }
    }

    /// `read()`: the oldest unread miss; waits for one unless `nonblock`.
    /// `Err(ERESTARTSYS)` if a signal came first.
    pub(crate) fn read(&self, nonblock: bool) -> Result<ReadOutcome> {
        let mut state = self.state.lock();
        loop {
            if let Some((queue, miss)) = state.misses.read() {
                return Ok(ReadOutcome::Miss(queue, miss));
            }
            if nonblock {
                return Ok(ReadOutcome::WouldBlock);
            }
            if !state.enabled {
                return Ok(ReadOutcome::NoIotlb);
            }
            if self.readers.wait_interruptible(&mut state) {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// The miss of `queue` that a `read()` took could not be copied out:
    /// it is dropped, and the queue may post again.
    pub(crate) fn drop_read(&self, queue: usize) {
        self.state.lock().misses.drop_read(queue);
    }

    /// `VHOST_NET_SET_BACKEND` with fd -1: forgets every miss of every
    /// queue, unread and pending, as C's `vhost_net_set_backend` calls
    /// `vhost_clear_msg()` then. QEMU unbinds at every device stop (guest
    /// reset, reboot) and leaves a miss unanswered when the guest's
    /// vIOMMU maps its IOVA to no RAM; a queue posts one miss at a time,
    /// so a miss kept here would hold back every later one of its queue,
    /// and the queue would never run again. The queues post afresh when
    /// they next run. Readers are not woken: there is nothing new to read.
    pub(crate) fn clear(&self) {
        self.state.lock().misses.clear();
    }

    /// `poll()`: registers the poller on the channel and says whether a
    /// `read()` would find a message.
    pub(crate) fn poll(&self, file: &File, table: &PollTable<'_>) -> Result<bool> {
        let pollers = match self.pollers.as_ref() {
            Some(pollers) => pollers,
            None => {
                // Two first pollers at once both make one; the loser's goes.
                let _ = self.pollers.populate(KBox::pin_init(
                    new_poll_condvar!("vhost_net_rs_iotlb_pollers"),
                    GFP_KERNEL,
                )?);
                self.pollers.as_ref().ok_or(ENOMEM)?
            }
        };
        table.register_wait(file, pollers);
        Ok(self.state.lock().misses.readable())
    }
}

impl<const N: usize> PostMiss for MissChannel<N> {
    /// The miss is readable, unless the queue has one outstanding already.
    fn post(&self, queue: usize, miss: Miss) -> bool {
        let posted = self.state.lock().misses.post(queue, miss);
        if posted {
            self.notify();
        }
        posted
    }
}

impl<const N: usize> MissControl for MissChannel<N> {
    /// An update of `[iova, iova + size - 1]` was applied: returns the
    /// queues to wake (bit `q` for queue `q`); none inside a batch, which
    /// wakes them at its end.
    fn answer(&self, iova: u64, size: u64) -> u64 {
        let mut state = self.state.lock();
        let wake = state.misses.answer(iova, size);
        match state.batch.as_mut() {
            Some(deferred) => {
                *deferred |= wake;
                0
            }
            None => wake,
        }
    }

    /// `VHOST_IOTLB_BATCH_BEGIN`.
    fn begin_batch(&self) {
        let mut state = self.state.lock();
        state.batch.get_or_insert(0);
    }

    /// `VHOST_IOTLB_BATCH_END`: the queues the batch's updates answered.
    fn end_batch(&self) -> u64 {
        self.state.lock().batch.take().unwrap_or(0)
    }

    /// The device has an IOTLB (`true`, its tables new and empty) or none.
    /// Without one every miss is forgotten, and blocked readers return
    /// (`-EBADFD`). With a new one the misses read are kept, as C keeps
    /// its pending list: userspace's answers still wake their queues.
    fn set_enabled(&self, enabled: bool) {
        {
            let mut state = self.state.lock();
            if !enabled {
                state.misses.clear();
                state.batch = None;
            }
            state.enabled = enabled;
        }
        self.notify();
    }
}
