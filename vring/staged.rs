// SPDX-License-Identifier: GPL-2.0

//! A stack buffer for the rings' used-entry batches that is filled without
//! being cleared first: `core`-only, compiled into the host tests with the
//! parsers. Its two `unsafe` blocks, one per fill, hand out the prefix the
//! fill wrote.

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

    /// Stages `make(source)` for the leading elements of `sources` that
    /// `take` accepts, up to `N` of them, and returns them: the prefix of
    /// `sources` they stand for is as long. One loop over the two arrays
    /// side by side, where `take_while` on `fill`'s iterator kept a count
    /// of its own.
    pub(crate) fn fill_while<S>(
        &mut self,
        sources: &[S],
        take: impl Fn(&S) -> bool,
        make: impl Fn(&S) -> T,
    ) -> &[T] {
        let mut len = 0;
        for (slot, source) in self.0.iter_mut().zip(sources) {
            if !take(source) {
                break;
            }
            slot.write(make(source));
            len += 1;
        }
        // SAFETY: the loop wrote `self.0[..len]`, and `MaybeUninit<T>` has
        // the layout of `T`.
        unsafe { core::slice::from_raw_parts(self.0.as_ptr().cast::<T>(), len) }
    }
}
