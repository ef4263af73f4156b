// SPDX-License-Identifier: GPL-2.0

//! The virtio-net data path: guest TX ring to tap ([`TxQueue`]), tap to
//! guest RX ring ([`RxQueue`]).
//!
//! Both run in their queue's worker with the queue's lock held, do at most
//! a weight of work per run (so one busy queue cannot monopolise its
//! worker), batch used-ring updates, and signal the guest only when its
//! notification-suppression state asks for it. Each per-packet step returns
//! a typed outcome; a malformed ring is the only error, and it stops the
//! queue.

use crate::file_poll::{FilePoll, POLLIN, POLLOUT};
use crate::iotlb::Translated;
use crate::memory::Translate;
use crate::tap_glue::{BatchSent, Batched, Received, RxBatch, SendError, TapSocket, TxBatch, UserIov};
use crate::uaccess::OwnerMem;
use crate::uapi::{feature, VirtioNetHdr};
use crate::virtqueue::{ActiveRing, Backend, MAX_BATCH, MAX_RX_HEADS};
use crate::vring::{positions, segments_from, Chain, GuestMemory, Iov, UsedElem, VringError, MAX_SEGMENTS};
use crate::worker::Waker;
use kernel::{
    fs::File,
    prelude::*,
    sync::{aref::ARef, Arc},
};

/// Packets per run before yielding (`VHOST_NET_PKT_WEIGHT`).
const PKT_WEIGHT: u64 = 256;
/// Bytes per run before yielding (`VHOST_NET_WEIGHT`).
const BYTE_WEIGHT: u64 = 0x80000;


/// Where the virtio-net header is added or stripped, and how long it is.
#[derive(Clone, Copy)]
struct HeaderLens {
    /// Added/stripped by vhost (`VHOST_NET_F_VIRTIO_NET_HDR`).
    vhost: usize,
    /// Added/stripped by the tap (`IFF_VNET_HDR`).
    sock: usize,
}

impl HeaderLens {
    fn of<B: Backend>(active: &ActiveRing<'_, B>) -> Self {
        let len = if active.has_feature(feature::VIRTIO_NET_F_MRG_RXBUF)
            || active.has_feature(feature::VIRTIO_F_VERSION_1)
        {
            VirtioNetHdr::LEN
        } else {
            VirtioNetHdr::LEN_LEGACY
        };
        if active.has_feature(feature::VHOST_NET_F_VIRTIO_NET_HDR) {
            Self { vhost: len, sock: 0 }
        } else {
            Self { vhost: 0, sock: len }
        }
    }
}

/// The packets and bytes a run has done, against the weight.
#[derive(Default)]
struct Weight {
    packets: u64,
    bytes: u64,
}

impl Weight {
    fn exceeded(&self) -> bool {
        self.packets >= PKT_WEIGHT || self.bytes >= BYTE_WEIGHT
    }
}

/// The ring has no (more) buffers: asks the guest to kick. Returns true if
/// buffers arrived meanwhile: the run goes on, but the retry is charged to
/// its weight, so a guest flipping `avail->idx` cannot keep the worker
/// looping. False: the run ends until the kick.
fn ring_ran_dry<B: Backend, M: GuestMemory>(
    active: &mut ActiveRing<'_, B>,
    mem: &M,
    weight: &mut Weight,
) -> Result<bool, VringError> {
    let more = active.wait_for_kick(mem)?;
    if more {
        weight.packets += 1;
    }
    Ok(more)
}

/// Fills `uiov` with the segments `iov`, skipping the first `skip` bytes.
/// Returns the number of user iovecs written.
#[inline]
fn to_user_iov(iov: &[Iov], skip: u64, uiov: &mut [UserIov]) -> usize {
    let mut count = 0;
    for seg in segments_from(iov, skip) {
        let Some(slot) = uiov.get_mut(count) else { break };
        *slot = UserIov { base: seg.addr as usize, len: seg.len as usize };
        count += 1;
    }
    count
}

/// Writes `data` at byte `offset` of the buffer described by `iov`.
fn write_iov<M: GuestMemory>(mem: &M, iov: &[Iov], offset: u64, data: &[u8]) -> Result<(), VringError> {
    let mut done = 0usize;
    for seg in segments_from(iov, offset) {
        if done == data.len() {
            break;
        }
        let n = core::cmp::min(seg.len as usize, data.len() - done);
        mem.write(seg.addr, &data[done..done + n])?;
        done += n;
    }
    if done == data.len() {
        Ok(())
    } else {
        Err(VringError::Fault)
    }
}

/// Writes `num_buffers` (little-endian) into the virtio-net header at the
/// start of the buffers `iov`: one 16-bit store when the field lies in the
/// first segment, 2-byte aligned, as guests lay their buffers out; else
/// through [`write_iov`], whose copy goes through the kernel's out-of-line
/// `copy_to_user`: too much for two bytes of every RX packet.
#[inline]
fn write_num_buffers(iov: &[Iov], num_buffers: u16) -> Result<(), VringError> {
    let offset = VirtioNetHdr::NUM_BUFFERS_OFFSET as u64;
    let bytes = num_buffers.to_le_bytes();
    if let Some(first) = iov.first() {
        // No overflow: the segment was translated whole, and `offset + 2`
        // lies inside it.
        if first.len >= offset + 2 && (first.addr + offset) % 2 == 0 {
            // A native store of the bytes' native value writes them in order.
            return OwnerMem.write_u16(first.addr + offset, u16::from_ne_bytes(bytes));
        }
    }
    write_iov(&OwnerMem, iov, offset, &bytes)
}

/// A user iovec array of `MAX_SEGMENTS` entries.
fn user_iov_scratch() -> Result<KVec<UserIov>> {
    let mut uiov = KVec::with_capacity(MAX_SEGMENTS, GFP_KERNEL)?;
    uiov.resize(MAX_SEGMENTS, UserIov::default(), GFP_KERNEL)?;
    Ok(uiov)
}

/// What a TX run did, counted locally and added to the statistics once.
#[derive(Default)]
struct TxTally {
    sent: u64,
    bytes: u64,
    drops: u64,
}

impl TxTally {
    fn add_batch(&mut self, batch: BatchSent) {
        self.sent += batch.packets as u64;
        self.bytes += batch.bytes as u64;
        self.drops += batch.lost as u64;
    }
}

/// The TX side of a tap: the socket, and a poll for send space. As in the
/// C driver the poll is armed when the backend is attached and whenever the
/// tap refuses a packet, and dropped when a run starts.
pub(crate) struct TxQueue {
    sock: TapSocket,
    space: Option<Pin<KBox<FilePoll>>>,
}

/// A TX queue's scratch: the batch of small packets (with its page-fragment
/// cache, the C driver's per-device `pf_cache`) and the user iovecs of one
/// packet. A run always ends with the batch sent, so it is empty between
/// runs and across attaches.
pub(crate) struct TxScratch {
    batch: TxBatch,
    uiov: KVec<UserIov>,
}

impl TxScratch {
    /// Sends the batch to `sock`; its packets' chains are consumed either
    /// way.
    fn send_batch(&mut self, sock: &TapSocket, tally: &mut TxTally) {
        tally.add_batch(self.batch.send(sock));
    }
}

impl TxQueue {
    /// The TX side of the tap behind `file`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        Ok(Self { sock: TapSocket::new(file)?, space: None })
    }

    /// Waits for the tap to take packets again: the worker is woken when it
    /// has room (or at once, if it has already).
    fn wait_for_space(&mut self, waker: &Arc<Waker>) {
        self.space = None;
        self.space = FilePoll::start(self.sock.pollable(), POLLOUT, waker.clone()).ok();
        if self.space.is_none() {
            // No poll (no memory, or the tap reports an error): look again
            // after a reschedule rather than never.
            waker.wake();
        }
    }
}

/// What happened to one TX packet.
enum TxStep {
    /// Gone to the tap, or batched for it, or dropped: its chain is done.
    Consumed { len: usize },
    /// The tap cannot take it now: put the chain back and wait for space.
    Retry,
}

/// Sends the packet of `chain` (whose readable segments are in `iov`) to
/// `sock`: batched if `batch_headroom` says the tap takes batches
/// ([`TapSocket::batch_headroom`]). Inlined into the TX loop, as C's
/// per-packet code is in `handle_tx_copy` (`scripts/profile --insns`).
#[inline(always)]
fn tx_one(
    sock: &TapSocket,
    scratch: &mut TxScratch,
    iov: &[Iov],
    chain: &Chain,
    hdr: HeaderLens,
    batch_headroom: Option<usize>,
    tally: &mut TxTally,
) -> Result<TxStep, VringError> {
    if chain.inn != 0 {
        return Err(VringError::WrongDirection);
    }
    let vhost_hlen = hdr.vhost as u64;
    if chain.out_len < vhost_hlen {
        return Err(VringError::ShortPacket);
    }
    let len = (chain.out_len - vhost_hlen) as usize;
    let readable = &iov[..chain.out];
    if let Some(headroom) = batch_headroom {
        // A full batch goes first: one call of `add` (inlined here) below.
        if scratch.batch.is_full() {
            scratch.send_batch(sock, tally);
        }
        match scratch.batch.add(readable, vhost_hlen, len, hdr.sock, headroom) {
            // Counted as sent when the batch goes.
            Batched::Added => return Ok(TxStep::Consumed { len }),
            Batched::Malformed => {
                tally.drops += 1;
                return Ok(TxStep::Consumed { len });
            }
            Batched::NoMemory => {
                scratch.send_batch(sock, tally);
                return Ok(TxStep::Retry);
            }
            // Larger than a page: what is batched goes first, to keep the
            // order, then this one on its own. (`Full` cannot come back:
            // the batch was emptied above, as `send` always does.)
            Batched::TooBig | Batched::Full => scratch.send_batch(sock, tally),
        }
    }
    let nuiov = to_user_iov(readable, vhost_hlen, &mut scratch.uiov);
    match sock.send(&scratch.uiov[..nuiov], len) {
        Ok(()) => {
            tally.sent += 1;
            tally.bytes += len as u64;
            Ok(TxStep::Consumed { len })
        }
        Err(SendError::Busy) => Ok(TxStep::Retry),
        Err(SendError::Dropped) => {
            tally.drops += 1;
            Ok(TxStep::Consumed { len })
        }
    }
}

/// Guest to tap, one run, over the ring memory `mem` with buffer addresses
/// translated through `space`. Returns true if it stopped because of the
/// weight.
fn handle_tx<M: GuestMemory, T: Translate + ?Sized>(
    active: &mut ActiveRing<'_, TxQueue>,
    mem: &M,
    space: &T,
) -> Result<bool, VringError> {
    let hdr = HeaderLens::of(active);
    let mut weight = Weight::default();
    let mut pending = 0usize;
    let mut tally = TxTally::default();
    let batch_headroom = active.backend.sock.batch_headroom();
    // This run sends until the tap or the ring is exhausted: no wakeups
    // from either meanwhile (vhost_net_disable_vq, vhost_disable_notify).
    active.backend.space = None;
    active.disable_notify(mem)?;
    let result = loop {
        if weight.exceeded() {
            break Ok(true);
        }
        let chain = match active.ring.pop(mem, space, active.iov) {
            Ok(Some(chain)) => chain,
            Ok(None) => {
                // With a busy-loop timeout, watch the ring a while before
                // sleeping: the guest, not asked to kick, may add more.
                match active.busy_poll(|active| active.ring.has_avail(mem)) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(err) => break Err(err),
                }
                match ring_ran_dry(active, mem, &mut weight) {
                    Ok(true) => continue,
                    Ok(false) => break Ok(false),
                    Err(err) => break Err(err),
                }
            }
            Err(err) => break Err(err),
        };
        match tx_one(&active.backend.sock, active.scratch, active.iov, &chain, hdr, batch_headroom, &mut tally) {
            Ok(TxStep::Consumed { len }) => {
                active.heads[pending] = UsedElem::of(&chain, 0);
                pending += 1;
                weight.packets += 1;
                weight.bytes += len as u64;
            }
            Ok(TxStep::Retry) => {
                active.ring.unpop(u32::from(chain.positions));
                active.backend.wait_for_space(active.waker);
                break Ok(false);
            }
            Err(err) => {
                active.ring.unpop(u32::from(chain.positions));
                break Err(err);
            }
        }
        if pending == MAX_BATCH {
            active.scratch.send_batch(&active.backend.sock, &mut tally);
            if let Err(err) = active.publish(mem, pending) {
                break Err(err);
            }
            pending = 0;
        }
    };
    // Whatever was batched goes out, and the used entries of everything
    // consumed are published, however the run ended: their chains are
    // done. Data was copied out of the guest's buffers already, so the
    // order only keeps the guest's view simple: used means sent.
    active.scratch.send_batch(&active.backend.sock, &mut tally);
    let published = active.publish(mem, pending);
    active.stats.add_run(tally.sent, tally.bytes, tally.drops);
    result.and_then(|more| published.map(|()| more))
}

impl Backend for TxQueue {
    const HEADS: usize = MAX_BATCH;
    type Scratch = TxScratch;

    fn new_scratch() -> Result<TxScratch> {
        Ok(TxScratch { batch: TxBatch::new()?, uiov: user_iov_scratch()? })
    }

    fn is_file(&self, file: &File) -> bool {
        self.sock.file().as_ptr() == file.as_ptr()
    }

    /// Polls for send space at once, as C does: `-EINVAL` if the tap
    /// reports an error, and a first run if it has room.
    fn enable(&mut self, waker: &Arc<Waker>) -> Result {
        self.space = Some(FilePoll::start(self.sock.pollable(), POLLOUT, waker.clone())?);
        Ok(())
    }

    fn run(active: &mut ActiveRing<'_, Self>) -> Result<bool, VringError> {
        let table = active.mem;
        match active.iotlb {
            None => handle_tx(active, &OwnerMem, &table[..]),
            Some(iotlb) => handle_tx(active, &Translated::new(&OwnerMem, iotlb), iotlb),
        }
    }
}

/// The RX side of a tap: the socket's queued packets, and the poll that
/// wakes the worker when packets arrive.
pub(crate) struct RxQueue {
    batch: RxBatch,
    /// Set once attached ([`Backend::enable`]).
    poll: Option<Pin<KBox<FilePoll>>>,
}

/// An RX queue's scratch: the user iovecs of one packet.
pub(crate) struct RxScratch {
    uiov: KVec<UserIov>,
}

impl RxQueue {
    /// The RX side of the tap behind `file`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        Ok(Self { batch: RxBatch::new(TapSocket::new(file)?)?, poll: None })
    }

    /// Stops being woken by the tap while a run drains it; see
    /// [`FilePoll::quiet`].
    fn quiet(&self) {
        if let Some(poll) = &self.poll {
            poll.quiet();
        }
    }

    /// The tap is busy: leaves its wait queue; see [`FilePoll::leave`].
    fn leave(&mut self) {
        if let Some(poll) = &mut self.poll {
            poll.as_mut().leave();
        }
    }

    /// The tap was found empty: listens to it again, then looks once more,
    /// since a packet queued before the listener was back did not wake us.
    /// Returns that packet's length, quiet again, if there is one.
    fn listen_and_recheck(&mut self) -> Option<usize> {
        if let Some(poll) = &mut self.poll {
            poll.as_mut().listen();
        }
        let len = self.batch.peek_len()?;
        self.quiet();
        Some(len)
    }
}

/// Buffers gathered for one RX packet.
enum Gather {
    /// `heads` chains with `segs` writable segments hold the packet.
    Ready { heads: usize, segs: usize },
    /// The guest's buffers cannot hold it (`heads` chains were taken).
    TooSmall { heads: usize },
    /// The ring ran out of buffers (all taken ones were put back).
    Empty,
}

/// Takes buffers until `need` bytes fit: one chain without mergeable
/// buffers, up to `MAX_RX_HEADS` chains (and as many segments) with them.
/// Their used elements go to `active.heads[first..]`. On error every chain
/// taken is put back; so are they with [`Gather::Empty`].
fn gather_rx<M: GuestMemory, T: Translate + ?Sized>(
    active: &mut ActiveRing<'_, RxQueue>,
    mem: &M,
    space: &T,
    first: usize,
    need: u64,
    mergeable: bool,
) -> Result<Gather, VringError> {
    let (mut heads, mut segs, mut got) = (0usize, 0usize, 0u64);
    while got < need {
        if heads == MAX_RX_HEADS || segs == active.iov.len() || (!mergeable && heads == 1) {
            return Ok(Gather::TooSmall { heads });
        }
        let chain = match active.ring.pop(mem, space, &mut active.iov[segs..]) {
            Ok(Some(chain)) => chain,
            Ok(None) => {
                active.ring.unpop(positions(&active.heads[first..first + heads]));
                return Ok(Gather::Empty);
            }
            // The chains taken so far left too few iov segments for this
            // one: the packet needs more than one packet may use, which is
            // not the guest's fault (pop consumed nothing).
            Err(VringError::TooManySegments) if heads > 0 => return Ok(Gather::TooSmall { heads }),
            Err(err) => {
                active.ring.unpop(positions(&active.heads[first..first + heads]));
                return Err(err);
            }
        };
        // A chain the device cannot write into: readable buffers, or no
        // writable bytes at all (the C driver's "unexpected descriptor
        // format for RX"). It must not count in num_buffers.
        if chain.out != 0 || chain.inn == 0 {
            active.ring.unpop(positions(&active.heads[first..first + heads]) + u32::from(chain.positions));
            return Err(if chain.out != 0 { VringError::WrongDirection } else { VringError::EmptyRxBuffer });
        }
        let take = core::cmp::min(chain.in_len, need - got);
        active.heads[first + heads] = UsedElem::of(&chain, take as u32);
        got += chain.in_len;
        segs += chain.inn;
        heads += 1;
    }
    Ok(Gather::Ready { heads, segs })
}

/// Tap to guest, one run, over the ring memory `mem` with buffer addresses
/// translated through `space`. Returns true if it stopped because of the
/// weight.
fn handle_rx<M: GuestMemory, T: Translate + ?Sized>(
    active: &mut ActiveRing<'_, RxQueue>,
    mem: &M,
    space: &T,
) -> Result<bool, VringError> {
    let hdr = HeaderLens::of(active);
    let mergeable = active.has_feature(feature::VIRTIO_NET_F_MRG_RXBUF);
    // num_buffers is there with mergeable buffers or virtio 1.x, and must
    // then be set (to 1 without mergeable buffers), as C's set_num_buffers.
    let set_num_buffers = mergeable || active.has_feature(feature::VIRTIO_F_VERSION_1);
    let mut weight = Weight::default();
    let (mut delivered, mut bytes, mut drops) = (0u64, 0u64, 0u64);
    // No kicks while this run takes buffers; the ring running empty asks
    // for them again (vhost_disable_notify).
    active.disable_notify(mem)?;
    // Packets that arrive while this run drains the tap need no wakeup; the
    // tap is listened to again only once it is found empty. Runs that end
    // for lack of guest buffers leave it quiet: the guest's kick brings the
    // worker back.
    active.backend.quiet();
    // heads[..pending]: packets written to the guest whose used entries are
    // not published yet. They go out MAX_BATCH at a time and when the run
    // ends, whatever ends it.
    let mut pending = 0usize;
    let result = loop {
        if pending >= MAX_BATCH {
            if let Err(err) = active.publish(mem, pending) {
                break Err(err);
            }
            pending = 0;
        }
        if weight.exceeded() {
            break Ok(true);
        }
        let len = match active.backend.batch.peek_len() {
            Some(len) => len,
            // With a busy-loop timeout, watch the tap a while before
            // sleeping on it.
            None => match active.busy_poll(|active| Ok(active.backend.batch.peek_len().is_some())) {
                Ok(true) => continue,
                Ok(false) => match active.backend.listen_and_recheck() {
                    Some(len) => len,
                    None => break Ok(false),
                },
                Err(err) => break Err(err),
            },
        };
        // A second packet in one run: the tap is busy, and its senders
        // need not find us on its wait queue until it is empty again.
        if delivered == 1 {
            active.backend.leave();
        }
        let sock_len = len + hdr.sock;
        let need = (sock_len + hdr.vhost) as u64;
        let (heads, segs) = match gather_rx(active, mem, space, pending, need, mergeable) {
            Ok(Gather::Ready { heads, segs }) => (heads, segs),
            Ok(Gather::TooSmall { heads }) => {
                // CVE-2014-0077: a packet larger than the guest's buffers
                // is dropped whole, never written past them. Every packet
                // taken off the tap counts toward the weight.
                active.ring.unpop(positions(&active.heads[pending..pending + heads]));
                active.backend.batch.discard();
                drops += 1;
                weight.packets += 1;
                continue;
            }
            // Without buffers the packet stays queued for the next run.
            Ok(Gather::Empty) => match ring_ran_dry(active, mem, &mut weight) {
                Ok(true) => continue,
                Ok(false) => break Ok(false),
                Err(err) => break Err(err),
            },
            Err(err) => break Err(err),
        };
        weight.packets += 1;
        let uiov = &mut active.scratch.uiov;
        let nuiov = to_user_iov(&active.iov[..segs], hdr.vhost as u64, uiov);
        if active.backend.batch.recv(&uiov[..nuiov], sock_len) == Received::Lost {
            // Truncated or failed: tun consumed the packet either way;
            // count the drop and keep the buffers.
            active.ring.unpop(positions(&active.heads[pending..pending + heads]));
            drops += 1;
            continue;
        }
        let num_buffers = heads as u16;
        // The buffers' addresses were translated when their chains were
        // taken: the header goes to the owner's memory directly.
        let written = if hdr.vhost > 0 {
            let header =
                VirtioNetHdr { num_buffers: if set_num_buffers { num_buffers } else { 0 }, ..Default::default() };
            write_iov(&OwnerMem, &active.iov[..segs], 0, &header.to_bytes()[..hdr.vhost])
        } else if set_num_buffers {
            write_num_buffers(&active.iov[..segs], num_buffers)
        } else {
            Ok(())
        };
        if let Err(err) = written {
            // The packet is lost; its buffers go back with the ring's
            // position (vhost_discard_vq_desc).
            active.ring.unpop(positions(&active.heads[pending..pending + heads]));
            break Err(err);
        }
        // Migration: the pages the packet went to are dirty now.
        active.log_written(&active.iov[..segs], need);
        pending += heads;
        delivered += 1;
        bytes += sock_len as u64;
        // The weight counts what the guest sees, the header included.
        weight.bytes += need;
    };
    let published = active.publish(mem, pending);
    active.stats.add_run(delivered, bytes, drops);
    result.and_then(|more| published.map(|()| more))
}

impl Backend for RxQueue {
    /// One packet's buffers after up to `MAX_BATCH` unpublished ones.
    const HEADS: usize = MAX_RX_HEADS + MAX_BATCH;
    type Scratch = RxScratch;

    fn new_scratch() -> Result<RxScratch> {
        Ok(RxScratch { uiov: user_iov_scratch()? })
    }

    fn is_file(&self, file: &File) -> bool {
        self.batch.sock().file().as_ptr() == file.as_ptr()
    }

    /// Listens to the tap for packets; a first run if it has some.
    fn enable(&mut self, waker: &Arc<Waker>) -> Result {
        self.poll = Some(FilePoll::start(self.batch.sock().pollable(), POLLIN, waker.clone())?);
        Ok(())
    }

    fn run(active: &mut ActiveRing<'_, Self>) -> Result<bool, VringError> {
        let table = active.mem;
        match active.iotlb {
            None => handle_rx(active, &OwnerMem, &table[..]),
            Some(iotlb) => handle_rx(active, &Translated::new(&OwnerMem, iotlb), iotlb),
        }
    }
}
