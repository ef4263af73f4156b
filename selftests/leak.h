/* SPDX-License-Identifier: GPL-2.0 */
/*
 * leak.h: whether N device lifetimes leak kernel memory (lifecycle.c,
 * teardown.c). Include after harness.h and kselftest_harness.h.
 *
 * Slab usage (active objects times object size over /proc/slabinfo) and
 * VmallocUsed are sampled before and after the cycles. Per-CPU caches make
 * the slab figure noisy: growth over the limit is measured again after
 * twice as many more cycles, since a real leak grows with the cycle count
 * and noise does not, and the caches that grew most are logged (see
 * h_leak_check). The vmap areas of the workers' freed stacks, which the
 * kernel frees lazily, are left out and vmalloc'd memory is checked
 * instead (see h_leak_lazy_cache).
 */
#ifndef VNR_LEAK_H
#define VNR_LEAK_H

/* Cycles per reading; a leak is judged per H_LEAK_CYCLES cycles. */
#define H_LEAK_CYCLES 1000
/* A leak of even one 64-byte object per cycle is 64 KB over H_LEAK_CYCLES
 * cycles. */
#define H_LEAK_SLAB_LIMIT (48 * 1024LL)
/* A leak of one vmalloc'd page per cycle is 4000 kB over H_LEAK_CYCLES
 * cycles; the per-CPU caches of thread stacks (two a CPU, NR_CACHED_STACKS
 * in kernel/fork.c) are full after the warm-up. */
#define H_LEAK_VMALLOC_LIMIT_KB 1024LL

/*
 * Left out of the slab figure. Each worker (the vhost_task SET_OWNER
 * starts, in C's vhost as here) is a thread with a vmalloc'd stack. A stack
 * freed at the thread's exit that the per-CPU cache has no room for goes
 * to vfree(), which frees its pages at once but keeps its address range,
 * and the range's struct vmap_area, on a lazy list until lazy_max_pages()
 * of address space waits there (free_vmap_area_noflush() in mm/vmalloc.c):
 * this cache grows with the cycles until then and drops at once when the
 * list is purged, by the same amount on either driver. A vmalloc leak
 * shows in VmallocUsed (NR_VMALLOC, counted down as vfree() frees the
 * pages), which is checked instead.
 */
static const char h_leak_lazy_cache[] = "vmap_area";

static struct h_slabs h_leak_s0, h_leak_s1, h_leak_s3;

/* Bytes in active slab objects in `s`, but the lazily freed vmap areas. */
static long long h_leak_counted_bytes(const struct h_slabs *s)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->c[i].name, h_leak_lazy_cache))
			return h_slabs_bytes(s) - s->c[i].active * s->c[i].size;
	return h_slabs_bytes(s);
}

/* VmallocUsed, in kB. */
static long long h_leak_vmalloc_kb(void)
{
	static const char *const keys[] = { "VmallocUsed:", NULL };

	return h_meminfo_kb(keys);
}

/* One reading: the slab caches in `s` and VmallocUsed in `*vm`. 0, or
 * -errno. */
static int h_leak_reading(struct h_slabs *s, long long *vm)
{
	int ret = h_slabs_read(s);

	*vm = h_leak_vmalloc_kb();
	if (!ret && *vm < 0)
		ret = -ENOENT;
	return ret;
}

/* Settles and reads into `s` and `*vm` until their growth from h_leak_s0
 * and `vm0` (stored in `*slab` and `*vmalloc`) is within `slab_limit` and
 * `vm_limit`, five times at most, a second apart: workers' task structs
 * and stacks and the files' RCU-deferred frees come back asynchronously, a
 * leak stays. 0, or -errno. */
static int h_leak_settled(struct h_slabs *s, long long *vm, long long vm0,
			  long long slab_limit, long long vm_limit, long long *slab,
			  long long *vmalloc)
{
	for (int again = 0; again < 5; again++) {
		int ret;

		if (again)
			sleep(1);
		h_settle();
		ret = h_leak_reading(s, vm);
		if (ret)
			return ret;
		*slab = h_leak_counted_bytes(s) - h_leak_counted_bytes(&h_leak_s0);
		*vmalloc = *vm - vm0;
		if (*slab <= slab_limit && *vmalloc <= vm_limit)
			break;
	}
	return 0;
}

/* The `top` caches that grew most in bytes from h_leak_s0 to h_leak_s3,
 * each as "name +OBJS/+OBJS xSIZE": its objects' growth after H_LEAK_CYCLES
 * cycles (h_leak_s1) and after 3 * H_LEAK_CYCLES (h_leak_s3). A leaking
 * cache grows by a multiple of the cycles, and three times as much in the
 * second figure. */
static void h_leak_top_growth(char *buf, size_t len, int top)
{
	bool taken[H_SLAB_CACHES] = { false };
	size_t used = 0;

	buf[0] = 0;
	for (int t = 0; t < top; t++) {
		long long best = 0, grown, was;
		const char *name;
		int pick = -1;

		for (int i = 0; i < h_leak_s3.n; i++) {
			const struct h_slab_cache *c = &h_leak_s3.c[i];

			grown = (c->active - h_slabs_active(&h_leak_s0, c->name)) * c->size;
			if (!taken[i] && grown > best) {
				best = grown;
				pick = i;
			}
		}
		if (pick < 0 || used >= len)
			break;
		taken[pick] = true;
		name = h_leak_s3.c[pick].name;
		was = h_slabs_active(&h_leak_s0, name);
		used += snprintf(buf + used, len - used, "%s%s %+lld/%+lld x%lld", t ? ", " : "",
				 name, h_slabs_active(&h_leak_s1, name) - was,
				 h_leak_s3.c[pick].active - was, h_leak_s3.c[pick].size);
	}
}

/*
 * Memory growth over H_LEAK_CYCLES cycles, judged leak or noise: slab bytes
 * (but h_leak_lazy_cache) and VmallocUsed. Growth within H_LEAK_SLAB_LIMIT
 * and H_LEAK_VMALLOC_LIMIT_KB passes. Above either, 2 * H_LEAK_CYCLES more cycles
 * tell: a leak grows with the cycles, by more than twice its limit again,
 * while noise (objects parked in per-CPU sheaves and partial slabs, frees
 * deferred past the settle) does not. The caches that grew most are logged
 * with both readings. Up to three attempts; the test fails only if every one
 * looks like a leak.
 */
/* `cycle(arg, n)` runs n lifetimes and returns 0, or -errno (logged). */
static inline void h_leak_check(struct __test_metadata *_metadata,
				int (*cycle)(void *arg, int n), void *arg)
{
	long long vm0, vm1, vm3, g1, g3, v1, v3;
	bool leak = false;
	char top[512];
	int attempt;

	ASSERT_EQ(0, cycle(arg, 200));	/* warm up caches */
	for (attempt = 0; attempt < 3; attempt++) {
		h_settle();
		ASSERT_EQ(0, h_leak_reading(&h_leak_s0, &vm0))
			TH_LOG("cannot read /proc/slabinfo or /proc/meminfo");
		ASSERT_EQ(0, cycle(arg, H_LEAK_CYCLES));
		ASSERT_EQ(0, h_leak_settled(&h_leak_s1, &vm1, vm0, H_LEAK_SLAB_LIMIT,
					     H_LEAK_VMALLOC_LIMIT_KB, &g1, &v1));
		if (g1 <= H_LEAK_SLAB_LIMIT && v1 <= H_LEAK_VMALLOC_LIMIT_KB) {
			TH_LOG("attempt %d: slab %lld -> %lld bytes (%+lld), vmalloc %+lld kB over %d cycles (%s %+lld objects, left out)",
			       attempt, h_leak_counted_bytes(&h_leak_s0),
			       h_leak_counted_bytes(&h_leak_s1), g1, v1, H_LEAK_CYCLES,
			       h_leak_lazy_cache,
			       h_slabs_active(&h_leak_s1, h_leak_lazy_cache) -
			       h_slabs_active(&h_leak_s0, h_leak_lazy_cache));
			leak = false;
			break;
		}
		ASSERT_EQ(0, cycle(arg, 2 * H_LEAK_CYCLES));
		ASSERT_EQ(0, h_leak_settled(&h_leak_s3, &vm3, vm0, g1 + 2 * H_LEAK_SLAB_LIMIT,
					     v1 + 2 * H_LEAK_VMALLOC_LIMIT_KB, &g3, &v3));
		leak = g3 - g1 > 2 * H_LEAK_SLAB_LIMIT || v3 - v1 > 2 * H_LEAK_VMALLOC_LIMIT_KB;
		h_leak_top_growth(top, sizeof(top), 5);
		TH_LOG("attempt %d: slab %lld bytes, %+lld after %d cycles, %+lld after %d; vmalloc %+lld kB, %+lld kB (%s); grew most (objects after %d/%d cycles x size; %s left out): %s",
		       attempt, h_leak_counted_bytes(&h_leak_s0), g1, H_LEAK_CYCLES, g3,
		       3 * H_LEAK_CYCLES, v1, v3, leak ? "grows with the cycles" : "noise",
		       H_LEAK_CYCLES, 3 * H_LEAK_CYCLES, h_leak_lazy_cache, top);
		if (!leak)
			break;
	}
	EXPECT_FALSE(leak)
		TH_LOG("grew by more than %lld slab bytes or %lld vmalloc kB per %d cycles in every attempt",
		       H_LEAK_SLAB_LIMIT, H_LEAK_VMALLOC_LIMIT_KB, H_LEAK_CYCLES);
}

#endif /* VNR_LEAK_H */
