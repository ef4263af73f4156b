// SPDX-License-Identifier: GPL-2.0

//! The device IOTLB's messages (`struct vhost_msg`, `vhost_msg_v2`), as
//! userspace writes them and the device reads them out, and the misses
//! outstanding between the two.

use super::*;

/// `VHOST_IOTLB_MISS`: the device asks for a translation.
pub(crate) const MSG_MISS: u8 = 1;
/// `VHOST_IOTLB_UPDATE`: userspace adds a mapping.
pub(crate) const MSG_UPDATE: u8 = 2;
/// `VHOST_IOTLB_INVALIDATE`: userspace removes mappings.
pub(crate) const MSG_INVALIDATE: u8 = 3;
/// `VHOST_IOTLB_BATCH_BEGIN`: updates until the end may be applied as one.
pub(crate) const MSG_BATCH_BEGIN: u8 = 5;
/// `VHOST_IOTLB_BATCH_END`.
pub(crate) const MSG_BATCH_END: u8 = 6;

/// `VHOST_IOTLB_MSG`: the `type` word of a `struct vhost_msg`.
pub(crate) const FORMAT_V1: u32 = 0x1;
/// `VHOST_IOTLB_MSG_V2`: the `type` word of a `struct vhost_msg_v2`.
pub(crate) const FORMAT_V2: u32 = 0x2;

/// `sizeof(struct vhost_msg)` and `sizeof(struct vhost_msg_v2)` on 64-bit
/// kernels: a 4-byte type, 4 bytes of padding (v1) or the address-space id
/// (v2), and a 64-byte union whose first 32 bytes are the
/// `struct vhost_iotlb_msg`.
pub(crate) const MSG_LEN: usize = 72;
/// Offset of the `struct vhost_iotlb_msg` in either format.
const BODY_OFFSET: usize = 8;
/// `sizeof(struct vhost_iotlb_msg)`: iova, size, uaddr (8 bytes each),
/// perm, type, 6 bytes of padding.
const BODY_LEN: usize = 32;
/// The shortest write the C driver takes: type, pad or asid, body. What
/// lies past it in the union is ignored.
pub(crate) const MIN_WRITE: usize = BODY_OFFSET + BODY_LEN;

/// A message written by userspace, as [`parse_write`] read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    /// `VHOST_IOTLB_MSG` or `VHOST_IOTLB_MSG_V2`: the length a successful
    /// write returns does not depend on it (both are [`MSG_LEN`]).
    pub(crate) format: u32,
    pub(crate) iova: u64,
    pub(crate) size: u64,
    pub(crate) uaddr: u64,
    pub(crate) perm: u8,
    /// `VHOST_IOTLB_*`: only [`MSG_UPDATE`] and [`MSG_INVALIDATE`] are
    /// taken by the device; the caller refuses the rest.
    pub(crate) kind: u8,
}

/// Why a write was refused before its message was looked at: the C
/// driver's `-EINVAL` cases of `vhost_chr_write_iter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Shorter than the type word, or than the body its format needs.
    Short,
    /// A type word that is neither `VHOST_IOTLB_MSG` nor `_V2`.
    UnknownFormat,
    /// An update of size 0.
    EmptyUpdate,
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_ne_bytes(word)
}

/// Reads one message from the first bytes of a `write()` (the caller
/// copies at most [`MIN_WRITE`] of them; more are ignored, as in C). The
/// address-space id of a v2 message is skipped: vhost-net never acks
/// `VHOST_BACKEND_F_IOTLB_ASID`, so it is always 0 to the device.
pub(crate) fn parse_write(bytes: &[u8]) -> Result<Message, FrameError> {
    let head: [u8; 4] = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(FrameError::Short)?;
    let format = u32::from_ne_bytes(head);
    if format != FORMAT_V1 && format != FORMAT_V2 {
        return Err(FrameError::UnknownFormat);
    }
    let body = bytes
        .get(BODY_OFFSET..BODY_OFFSET + BODY_LEN)
        .ok_or(FrameError::Short)?;
    let message = Message {
        format,
        iova: u64_at(body, 0),
        size: u64_at(body, 8),
        uaddr: u64_at(body, 16),
        perm: body[24],
        kind: body[25],
    };
    if message.kind == MSG_UPDATE && message.size == 0 {
        return Err(FrameError::EmptyUpdate);
    }
    Ok(message)
}

/// The bytes of a miss message for `read()`: `format` is the one the queue
/// acked (v2 with `VHOST_BACKEND_F_IOTLB_MSG_V2`); size and uaddr are 0.
pub(crate) fn encode_miss(format: u32, iova: u64, access: Access) -> [u8; MSG_LEN] {
    let mut bytes = [0u8; MSG_LEN];
    bytes[..4].copy_from_slice(&format.to_ne_bytes());
    bytes[BODY_OFFSET..BODY_OFFSET + 8].copy_from_slice(&iova.to_ne_bytes());
    bytes[BODY_OFFSET + 24] = access_bits(access);
    bytes[BODY_OFFSET + 25] = MSG_MISS;
    bytes
}

/// A miss, posted by a queue's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Miss {
    pub(crate) iova: u64,
    pub(crate) access: Access,
    /// The message format the queue acked when the miss was posted.
    pub(crate) format: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum MissState {
    #[default]
    None,
    /// Posted, not yet read by userspace; `seq` orders the reads.
    Unread(Miss, u64),
    /// Read by userspace: the queue waits for an update that covers it.
    Pending(Miss),
}

/// The outstanding misses of a device's `N` queues.
///
/// A queue has at most one: it stops at its first miss, and a second one
/// is dropped until the first is answered (the C driver's
/// `vq->iotlb_miss`), so a queue cannot grow the list. `read()` takes the
/// oldest unread one; an update
/// answers the read ones whose address it covers, as C answers only its
/// `pending_list`.
///
/// # Invariants
///
/// Every `Unread` sequence number is below `next_seq`; `N <= 64`, so that
/// [`Misses::answer`] names every queue in its mask.
pub(crate) struct Misses<const N: usize> {
    queues: [MissState; N],
    next_seq: u64,
}

impl<const N: usize> Default for Misses<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Misses<N> {
    /// No miss outstanding.
    pub(crate) const fn new() -> Self {
        const { assert!(N <= 64, "the answer mask has 64 bits") };
        // INVARIANT: no `Unread` state; `N` checked above.
        Misses {
            queues: [MissState::None; N],
            next_seq: 0,
        }
    }

    /// Queue `queue` (below `N`) posts `miss`. Returns whether it is new:
    /// `false` if the queue has one outstanding, read or not, so that
    /// readers are woken only for something new to read (C's
    /// `vq->iotlb_miss`: a queue waits for the answer to its first miss).
    pub(crate) fn post(&mut self, queue: usize, miss: Miss) -> bool {
        match self.queues.get_mut(queue) {
            Some(state @ MissState::None) => {
                // INVARIANT: `next_seq` moves past the number given out.
                *state = MissState::Unread(miss, self.next_seq);
                self.next_seq += 1;
                true
            }
            _ => false,
        }
    }

    /// Whether a `read()` would find a message (`poll`'s `EPOLLIN`).
    pub(crate) fn readable(&self) -> bool {
        self.queues
            .iter()
            .any(|state| matches!(state, MissState::Unread(..)))
    }

    /// `read()`: the oldest unread miss, now pending, and its queue.
    pub(crate) fn read(&mut self) -> Option<(usize, Miss)> {
        let (index, miss) = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(index, state)| match state {
                MissState::Unread(miss, seq) => Some((index, *miss, *seq)),
                _ => None,
            })
            .min_by_key(|&(_, _, seq)| seq)
            .map(|(index, miss, _)| (index, miss))?;
        self.queues[index] = MissState::Pending(miss);
        Some((index, miss))
    }

    /// The `read()` of queue `queue`'s miss could not copy the message
    /// out: as in C, the message is dropped, and the queue may post again.
    pub(crate) fn drop_read(&mut self, queue: usize) {
        if let Some(state @ MissState::Pending(_)) = self.queues.get_mut(queue) {
            *state = MissState::None;
        }
    }

    /// An update of `[iova, iova + size - 1]` arrived: clears the pending
    /// misses it covers and returns the queues to wake, as a bit mask
    /// (bit `q` for queue `q`).
    pub(crate) fn answer(&mut self, iova: u64, size: u64) -> u64 {
        let last = iova.wrapping_add(size.wrapping_sub(1));
        let mut wake = 0;
        for (index, state) in self.queues.iter_mut().enumerate() {
            if let MissState::Pending(miss) = *state {
                if iova <= miss.iova && miss.iova <= last {
                    *state = MissState::None;
                    // `index < N <= 64` (type invariant).
                    wake |= 1u64 << index;
                }
            }
        }
        wake
    }

    /// Forgets every miss, unread and pending (`RESET_OWNER`, a backend
    /// set to -1, the IOTLB switched off): C frees both of its lists.
    pub(crate) fn clear(&mut self) {
        self.queues = [MissState::None; N];
    }
}
