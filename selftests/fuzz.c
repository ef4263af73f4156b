// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz: hostile userspace and hostile guests against the real module.
 *
 * ioctl_sequences: threads issue random vhost ioctls with random and
 *   boundary arguments (bad pointers, huge counts, wrong fds), and random
 *   device IOTLB messages through write() and read() (the fd is
 *   O_NONBLOCK, so a read waits for nothing), while one of them closes and
 *   reopens the device at random. Every error must be a known errno;
 *   nothing may crash or hang.
 * random_rings: a guest that writes random descriptor tables, avail rings
 *   and indices (and keeps rewriting them while the worker reads), with
 *   packets arriving for RX. Afterwards a reset ring must carry clean
 *   traffic again.
 *
 * VNR_FUZZ_SEQS (default 10000) and VNR_FUZZ_RINGS (default 1000000) set the
 * sizes; VNR_FUZZ_SEED fixes the seed (printed either way, to reproduce).
 */
#include "harness.h"
#include <pthread.h>
#include "kselftest_harness.h"

/* TCG, and more so the debug kernel, are slow: the harness's 30 s per test
 * would kill honest runs. A hung test still fails, just later. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

static uint64_t seed0;

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64* */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

static uint64_t env_u64(const char *k, uint64_t def)
{
	const char *v = getenv(k);

	return v ? strtoull(v, NULL, 0) : def;
}

static uint64_t pick_u64(uint64_t *s)
{
	static const uint64_t edge[] = { 0, 1, 2, 3, 8, 255, 256, 4095, 4096, 32768, 65535, 65536,
					 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ULL,
					 0x7ffffffff000ULL, 0xffff888000000000ULL, ~0ULL };

	switch (rnd(s) % 3) {
	case 0: return edge[rnd(s) % (sizeof(edge) / sizeof(edge[0]))];
	case 1: return rnd(s) % 70000;
	default: return rnd(s);
	}
}

static const int known_errno[] = { EPERM, EBADF, EFAULT, EINVAL, EBUSY, ENOBUFS, EOPNOTSUPP,
				   ENOTTY, E2BIG, ENOTSOCK, ENOMEM, ENOSPC, EAGAIN, EBADFD };

static bool clean_errno(int e)
{
	size_t i;

	for (i = 0; i < sizeof(known_errno) / sizeof(known_errno[0]); i++)
		if (e == known_errno[i])
			return true;
	return false;
}

struct fz {
	int tap, efd, pfd[2];
	uint8_t *mem, *unmapped;
	uint64_t seqs, calls, errors, unclean;
	int last_unclean_cmd, last_unclean_errno;
	uint64_t seed;
};

static const unsigned long cmds[] = {
	VHOST_GET_FEATURES, VHOST_SET_FEATURES, VHOST_SET_OWNER, VHOST_RESET_OWNER,
	VHOST_SET_MEM_TABLE, VHOST_SET_LOG_BASE, VHOST_SET_LOG_FD, VHOST_SET_VRING_NUM,
	VHOST_SET_VRING_ADDR, VHOST_SET_VRING_BASE, VHOST_GET_VRING_BASE, VHOST_SET_VRING_KICK,
	VHOST_SET_VRING_CALL, VHOST_SET_VRING_ERR, VHOST_SET_VRING_BUSYLOOP_TIMEOUT,
	VHOST_GET_VRING_BUSYLOOP_TIMEOUT, VHOST_SET_BACKEND_FEATURES, VHOST_GET_BACKEND_FEATURES,
	VHOST_NET_SET_BACKEND, VHOST_GET_FEATURES_ARRAY, VHOST_SET_FEATURES_ARRAY,
	VHOST_SET_FORK_FROM_OWNER, VHOST_GET_FORK_FROM_OWNER, VHOST_SET_VRING_ENDIAN,
	VHOST_NEW_WORKER, _IO(VHOST_VIRTIO, 0x77), 0x5401,
};

static int pick_fd(struct fz *f, uint64_t *s)
{
	switch (rnd(s) % 8) {
	case 0: return -1;
	case 1: return f->efd;
	case 2: return f->tap;
	case 3: return f->pfd[0];
	case 4: return 1000 + rnd(s) % 10;	/* not open */
	case 5: return (int)pick_u64(s);
	case 6: return 0;
	default: return f->efd;
	}
}

/* One random ioctl on fd; returns -errno or 0. */
static int one_ioctl(struct fz *f, int fd, uint64_t *s)
{
	union {
		uint8_t raw[4096];
		struct vhost_vring_state st;
		struct vhost_vring_file fl;
		struct vhost_vring_addr ad;
		struct { struct vhost_memory h; struct vhost_memory_region r[100]; } m;
		uint64_t u[16];
	} a;
	unsigned long cmd = cmds[rnd(s) % (sizeof(cmds) / sizeof(cmds[0]))];
	void *arg = &a;
	unsigned int i;

	for (i = 0; i < sizeof(a.raw) / 8; i++)
		((uint64_t *)a.raw)[i] = rnd(s) % 4 ? pick_u64(s) : 0;
	/* Mostly plausible arguments, so the deeper paths are reached. */
	switch (cmd) {
	case VHOST_SET_VRING_NUM: case VHOST_SET_VRING_BASE: case VHOST_GET_VRING_BASE:
	case VHOST_SET_VRING_BUSYLOOP_TIMEOUT: case VHOST_GET_VRING_BUSYLOOP_TIMEOUT:
		a.st.index = rnd(s) % 4 ? rnd(s) % 2 : (uint32_t)pick_u64(s);
		if (rnd(s) % 2)
			a.st.num = 1u << (rnd(s) % 17);
		break;
	case VHOST_SET_VRING_KICK: case VHOST_SET_VRING_CALL: case VHOST_SET_VRING_ERR:
	case VHOST_NET_SET_BACKEND:
		a.fl.index = rnd(s) % 4 ? rnd(s) % 2 : (uint32_t)pick_u64(s);
		a.fl.fd = pick_fd(f, s);
		break;
	case VHOST_SET_VRING_ADDR:
		a.ad.index = rnd(s) % 2;
		if (rnd(s) % 2) {
			a.ad.flags = 0;
			a.ad.desc_user_addr = (uint64_t)(uintptr_t)(f->mem + (rnd(s) % 64) * 4096);
			a.ad.avail_user_addr = a.ad.desc_user_addr + 2048;
			a.ad.used_user_addr = a.ad.desc_user_addr + 4096 * (1 + rnd(s) % 4);
		}
		break;
	case VHOST_SET_MEM_TABLE:
		a.m.h.nregions = rnd(s) % 4 ? rnd(s) % 4 : (uint32_t)pick_u64(s);
		a.m.h.padding = rnd(s) % 8 ? 0 : 1;
		for (i = 0; i < 4 && rnd(s) % 2; i++)
			a.m.r[i] = (struct vhost_memory_region){ i * 0x100000ULL, 0x100000,
				(uint64_t)(uintptr_t)f->mem + i * 0x100000ULL, 0 };
		break;
	case VHOST_SET_FEATURES:
		a.u[0] = rnd(s) % 2 ? (1ULL << 32 | 1ULL << 15 | 1ULL << 29 | 1ULL << 28) : pick_u64(s);
		/* Now and then behind a virtual IOMMU (ACCESS_PLATFORM). */
		if (rnd(s) % 4 == 0)
			a.u[0] |= 1ULL << 33;
		break;
	case VHOST_GET_FEATURES_ARRAY: case VHOST_SET_FEATURES_ARRAY:
		a.u[0] = rnd(s) % 4 ? rnd(s) % 8 : pick_u64(s);
		break;
	}
	switch (rnd(s) % 16) {
	case 0: arg = NULL; break;
	case 1: arg = (void *)(uintptr_t)0xffff888000000000ULL; break;
	case 2: arg = f->unmapped; break;
	case 3: arg = (uint8_t *)f->unmapped - 4; break;	/* straddles a hole */
	}
	/* A GET with a huge count makes the kernel write that many words:
	 * aim it at the guard page, never at our stack. */
	if (cmd == VHOST_GET_FEATURES_ARRAY && arg == (void *)&a && a.u[0] > 400) {
		arg = (uint8_t *)f->unmapped - 64;
		memcpy(arg, &a, 8);
	}
	if (arg == (uint8_t *)f->unmapped - 4)
		memcpy(arg, &a, 4);
	f->calls++;
	if (ioctl(fd, cmd, arg) == 0)
		return 0;
	f->errors++;
	if (errno != EBADF && !clean_errno(errno)) {
		f->unclean++;
		f->last_unclean_cmd = (int)cmd;
		f->last_unclean_errno = errno;
	}
	return -errno;
}

/* One random device IOTLB message written to fd, or a read of one: in
 * either format, of any type, with plausible or boundary fields, whole or
 * cut short. */
static void one_message(struct fz *f, int fd, uint64_t *s)
{
	struct vhost_msg_v2 m;
	uint8_t buf[128];
	size_t len;
	ssize_t r;

	memset(&m, 0, sizeof(m));
	m.type = rnd(s) % 4 ? (rnd(s) % 2 ? VHOST_IOTLB_MSG_V2 : VHOST_IOTLB_MSG) : (uint32_t)pick_u64(s);
	m.iotlb.iova = rnd(s) % 2 ? (rnd(s) % 64) * 4096 : pick_u64(s);
	m.iotlb.size = rnd(s) % 2 ? 4096 * (1 + rnd(s) % 4) : pick_u64(s);
	m.iotlb.uaddr = rnd(s) % 2 ? (uint64_t)(uintptr_t)(f->mem + (rnd(s) % 64) * 4096) : pick_u64(s);
	m.iotlb.perm = rnd(s) % 4;
	m.iotlb.type = 1 + rnd(s) % 7;
	len = rnd(s) % 4 ? sizeof(m) : rnd(s) % 80;
	f->calls++;
	if (rnd(s) % 4)
		r = write(fd, &m, len);
	else
		r = read(fd, buf, rnd(s) % 2 ? sizeof(buf) : rnd(s) % 80);
	if (r >= 0)
		return;
	f->errors++;
	if (!clean_errno(errno)) {
		f->unclean++;
		f->last_unclean_cmd = -1;
		f->last_unclean_errno = errno;
	}
}

static void *ioctl_thread(void *arg)
{
	struct fz *f = arg;
	uint64_t n = env_u64("VNR_FUZZ_SEQS", 10000) / 4, k;
	uint64_t s = f->seed;

	for (k = 0; k < n; k++) {
		const char *dev = h_dev_path();
		int fd = open(dev, O_RDWR), i, len = 1 + rnd(&s) % 40;

		if (fd < 0)
			continue;
		fcntl(fd, F_SETFL, O_NONBLOCK);
		if (rnd(&s) % 4)
			ioctl(fd, VHOST_SET_OWNER);
		for (i = 0; i < len; i++) {
			if (rnd(&s) % 8 == 0)
				one_message(f, fd, &s);
			else
				one_ioctl(f, fd, &s);
		}
		close(fd);
		f->seqs++;
	}
	return NULL;
}

TEST(ioctl_sequences)
{
	struct fz f[4];
	pthread_t t[4];
	uint8_t *mem;
	uint64_t seqs = 0, calls = 0, unclean = 0;
	int i, tap;
	struct h_dev d = { 0 };

	mem = mmap(NULL, 80 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	/* A guard page right after a readable one, for straddling args. */
	ASSERT_EQ(0, munmap(mem + (70 << 20), 4096));
	d.hdr_len = 12;
	ASSERT_EQ(0, h_tap_open(&d, true, -1));
	tap = d.tap;
	TH_LOG("seed %llu (VNR_FUZZ_SEED=%llu reproduces)", (unsigned long long)seed0,
	       (unsigned long long)seed0);
	for (i = 0; i < 4; i++) {
		memset(&f[i], 0, sizeof(f[i]));
		f[i].tap = tap;
		f[i].efd = eventfd(0, EFD_NONBLOCK);
		ASSERT_EQ(0, pipe(f[i].pfd));
		f[i].mem = mem;
		f[i].unmapped = mem + (70 << 20);
		f[i].seed = seed0 * 4 + i + 1;
		ASSERT_EQ(0, pthread_create(&t[i], NULL, ioctl_thread, &f[i]));
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		seqs += f[i].seqs;
		calls += f[i].calls;
		unclean += f[i].unclean;
		if (f[i].unclean)
			TH_LOG("thread %d: cmd %#x gave errno %d", i, f[i].last_unclean_cmd,
			       f[i].last_unclean_errno);
		close(f[i].efd);
		close(f[i].pfd[0]);
		close(f[i].pfd[1]);
	}
	TH_LOG("%llu sequences, %llu ioctls, %llu unclean errors", (unsigned long long)seqs,
	       (unsigned long long)calls, (unsigned long long)unclean);
	EXPECT_EQ(env_u64("VNR_FUZZ_SEQS", 10000) / 4 * 4, seqs);
	EXPECT_EQ(0, unclean);
	close(tap);
	munmap(mem, 80 << 20);
}

/* Resets a queue after the guest broke it: detach, rebase, reattach. */
static int reset_queue(struct h_dev *d, int q)
{
	struct vhost_vring_file b = { .index = q, .fd = -1 };
	struct vhost_vring_state s = { .index = q };
	struct h_vq *v = &d->vq[q];
	int r;

	if ((r = h_ioctl(d->fd, VHOST_NET_SET_BACKEND, &b)))
		return r;
	if ((r = h_ioctl(d->fd, VHOST_GET_VRING_BASE, &s)))
		return r;
	memset(v->vr.desc, 0, 16 * v->num);
	v->vr.used->idx = (uint16_t)s.num;
	v->vr.avail->idx = (uint16_t)s.num;
	v->avail_idx = v->used_seen = (uint16_t)s.num;
	if ((r = h_ioctl(d->fd, VHOST_SET_VRING_BASE, &s)))
		return r;
	b.fd = d->tap;
	return h_ioctl(d->fd, VHOST_NET_SET_BACKEND, &b);
}

TEST(random_rings)
{
	struct h_dev d;
	struct h_opts o = { .num = 8, .event_idx = true, .indirect = true, .mrg_rxbuf = true,
			    .version_1 = true, .tap_offload = -1 };
	uint64_t n = env_u64("VNR_FUZZ_RINGS", 1000000), k, s = seed0 | 1, errs = 0;
	uint8_t frame[256], buf[2048];
	int q, i;

	TH_LOG("seed %llu, %llu ring states", (unsigned long long)seed0, (unsigned long long)n);
	ASSERT_EQ(0, h_setup(&d, &o));
	for (k = 0; k < n; k++) {
		q = rnd(&s) % 2;
		struct h_vq *v = &d.vq[q];

		/* Scribble over the descriptor table, an indirect table and
		 * the avail ring, then move avail->idx by 0..num+2. */
		for (i = 0; i < 3; i++) {
			struct vring_desc *t = (rnd(&s) % 4) ? v->vr.desc : h_ptr(&d, h_buf(&d, q, 3));
			unsigned int j = rnd(&s) % 8;
			uint64_t a = rnd(&s) % 3 ? h_buf(&d, q, rnd(&s) % 8) + rnd(&s) % 64 : pick_u64(&s);
			uint32_t len = rnd(&s) % 3 ? rnd(&s) % 2048 : (uint32_t)pick_u64(&s);

			t[j] = (struct vring_desc){ a, len, (uint16_t)(rnd(&s) % 8), (uint16_t)(rnd(&s) % 11) };
		}
		v->vr.avail->ring[rnd(&s) % 8] = rnd(&s) % 4 ? rnd(&s) % 8 : (uint16_t)pick_u64(&s);
		v->vr.avail->idx += rnd(&s) % 11;
		if (rnd(&s) % 2)
			v->vr.used->flags = rnd(&s);
		h_kick(&d, q);
		if (q == 0 && rnd(&s) % 4 == 0) {
			h_frame(frame, k, 60 + rnd(&s) % 190);
			send(d.pkt, frame, 60 + rnd(&s) % 190, MSG_DONTWAIT);
		}
		/* Every so often, or when the ring was declared broken, start
		 * over from a clean ring, as a rebooting guest would. */
		if (h_fired(v->err, 0) || k % 64 == 63) {
			errs++;
			ASSERT_EQ(0, reset_queue(&d, q));
		}
		while (recv(d.pkt, buf, sizeof(buf), MSG_DONTWAIT) > 0)
			;
	}
	TH_LOG("%llu ring states, %llu resets", (unsigned long long)n, (unsigned long long)errs);
	/* The device must still carry clean traffic after all of that. */
	ASSERT_EQ(0, reset_queue(&d, 1));
	while (recv(d.pkt, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	{
		uint8_t *p = h_ptr(&d, h_buf(&d, 1, 0));
		ssize_t m;
		struct pollfd pf = { .fd = d.pkt, .events = POLLIN };

		memset(p, 0, d.hdr_len);
		h_frame(p + d.hdr_len, 424242, 100);
		d.vq[1].vr.desc[d.vq[1].avail_idx % 8] = (struct vring_desc){ h_buf(&d, 1, 0), d.hdr_len + 100, 0, 0 };
		h_publish(&d, 1, d.vq[1].avail_idx % 8);
		h_kick(&d, 1);
		ASSERT_EQ(1, poll(&pf, 1, 5000));
		m = recv(d.pkt, buf, sizeof(buf), 0);
		EXPECT_EQ(424242, h_check_frame(buf, m, 100));
	}
	h_teardown(&d);
}

int main(int argc, char **argv)
{
	seed0 = env_u64("VNR_FUZZ_SEED", (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
	printf("# fuzz seed %llu\n", (unsigned long long)seed0);
	return test_harness_run(argc, argv);
}
