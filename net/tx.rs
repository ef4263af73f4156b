// SPDX-License-Identifier: GPL-2.0

//! Virtio-net TX: the guest's TX ring to the tap ([`TxBackend`]), in the
//! queue's worker with the queue's lock held (C's `handle_tx`).

use super::datapath::NetConfig;
use crate::net::NetError;
use crate::tap_glue::file_poll::{FilePoll, POLLOUT};
use crate::vring::Features;

use crate::vring::mem_table::Translate;

use crate::tap_glue::tap::{SendError, TapSocket, UserIov};
use crate::tap_glue::tx_batch::{BatchSent, Batched, TxBatch};
use crate::tap_glue::uaccess::OwnerMem;

use super::datapath::*;
use crate::net::MAX_BATCH;
use crate::tap_glue::worker::Waker;

use crate::vhost::virtqueue::{ActiveRing, Backend};
use crate::vring::{Chain, Iov, UsedElem, UserMemory};
use kernel::{
    fs::File,
    prelude::*,
    sync::{aref::ARef, Arc},
};

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
pub(crate) struct TxBackend {
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

impl TxBackend {
    /// The TX side of the tap behind `file`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        Ok(Self {
            sock: TapSocket::new(file)?,
            space: None,
        })
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

/// How the packets of one run are framed for the tap.
#[derive(Clone, Copy)]
struct TxFormat {
    hdr: HeaderLens,
    /// The headroom of a batched packet, if the tap takes batches.
    batch_headroom: Option<usize>,
}

/// Sends the packet of `chain` (whose readable segments are in `iov`) to
/// `sock`: batched if `format.batch_headroom` says the tap takes batches
/// ([`TapSocket::batch_headroom`]). Inlined into the TX loop, as C's
/// per-packet code is in `handle_tx_copy`.
#[inline(always)]
fn tx_one(
    owner: &OwnerMem,
    sock: &TapSocket,
    scratch: &mut TxScratch,
    iov: &[Iov],
    chain: &Chain,
    format: TxFormat,
    tally: &mut TxTally,
) -> Result<TxStep, NetError> {
    if chain.writable != 0 {
        return Err(NetError::WrongDirection);
    }
    let TxFormat {
        hdr,
        batch_headroom,
    } = format;
    let vhost_hlen = hdr.vhost as u64;
    if chain.readable_len < vhost_hlen {
        return Err(NetError::ShortPacket);
    }
    let len = (chain.readable_len - vhost_hlen) as usize;
    let readable = &iov[..chain.readable];
    if let Some(headroom) = batch_headroom {
        // A full batch goes first: one call of `add` (inlined here) below.
        if scratch.batch.is_full() {
            scratch.send_batch(sock, tally);
        }
        match scratch
            .batch
            .add(owner, readable, vhost_hlen, len, hdr.sock, headroom)
        {
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
fn handle_tx<M: UserMemory, T: Translate + ?Sized>(
    active: &mut ActiveRing<'_, TxBackend>,
    mem: &M,
    space: &T,
) -> Result<bool, NetError> {
    let hdr = active.config.hdr;
    let mut weight = Weight::default();
    let mut pending = 0usize;
    let mut tally = TxTally::default();
    let format = TxFormat {
        hdr,
        batch_headroom: active.backend.sock.batch_headroom(),
    };
    // This run sends until the tap or the ring is exhausted: no wakeups
    // from either meanwhile (vhost_net_disable_vq, vhost_disable_notify).
    active.backend.space = None;
    active.disable_notify(mem)?;
    let result: Result<bool, NetError> = loop {
        if weight.exceeded() {
            break Ok(true);
        }
        let chain = match active.ring.pop(mem, space, active.iov) {
            Ok(Some(chain)) => chain,
            Ok(None) => {
                // With a busy-loop timeout, watch the ring a while before
                // sleeping: the guest, not asked to kick, may add more.
                match active.busy_poll(|active| active.ring.has_avail(mem)) {
                    // Charged like any pass: `pop` may find nothing again
                    // (a packed ring's guest can show the AVAIL bit to
                    // `has_avail` and take it back before `pop` reads it),
                    // and uncharged retries would keep the worker in this
                    // run, its queue locked, for as long as the guest
                    // likes. Every `continue` of C's handle_tx_copy passes
                    // its loop's `vhost_exceeds_weight(vq, ++sent_pkts,
                    // total_len)`.
                    Ok(true) => {
                        weight.packets += 1;
                        continue;
                    }
                    Ok(false) => {}
                    Err(err) => break Err(err.into()),
                }
                match ring_ran_dry(active, mem, &mut weight) {
                    Ok(true) => continue,
                    Ok(false) => break Ok(false),
                    Err(err) => break Err(err.into()),
                }
            }
            Err(err) => break Err(err.into()),
        };
        match tx_one(
            active.owner,
            &active.backend.sock,
            active.scratch,
            active.iov,
            &chain,
            format,
            &mut tally,
        ) {
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
            // Published or not, these heads are done with: the publish after
            // the loop must not add them again (C resets `done_idx` whatever
            // vhost_add_used_and_signal_n returned).
            let published = active.publish(mem, pending);
            pending = 0;
            if let Err(err) = published {
                break Err(err.into());
            }
        }
    };
    // Whatever was batched goes out, and the used entries of everything
    // consumed are published, however the run ended: their chains are
    // done. Data was copied out of the guest's buffers already, so the
    // order only keeps the guest's view simple: used means sent.
    active.scratch.send_batch(&active.backend.sock, &mut tally);
    let published = active.publish(mem, pending);
    active.stats.add_run(tally.sent, tally.bytes, tally.drops);
    result.and_then(|more| published.map(|()| more).map_err(NetError::from))
}

impl Backend for TxBackend {
    const HEADS: usize = MAX_BATCH;
    type Scratch = TxScratch;
    type Config = NetConfig;
    type Error = NetError;

    fn config(features: Features) -> NetConfig {
        NetConfig::of(features)
    }

    fn new_scratch() -> Result<TxScratch> {
        Ok(TxScratch {
            batch: TxBatch::new()?,
            uiov: user_iov_scratch()?,
        })
    }

    fn is_file(&self, file: &File) -> bool {
        self.sock.file().as_ptr() == file.as_ptr()
    }

    /// Polls for send space at once, as C does: `-EINVAL` if the tap
    /// reports an error, and a first run if it has room.
    fn enable(&mut self, waker: &Arc<Waker>) -> Result {
        self.space = Some(FilePoll::start(
            self.sock.pollable(),
            POLLOUT,
            waker.clone(),
        )?);
        Ok(())
    }

    fn run<M: UserMemory, T: Translate + ?Sized>(
        active: &mut ActiveRing<'_, Self>,
        mem: &M,
        translate: &T,
    ) -> Result<bool, NetError> {
        handle_tx(active, mem, translate)
    }
}
