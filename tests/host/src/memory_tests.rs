use crate::memory::*;

const LIMIT: u64 = 1 << 47;

fn r(gpa: u64, size: u64, uaddr: u64) -> Region {
    Region::new(gpa, size, uaddr, LIMIT).unwrap()
}

#[test]
fn region_rejects_zero_wrap_unaligned_and_kernel_addresses() {
    assert_eq!(Region::new(0, 0, 0x1000, LIMIT), Err(MemError::BadSize));
    assert_eq!(Region::new(u64::MAX - 0xfff, 0x2000, 0x1000, LIMIT), Err(MemError::BadSize));
    assert_eq!(Region::new(0, 0x2000, u64::MAX - 0xfff, LIMIT), Err(MemError::BadSize));
    assert_eq!(Region::new(0x10, 0x1000, 0x1000, LIMIT), Err(MemError::Unaligned));
    assert_eq!(Region::new(0, 0x1001, 0x1000, LIMIT), Err(MemError::Unaligned));
    assert_eq!(Region::new(0, 0x1000, 0x1008, LIMIT), Err(MemError::Unaligned));
    assert_eq!(Region::new(0, 0x2000, LIMIT - 0x1000, LIMIT), Err(MemError::BadUserAddr));
    assert!(Region::new(0, 0x1000, LIMIT - 0x1000, LIMIT).is_ok());
}

#[test]
fn validate_sorts_and_rejects_overlap_and_too_many() {
    let mut v = vec![r(0x10000, 0x1000, 0x5000), r(0, 0x1000, 0x9000)];
    validate(&mut v, 64).unwrap();
    assert_eq!(v[0].gpa, 0);
    let mut v = vec![r(0, 0x2000, 0), r(0x1000, 0x1000, 0x10000)];
    assert_eq!(validate(&mut v, 64), Err(MemError::Overlap));
    // Adjacent is fine.
    let mut v = vec![r(0, 0x1000, 0), r(0x1000, 0x1000, 0x10000)];
    validate(&mut v, 64).unwrap();
    let mut v = vec![r(0, 0x1000, 0), r(0x1000, 0x1000, 0x10000)];
    assert_eq!(validate(&mut v, 1), Err(MemError::TooMany));
}

fn segs(t: &[Region], gpa: u64, len: u64) -> Result<Vec<Segment>, MemError> {
    let mut out = Vec::new();
    translate(t, gpa, len, |s| {
        out.push(s);
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn translate_splits_across_regions_and_refuses_holes() {
    let mut t = vec![r(0, 0x1000, 0x100000), r(0x1000, 0x1000, 0x900000), r(0x3000, 0x1000, 0x500000)];
    validate(&mut t, 64).unwrap();
    assert_eq!(segs(&t, 0x10, 0x20).unwrap(), vec![Segment { uaddr: 0x100010, len: 0x20 }]);
    // Crosses from region 0 into region 1: two segments, each bounded.
    assert_eq!(
        segs(&t, 0xff0, 0x20).unwrap(),
        vec![Segment { uaddr: 0x100ff0, len: 0x10 }, Segment { uaddr: 0x900000, len: 0x10 }]
    );
    // Runs into the hole at 0x2000: refused, and the callback never ran.
    let mut called = false;
    assert_eq!(
        translate(&t, 0x1ff0, 0x20, |_| {
            called = true;
            Ok(())
        }),
        Err(MemError::NotMapped)
    );
    assert!(!called);
    assert_eq!(segs(&t, 0x4000, 1), Err(MemError::NotMapped));
    assert_eq!(segs(&t, u64::MAX, 2), Err(MemError::NotMapped));
    assert_eq!(segs(&t, 0x3000, 0).unwrap(), vec![]);
    assert_eq!(segs(&[], 0, 1), Err(MemError::NotMapped));
}
