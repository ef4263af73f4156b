// SPDX-License-Identifier: GPL-2.0

//! The virtio-net data path: guest TX ring to tap, tap to guest RX ring.
//!
//! Both handlers run in their queue's worker with the queue's lock held, do
//! at most a weight of work per run (so one busy queue cannot monopolise its
//! worker), batch used-ring updates, and signal the guest only when its
//! notification-suppression state asks for it.

use crate::glue::EventFd;
use crate::tap_glue::{TapSocket, TxBatch};
use crate::uaccess::OwnerMem;
use crate::uapi::{bit, feature};
use crate::virtqueue::{Stats, UserIov, VirtQueue, VqInner, MAX_BATCH, MAX_RX_HEADS};
use crate::vring::{GuestMemory, Iov, Vring, VringError};
use kernel::prelude::*;

/// Packets per run before yielding (`VHOST_NET_PKT_WEIGHT`).
const PKT_WEIGHT: u64 = 256;
/// Bytes per run before yielding (`VHOST_NET_WEIGHT`).
const BYTE_WEIGHT: u64 = 0x80000;

/// Offset of `num_buffers` in `struct virtio_net_hdr_mrg_rxbuf`.
const NUM_BUFFERS_OFF: usize = 10;

/// Header lengths: (added/stripped by vhost, added/stripped by the tap).
fn hdr_lens(features: u64) -> (usize, usize) {
    let hdr = if features & (bit(feature::VIRTIO_NET_F_MRG_RXBUF) | bit(feature::VIRTIO_F_VERSION_1))
        != 0
    {
        12
    } else {
        10
    };
    if features & bit(feature::VHOST_NET_F_VIRTIO_NET_HDR) != 0 {
        (hdr, 0)
    } else {
        (0, hdr)
    }
}

/// Fills `uiov` with the segments `iov`, skipping the first `skip` bytes.
/// Returns the number of user iovecs written.
fn to_user_iov(iov: &[Iov], mut skip: u64, uiov: &mut [UserIov]) -> usize {
    let mut n = 0;
    for s in iov {
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let Some(slot) = uiov.get_mut(n) else { break };
        *slot = UserIov { base: (s.addr + skip) as usize, len: (s.len - skip) as usize };
        skip = 0;
        n += 1;
    }
    n
}

/// Writes `data` at byte `off` of the buffer described by `iov`.
fn write_iov<M: GuestMemory>(m: &M, iov: &[Iov], mut off: u64, data: &[u8]) -> Result<(), VringError> {
    let mut done = 0usize;
    for s in iov {
        if done == data.len() {
            break;
        }
        if off >= s.len {
            off -= s.len;
            continue;
        }
        let n = core::cmp::min((s.len - off) as usize, data.len() - done);
        m.write(s.addr + off, &data[done..done + n])?;
        done += n;
        off = 0;
    }
    if done == data.len() {
        Ok(())
    } else {
        Err(VringError::Fault)
    }
}

/// Publishes `heads` and signals the guest if it wants to be.
fn flush(
    vq: &VirtQueue,
    ring: &mut Vring,
    call: &Option<EventFd>,
    heads: &[(u16, u32)],
) -> Result<(), VringError> {
    if heads.is_empty() {
        return Ok(());
    }
    let m = OwnerMem;
    ring.add_used(&m, heads)?;
    if ring.should_notify(&m)? {
        if let Some(c) = call {
            c.signal();
            Stats::add(&vq.stats.calls, 1);
        }
    }
    Ok(())
}

/// Sends what is batched, then publishes the used entries of everything
/// consumed so far. Data was copied out of the guest's buffers already, so
/// the order only keeps the guest's view simple: used means sent.
fn tx_flush(
    vq: &VirtQueue,
    ring: &mut Vring,
    call: &Option<EventFd>,
    heads: &[(u16, u32)],
    txb: &mut Option<TxBatch>,
    sock: &TapSocket,
) -> Result<(), VringError> {
    if let Some(b) = txb.as_mut() {
        let n = b.len() as u64;
        if b.send(sock).is_err() {
            Stats::add(&vq.stats.drops, n);
        }
    }
    flush(vq, ring, call, heads)
}

/// Guest to tap. Returns true if it stopped because of the weight.
pub(crate) fn handle_tx(vq: &VirtQueue, s: &mut VqInner) -> bool {
    if s.broken {
        return false;
    }
    let (Some(sock), Some(mem)) = (s.backend.clone(), s.mem.clone()) else { return false };
    let (vhost_hlen, sock_hlen) = hdr_lens(s.features);
    let batching = s.txb.is_some() && sock.can_batch();
    let m = OwnerMem;
    let mut pkts = 0u64;
    let mut bytes = 0u64;
    let mut nheads = 0usize;
    let mut wait_space = false;
    // Counted locally and published once per run: no atomic per packet.
    let (mut sent, mut sent_bytes) = (0u64, 0u64);
    let res: Result<bool, VringError> = (|| {
        let VqInner { ring, iov, uiov, heads, call, txb, .. } = &mut *s;
        let Some(ring) = ring.as_mut() else { return Ok(false) };
        ring.disable_notify(&m)?;
        loop {
            if pkts >= PKT_WEIGHT || bytes >= BYTE_WEIGHT {
                tx_flush(vq, ring, call, &heads[..nheads], txb, &sock)?;
                return Ok(true);
            }
            let Some(c) = ring.pop(&m, &mem, iov)? else {
                if ring.enable_notify(&m)? {
                    ring.disable_notify(&m)?;
                    continue;
                }
                break;
            };
            if c.inn != 0 {
                return Err(VringError::WrongDirection);
            }
            let hl = vhost_hlen as u64;
            if c.out_len < hl {
                return Err(VringError::WrongDirection);
            }
            let len = (c.out_len - hl) as usize;
            let n = to_user_iov(&iov[..c.out], hl, uiov);
            // Fast path: copy into a page fragment for one batched sendmsg.
            let mut done = false;
            if let (true, Some(b)) = (batching, txb.as_mut()) {
                match b.add(&uiov[..n], len, sock_hlen) {
                    Ok(()) => {
                        sent += 1;
                        sent_bytes += len as u64;
                        done = true;
                    }
                    // Too big for a page: send what is batched first, to
                    // keep the order, then this one the slow way.
                    Err(e) if e == ENOSPC => {
                        let k = b.len() as u64;
                        if b.send(&sock).is_err() {
                            Stats::add(&vq.stats.drops, k);
                        }
                    }
                    Err(_) => {
                        Stats::add(&vq.stats.drops, 1);
                        done = true;
                    }
                }
            }
            if !done {
                match sock.send(&uiov[..n], len) {
                    Err(e) if e == EAGAIN || e == ENOBUFS => {
                        ring.unpop(1);
                        wait_space = true;
                        break;
                    }
                    Err(_) => Stats::add(&vq.stats.drops, 1),
                    Ok(_) => {
                        sent += 1;
                        sent_bytes += len as u64;
                    }
                }
            }
            heads[nheads] = (c.head, 0);
            nheads += 1;
            if nheads == MAX_BATCH {
                tx_flush(vq, ring, call, &heads[..nheads], txb, &sock)?;
                nheads = 0;
            }
            pkts += 1;
            bytes += len as u64;
        }
        tx_flush(vq, ring, call, &heads[..nheads], txb, &sock)?;
        Ok(false)
    })();
    Stats::add(&vq.stats.packets, sent);
    Stats::add(&vq.stats.bytes, sent_bytes);
    if wait_space {
        vq.poll_tx_space(s);
    }
    match res {
        Ok(more) => more,
        Err(e) => {
            // Whatever was batched still goes out; its chains were consumed.
            if let (Some(b), Some(sock)) = (s.txb.as_mut(), s.backend.clone()) {
                let _ = b.send(&sock);
            }
            vq.fail(s, e);
            false
        }
    }
}

/// Tap to guest. Returns true if it stopped because of the weight.
pub(crate) fn handle_rx(vq: &VirtQueue, s: &mut VqInner) -> bool {
    if s.broken {
        return false;
    }
    let Some(mem) = s.mem.clone() else { return false };
    let (vhost_hlen, sock_hlen) = hdr_lens(s.features);
    let mergeable = s.features & bit(feature::VIRTIO_NET_F_MRG_RXBUF) != 0;
    let m = OwnerMem;
    let (mut pkts, mut delivered, mut bytes) = (0u64, 0u64, 0u64);
    let res: Result<bool, VringError> = (|| {
        let VqInner { ring, iov, uiov, heads, call, rxb, sock_poll, .. } = &mut *s;
        let (Some(ring), Some(sock)) = (ring.as_mut(), rxb.as_mut()) else { return Ok(false) };
        // Packets that arrive while this run drains the tap need no wakeup;
        // the tap is listened to again only once it is found empty. Runs
        // that end for lack of guest buffers leave it quiet: the guest's
        // kick brings the worker back.
        let listen = |on: bool| {
            if let Some(p) = sock_poll.as_ref() {
                p.set_armed(on);
            }
        };
        listen(false);
        // heads[..pending]: packets written to the guest whose used entries
        // are not published yet. They go out MAX_BATCH at a time and when
        // the run ends, whatever ends it.
        let mut pending = 0usize;
        let r = (|| loop {
            if pending >= MAX_BATCH {
                flush(vq, ring, call, &heads[..pending])?;
                pending = 0;
            }
            if pkts >= PKT_WEIGHT || bytes >= BYTE_WEIGHT {
                return Ok(true);
            }
            let mut plen = sock.peek_len();
            if plen == 0 {
                listen(true);
                // A packet queued before the listener was back did not wake
                // us: look once more.
                plen = sock.peek_len();
                if plen == 0 {
                    return Ok(false);
                }
                listen(false);
            }
            let sock_len = plen + sock_hlen;
            let need = (sock_len + vhost_hlen) as u64;
            // Gather buffers until the packet fits: one chain without
            // mergeable buffers, up to MAX_RX_HEADS chains (and as many iov
            // segments) with them.
            let mut nh = 0usize;
            let mut seg = 0usize;
            let mut got = 0u64;
            let mut too_small = false;
            while got < need {
                if nh == MAX_RX_HEADS || seg == iov.len() || (!mergeable && nh == 1) {
                    too_small = true;
                    break;
                }
                let c = match ring.pop(&m, &mem, &mut iov[seg..]) {
                    Ok(Some(c)) => c,
                    Ok(None) => {
                        // Not enough buffers: give back what we took and
                        // wait for the guest's kick; the packet stays queued.
                        ring.unpop(nh as u16);
                        if ring.enable_notify(&m)? {
                            ring.disable_notify(&m)?;
                            nh = usize::MAX;
                            break;
                        }
                        return Ok(false);
                    }
                    Err(e) => {
                        ring.unpop(nh as u16);
                        return Err(e);
                    }
                };
                if c.out != 0 {
                    ring.unpop(nh as u16 + 1);
                    return Err(VringError::WrongDirection);
                }
                let take = core::cmp::min(c.in_len, need - got);
                heads[pending + nh] = (c.head, take as u32);
                got += c.in_len;
                seg += c.inn;
                nh += 1;
            }
            if nh == usize::MAX {
                continue; // buffers arrived while enabling notifications
            }
            // Every packet taken off the tap counts toward the weight,
            // dropped ones included, so no run can go on forever.
            pkts += 1;
            if too_small {
                // CVE-2014-0077: a packet larger than the guest's buffers is
                // dropped whole, never written past them.
                ring.unpop(nh as u16);
                sock.discard();
                Stats::add(&vq.stats.drops, 1);
                continue;
            }
            let n = to_user_iov(&iov[..seg], vhost_hlen as u64, uiov);
            match sock.recv(&uiov[..n], sock_len) {
                Ok(r) if r == sock_len => {}
                _ => {
                    // Truncated or failed: tun consumed the packet either
                    // way; count the drop and keep the buffers.
                    ring.unpop(nh as u16);
                    Stats::add(&vq.stats.drops, 1);
                    continue;
                }
            }
            let nb = (nh as u16).to_le_bytes();
            if vhost_hlen > 0 {
                let mut hdr = [0u8; 12];
                if mergeable {
                    hdr[NUM_BUFFERS_OFF..].copy_from_slice(&nb);
                }
                write_iov(&m, &iov[..seg], 0, &hdr[..vhost_hlen])?;
            } else if mergeable {
                write_iov(&m, &iov[..seg], NUM_BUFFERS_OFF as u64, &nb)?;
            }
            pending += nh;
            delivered += 1;
            bytes += sock_len as u64;
        })();
        let f = flush(vq, ring, call, &heads[..pending]);
        r.and_then(|more| f.map(|()| more))
    })();
    Stats::add(&vq.stats.packets, delivered);
    Stats::add(&vq.stats.bytes, bytes);
    match res {
        Ok(more) => more,
        Err(e) => {
            vq.fail(s, e);
            false
        }
    }
}
