// SPDX-License-Identifier: GPL-2.0

//! A stack buffer for the rings' used-entry batches that is filled without
//! being cleared first: `core`-only, compiled into the host tests with the
//! parsers. Its one `unsafe` block hands out the prefix the fill wrote.

use core::mem::MaybeUninit;

/// Up to `N` values gathered on the stack for one user access (used
/// elements, used descriptors), without clearing the whole array first: a
/// zeroed `[T; N]` cost a memset of all of it per batch, more than the
/// stores of a short batch (an RX run of a few packets).
pub(crate) struct Staged<T: Copy, const N: usize>([MaybeUninit<T>; N]);

impl<T: Copy, const N: usize> Staged<T, N> {
    pub(crate) fn new() -> Self {
        Self([MaybeUninit::uninit(); N])
    }

    /// Stages the first `N` values of `values` (no more are taken from
    /// it) and returns them.
    pub(crate) fn fill(&mut self, values: impl IntoIterator<Item = T>) -> &[T] {
        let mut len = 0;
        // `zip` takes a value only for a free slot.
        for (slot, value) in self.0.iter_mut().zip(values) {
            slot.write(value);
            len += 1;
        }
        // SAFETY: the loop wrote `self.0[..len]`, and `MaybeUninit<T>` has
        // the layout of `T`.
        unsafe { core::slice::from_raw_parts(self.0.as_ptr().cast::<T>(), len) }
    }
}
