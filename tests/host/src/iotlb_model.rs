//! A plain model of the device IOTLB, written from the C driver's rules
//! (`drivers/vhost/iotlb.c`, `vhost.c`) without the table's sorting and
//! `reach`: the random tests and the `iotlb` fuzz target check
//! `iotlb::Iotlb` against it operation by operation.
use crate::vring::iotlb::*;
use crate::vring::mem_table::{Access, Segment, Translate, TranslateError};

pub(crate) const USER_LIMIT: u64 = 1 << 47;

/// A mapping as the model keeps it: in insertion order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ModelMap {
    pub(crate) start: u64,
    pub(crate) last: u64,
    pub(crate) uaddr: u64,
    pub(crate) perm: u8,
}

/// The model: a list in insertion order, the oldest first.
pub(crate) struct Model {
    pub(crate) maps: Vec<ModelMap>,
    pub(crate) limit: usize,
}

impl Model {
    pub(crate) fn new(limit: usize) -> Self {
        Model {
            maps: Vec::new(),
            limit,
        }
    }

    pub(crate) fn update(
        &mut self,
        iova: u64,
        size: u64,
        uaddr: u64,
        perm: u8,
    ) -> Result<(), UpdateError> {
        if size == 0 {
            return Err(UpdateError::BadRange);
        }
        let last = iova.checked_add(size - 1).ok_or(UpdateError::BadRange)?;
        // C: vhost_overflow(uaddr, size) and access_ok for each of RO, WO.
        let uend = u128::from(uaddr) + u128::from(size);
        if uend > 1u128 << 64 {
            return Err(UpdateError::BadUserAddr);
        }
        if perm & 3 != 0 && uend > u128::from(USER_LIMIT) {
            return Err(UpdateError::BadUserAddr);
        }
        if self.limit == 0 {
            return Err(UpdateError::NoCapacity);
        }
        if self.maps.len() == self.limit {
            self.maps.remove(0);
        }
        self.maps.push(ModelMap {
            start: iova,
            last,
            uaddr,
            perm,
        });
        Ok(())
    }

    pub(crate) fn invalidate(&mut self, iova: u64, size: u64) -> usize {
        let last = iova.wrapping_add(size.wrapping_sub(1));
        let before = self.maps.len();
        self.maps.retain(|m| !(m.start <= last && iova <= m.last));
        before - self.maps.len()
    }

    /// C's `vhost_iotlb_itree_first(addr, addr)`: the lowest start among
    /// the mappings holding `iova`, the oldest on a tie.
    pub(crate) fn find(&self, iova: u64) -> Option<ModelMap> {
        self.maps
            .iter()
            .filter(|m| m.start <= iova && iova <= m.last)
            .min_by_key(|m| m.start)
            .copied()
    }

    /// C's `translate_desc`, as pieces.
    pub(crate) fn translate(
        &self,
        mut iova: u64,
        len: u64,
        access: Access,
    ) -> (Vec<Segment>, Option<TranslateError>) {
        let mut out = Vec::new();
        if len > 0 && iova.checked_add(len - 1).is_none() {
            return (out, Some(TranslateError::NotMapped));
        }
        let mut left = u128::from(len);
        while left > 0 {
            let Some(m) = self.find(iova) else {
                return (out, Some(TranslateError::Miss { iova, access }));
            };
            if m.perm & access_bits(access) == 0 {
                return (out, Some(TranslateError::Denied { iova, access }));
            }
            let room = u128::from(m.last - iova) + 1;
            let n = left.min(room);
            out.push(Segment {
                gpa: iova,
                uaddr: m.uaddr + (iova - m.start),
                len: n as u64,
            });
            left -= n;
            iova = iova.wrapping_add(n as u64);
        }
        (out, None)
    }
}

/// The table's pieces for a translation, as the model returns them.
pub(crate) fn pieces<S: std::ops::DerefMut<Target = [Mapping]>>(
    table: &Iotlb<S>,
    iova: u64,
    len: u64,
    access: Access,
) -> (Vec<Segment>, Option<TranslateError>) {
    let mut out = Vec::new();
    let err = table
        .for_each_piece(iova, len, access, |p| {
            out.push(p);
            Ok(())
        })
        .err();
    (out, err)
}

/// Checks that the table holds what the model holds, and translates as it
/// does at `probes`.
pub(crate) fn agree<S: std::ops::DerefMut<Target = [Mapping]>>(
    table: &Iotlb<S>,
    model: &Model,
    probes: &[(u64, u64)],
) {
    assert_eq!(table.len(), model.maps.len());
    let mut ours: Vec<ModelMap> = table
        .mappings()
        .iter()
        .map(|m| ModelMap {
            start: m.start(),
            last: m.last(),
            uaddr: m.uaddr(),
            perm: m.perm(),
        })
        .collect();
    let mut theirs = model.maps.clone();
    let key = |m: &ModelMap| (m.start, m.last, m.uaddr, m.perm);
    ours.sort_by_key(key);
    theirs.sort_by_key(key);
    assert_eq!(ours, theirs);
    for w in table.mappings().windows(2) {
        assert!(
            w[0].start() <= w[1].start(),
            "unsorted: {:x?}",
            table.mappings()
        );
    }
    for &(iova, len) in probes {
        for access in [Access::Read, Access::Write] {
            assert_eq!(
                pieces(table, iova, len, access),
                model.translate(iova, len, access),
                "iova {iova:#x} len {len:#x}"
            );
        }
        let found = table.find(iova).map(|m| ModelMap {
            start: m.start(),
            last: m.last(),
            uaddr: m.uaddr(),
            perm: m.perm(),
        });
        assert_eq!(found, model.find(iova), "find {iova:#x}");
    }
}
