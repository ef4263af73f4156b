// SPDX-License-Identifier: GPL-2.0

//! Virtio-net RX: the tap to the guest's RX ring ([`RxBackend`]), in the
//! queue's worker with the queue's lock held (C's `handle_rx`).

use super::datapath::NetConfig;
use crate::net::NetError;
use crate::tap_glue::file_poll::{FilePoll, POLLIN};
use crate::vring::net_hdr::VirtioNetHdr;
use crate::vring::Features;

use crate::tap_glue::rx_batch::{Received, RxBatch};
use crate::tap_glue::tap::{TapSocket, UserIov};
use crate::vring::mem_table::Translate;

use super::datapath::*;
use crate::net::{MAX_BATCH, MAX_RX_HEADS};
use crate::tap_glue::worker::Waker;

use crate::vhost::virtqueue::{ActiveRing, Backend};
use crate::vring::{positions, Stop, UsedElem, UserMemory, VringError};
use kernel::{
    fs::File,
    prelude::*,
    sync::{aref::ARef, Arc},
};

/// The RX side of a tap: the socket's queued packets, and the poll that
/// wakes the worker when packets arrive.
pub(crate) struct RxBackend {
    batch: RxBatch,
    /// Set once attached ([`Backend::enable`]).
    poll: Option<Pin<KBox<FilePoll>>>,
}

/// An RX queue's scratch: the user iovecs of one packet.
pub(crate) struct RxScratch {
    uiov: KVec<UserIov>,
}

impl RxBackend {
    /// The RX side of the tap behind `file`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        Ok(Self {
            batch: RxBatch::new(TapSocket::new(file)?)?,
            poll: None,
        })
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
fn gather_rx<M: UserMemory, T: Translate + ?Sized>(
    active: &mut ActiveRing<'_, RxBackend>,
    mem: &M,
    space: &T,
    first: usize,
    need: u64,
    mergeable: bool,
) -> Result<Gather, NetError> {
    let (mut heads, mut segs, mut got) = (0usize, 0usize, 0u64);
    while got < need {
        if heads == MAX_RX_HEADS || segs == active.iov.len() || (!mergeable && heads == 1) {
            return Ok(Gather::TooSmall { heads });
        }
        let chain = match active.ring.pop(mem, space, &mut active.iov[segs..]) {
            Ok(Some(chain)) => chain,
            Ok(None) => {
                active
                    .ring
                    .unpop(positions(&active.heads[first..first + heads]));
                return Ok(Gather::Empty);
            }
            // The chains taken so far left too few iov segments for this
            // one: the packet needs more than one packet may use, which is
            // not the guest's fault (pop consumed nothing).
            Err(Stop::Error(VringError::TooManySegments)) if heads > 0 => {
                return Ok(Gather::TooSmall { heads })
            }
            Err(err) => {
                active
                    .ring
                    .unpop(positions(&active.heads[first..first + heads]));
                return Err(err.into());
            }
        };
        // A chain the device cannot write into: readable buffers, or no
        // writable bytes at all (the C driver's "unexpected descriptor
        // format for RX"). It must not count in num_buffers.
        if chain.readable != 0 || chain.writable == 0 {
            active
                .ring
                .unpop(positions(&active.heads[first..first + heads]) + u32::from(chain.positions));
            return Err(if chain.readable != 0 {
                NetError::WrongDirection
            } else {
                NetError::EmptyRxBuffer
            });
        }
        let take = core::cmp::min(chain.writable_len, need - got);
        active.heads[first + heads] = UsedElem::of(&chain, take as u32);
        got += chain.writable_len;
        segs += chain.writable;
        heads += 1;
    }
    Ok(Gather::Ready { heads, segs })
}

/// Tap to guest, one run, over the ring memory `mem` with buffer addresses
/// translated through `space`. Returns true if it stopped because of the
/// weight.
fn handle_rx<M: UserMemory, T: Translate + ?Sized>(
    active: &mut ActiveRing<'_, RxBackend>,
    mem: &M,
    space: &T,
) -> Result<bool, NetError> {
    let NetConfig {
        hdr,
        mergeable,
        set_num_buffers,
    } = active.config;
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
    let result: Result<bool, NetError> = loop {
        if pending >= MAX_BATCH {
            // Published or not, these heads are done with: the publish after
            // the loop must not add them again (C resets `done_idx` whatever
            // vhost_add_used_and_signal_n returned).
            let published = active.publish(mem, pending);
            pending = 0;
            if let Err(err) = published {
                break Err(err.into());
            }
        }
        if weight.exceeded() {
            break Ok(true);
        }
        let len = match active.backend.batch.peek_len() {
            Some(len) => len,
            // With a busy-loop timeout, watch the tap a while before
            // sleeping on it.
            None => {
                match active.busy_poll(|active| Ok(active.backend.batch.peek_len().is_some())) {
                    Ok(true) => continue,
                    Ok(false) => match active.backend.listen_and_recheck() {
                        Some(len) => len,
                        None => break Ok(false),
                    },
                    Err(err) => break Err(err.into()),
                }
            }
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
                active
                    .ring
                    .unpop(positions(&active.heads[pending..pending + heads]));
                active.backend.batch.discard();
                drops += 1;
                weight.packets += 1;
                continue;
            }
            // Without buffers the packet stays queued for the next run.
            Ok(Gather::Empty) => match ring_ran_dry(active, mem, &mut weight) {
                Ok(true) => continue,
                Ok(false) => break Ok(false),
                Err(err) => break Err(err.into()),
            },
            Err(err) => break Err(err),
        };
        weight.packets += 1;
        let uiov = &mut active.scratch.uiov;
        let nuiov = to_user_iov(&active.iov[..segs], hdr.vhost as u64, uiov);
        if active.backend.batch.recv(&uiov[..nuiov], sock_len) == Received::Lost {
            // Truncated or failed: tun consumed the packet either way;
            // count the drop and keep the buffers.
            active
                .ring
                .unpop(positions(&active.heads[pending..pending + heads]));
            drops += 1;
            continue;
        }
        let num_buffers = heads as u16;
        // The buffers' addresses were translated when their chains were
        // taken: the header goes to the owner's memory directly.
        let written = if hdr.vhost > 0 {
            let header = VirtioNetHdr {
                num_buffers: if set_num_buffers { num_buffers } else { 0 },
                ..Default::default()
            };
            write_iov(
                active.owner,
                &active.iov[..segs],
                0,
                &header.to_bytes()[..hdr.vhost],
            )
        } else if set_num_buffers {
            write_num_buffers(active.owner, &active.iov[..segs], num_buffers)
        } else {
            Ok(())
        };
        if let Err(err) = written {
            // The packet is lost; its buffers go back with the ring's
            // position (vhost_discard_vq_desc).
            active
                .ring
                .unpop(positions(&active.heads[pending..pending + heads]));
            break Err(err.into());
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
    result.and_then(|more| published.map(|()| more).map_err(NetError::from))
}

impl Backend for RxBackend {
    /// One packet's buffers after up to `MAX_BATCH` unpublished ones.
    const HEADS: usize = MAX_RX_HEADS + MAX_BATCH;
    type Scratch = RxScratch;
    type Config = NetConfig;
    type Error = NetError;

    fn config(features: Features) -> NetConfig {
        NetConfig::of(features)
    }

    fn new_scratch() -> Result<RxScratch> {
        Ok(RxScratch {
            uiov: user_iov_scratch()?,
        })
    }

    fn is_file(&self, file: &File) -> bool {
        self.batch.sock().file().as_ptr() == file.as_ptr()
    }

    /// Listens to the tap for packets; a first run if it has some.
    fn enable(&mut self, waker: &Arc<Waker>) -> Result {
        self.poll = Some(FilePoll::start(
            self.batch.sock().pollable(),
            POLLIN,
            waker.clone(),
        )?);
        Ok(())
    }

    fn run<M: UserMemory, T: Translate + ?Sized>(
        active: &mut ActiveRing<'_, Self>,
        mem: &M,
        translate: &T,
    ) -> Result<bool, NetError> {
        handle_rx(active, mem, translate)
    }
}
