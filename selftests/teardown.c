// SPDX-License-Identifier: GPL-2.0
/*
 * teardown: the device taken apart while traffic flows both ways.
 *
 * A flood thread keeps the TX ring full of frames (which the tap hands to
 * the host stack, which drops them) and injects frames into the tap for the
 * RX ring, reposting buffers as they fill. While it runs, the test closes
 * the device, resets its owner, or swaps its backend. Afterwards the module
 * must hold no reference (its refcnt is 0 once every fd is closed) and the
 * device or its successor must carry clean traffic. The in-VM runner checks
 * the kernel log, and kmemleak on the debug kernel.
 *
 * A last case runs 1000 open, configure, traffic, close cycles on one guest
 * memory and tap, as 1000 QEMU runs would, and compares slab usage.
 */
#include "harness.h"
#include "kselftest_harness.h"
#include <pthread.h>

#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

#define WAIT_MS 10000

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1,
};

/* Keeps the RX ring stocked with buffers, never past its size, and kicks. */
static void rx_refill(struct h_dev *d)
{
	struct h_vq *v = &d->vq[0];

	while ((uint16_t)(v->avail_idx - v->used_seen) < v->num) {
		uint16_t head = v->avail_idx % v->num;

		v->vr.desc[head] = (struct vring_desc){ h_buf(d, 0, head), v->buf_size,
							VRING_DESC_F_WRITE, 0 };
		h_publish(d, 0, head);
	}
	h_kick(d, 0);
}

struct flood {
	struct h_dev *d;
	volatile int stop;
	uint64_t rounds;
	pthread_t thr;
};

/* TX frames are all zeroes (no ethertype the packet socket listens to), RX
 * frames are test frames sent through the packet socket. */
static void *flood_fn(void *arg)
{
	struct flood *fl = arg;
	struct h_dev *d = fl->d;
	uint8_t frame[128];
	int i;

	h_frame(frame, 0, sizeof(frame));
	while (!fl->stop) {
		struct h_vq *tx = &d->vq[1];

		while (h_used_pending(d, 1))
			h_take_used(d, 1);
		while ((uint16_t)(tx->avail_idx - tx->used_seen) < tx->num) {
			uint16_t head = tx->avail_idx % tx->num;

			tx->vr.desc[head] = (struct vring_desc){ h_buf(d, 1, head), d->hdr_len + 60, 0, 0 };
			h_publish(d, 1, head);
		}
		while (h_used_pending(d, 0))
			h_take_used(d, 0);
		rx_refill(d);
		h_kick(d, 1);
		for (i = 0; i < 16; i++)
			send(d->pkt, frame, sizeof(frame), MSG_DONTWAIT);
		fl->rounds++;
		usleep(100);
	}
	return NULL;
}

static void flood_start(struct flood *fl, struct h_dev *d)
{
	memset(fl, 0, sizeof(*fl));
	fl->d = d;
	pthread_create(&fl->thr, NULL, flood_fn, fl);
}

static uint64_t flood_stop(struct flood *fl)
{
	fl->stop = 1;
	pthread_join(fl->thr, NULL);
	return fl->rounds;
}

/* The module's reference count, or -1 if it cannot be read (the C driver,
 * or a module built in). */
static int module_refcnt(void)
{
	const char *dev = getenv("VNR_DEV");
	char path[96];
	FILE *f;
	int n = -1;

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt",
		 dev && strstr(dev, "/dev/vhost-net") && !strstr(dev, "-rs") ? "vhost_net" : "vhost_net_rs");
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &n) != 1)
		n = -1;
	fclose(f);
	return n;
}

/* One guest TX frame, checked on the packet socket `pkt`. */
static int tx_one(struct h_dev *d, int pkt, uint32_t seq)
{
	struct h_vq *v = &d->vq[1];
	uint16_t head = v->avail_idx % v->num;
	uint64_t buf = h_buf(d, 1, head);
	struct pollfd p = { .fd = pkt, .events = POLLIN };
	uint8_t got[2048];
	ssize_t n;

	memset(h_ptr(d, buf), 0, d->hdr_len);
	h_frame((uint8_t *)h_ptr(d, buf) + d->hdr_len, seq, 200);
	v->vr.desc[head] = (struct vring_desc){ buf, d->hdr_len + 200, 0, 0 };
	h_publish(d, 1, head);
	h_kick(d, 1);
	for (;;) {
		if (poll(&p, 1, WAIT_MS) != 1)
			return -ETIMEDOUT;
		n = recv(pkt, got, sizeof(got), 0);
		if (n < 0)
			return -errno;
		/* Frames of an earlier flood may still be queued: skip them. */
		if (h_check_frame(got, n, 200) == seq)
			break;
	}
	return h_wait_used(d, 1, (uint16_t)(v->avail_idx - v->used_seen), WAIT_MS);
}

/* One guest RX frame, sent through the packet socket and found in the ring.
 * Frames an earlier flood left queued in the tap (up to its queue length,
 * 1000) are drained first if asked: with the queue full, the tap would
 * drop ours. */
static int rx_one(struct h_dev *d, uint32_t seq, bool drain)
{
	uint8_t frame[200];
	unsigned int n;

	for (n = 0; drain && n < 100000; n++) {
		rx_refill(d);
		if (h_wait_used(d, 0, 1, 300))
			break;
		h_take_used(d, 0);
	}
	h_frame(frame, seq, sizeof(frame));
	if (send(d->pkt, frame, sizeof(frame), 0) != sizeof(frame))
		return -errno;
	for (n = 0; n < 64; n++) {
		struct vring_used_elem e;

		rx_refill(d);
		if (h_wait_used(d, 0, 1, WAIT_MS))
			return -ETIMEDOUT;
		e = h_take_used(d, 0);
		if (e.id >= d->vq[0].num || e.len < d->hdr_len)
			return -EINVAL;
		if (h_check_frame((uint8_t *)h_ptr(d, h_buf(d, 0, e.id)) + d->hdr_len,
				  e.len - d->hdr_len, sizeof(frame)) == seq)
			return 0;
	}
	return -EBADMSG;
}

/* Closing the device while both rings are busy joins the workers and drops
 * every reference, ten times over. */
TEST(close_mid_flood)
{
	int i, r0 = module_refcnt();

	for (i = 0; i < 10; i++) {
		struct h_dev d;
		struct h_opts o = opts;
		struct flood fl;

		ASSERT_EQ(0, h_setup(&d, &o));
		flood_start(&fl, &d);
		usleep(200 * 1000);
		/* Only the device: the flood thread still writes the eventfds. */
		ASSERT_EQ(0, close(d.fd));
		d.fd = -1;
		usleep(50 * 1000);
		EXPECT_LT(0, flood_stop(&fl));
		h_teardown(&d);
	}
	if (r0 >= 0)
		EXPECT_EQ(r0, module_refcnt());
}

/* RESET_OWNER while both rings are busy stops the workers; the same fd then
 * takes a new owner and configuration and carries traffic again. */
TEST(reset_owner_mid_flood)
{
	struct h_dev d;
	struct h_opts o = opts;
	struct flood fl;
	int fd;

	ASSERT_EQ(0, h_setup(&d, &o));
	flood_start(&fl, &d);
	usleep(300 * 1000);
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_RESET_OWNER, NULL));
	usleep(50 * 1000);
	EXPECT_LT(0, flood_stop(&fl));
	/* The old eventfds go; the reset fd takes a new owner and rings. */
	fd = d.fd;
	d.fd = -1;
	h_detach(&d);
	d.fd = fd;
	ASSERT_EQ(0, h_configure(&d, &o));
	EXPECT_EQ(0, tx_one(&d, d.pkt, 7));
	EXPECT_EQ(0, rx_one(&d, 8, true));
	h_teardown(&d);
}

/* NET_SET_BACKEND to another tap while both rings are busy: traffic moves
 * to the new tap, and the old one can be closed at once. */
TEST(backend_swap_mid_flood)
{
	struct h_dev d, t2;
	struct h_opts o = opts;
	struct flood fl;
	int q;

	ASSERT_EQ(0, h_setup(&d, &o));
	t2 = d;
	ASSERT_EQ(0, h_tap_open(&t2, true, -1));
	ASSERT_EQ(0, h_pkt_open(&t2));
	flood_start(&fl, &d);
	usleep(300 * 1000);
	for (q = 0; q < 2; q++) {
		struct vhost_vring_file b = { .index = q, .fd = t2.tap };

		EXPECT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	usleep(200 * 1000);
	EXPECT_LT(0, flood_stop(&fl));
	close(d.tap);
	close(d.pkt);
	d.tap = t2.tap;
	d.pkt = t2.pkt;
	EXPECT_EQ(0, tx_one(&d, t2.pkt, 9));
	EXPECT_EQ(0, rx_one(&d, 10, true));
	h_teardown(&d);
}

/* 1000 guest lifetimes on one memory and tap: open, configure, one frame
 * each way, close. A leak of one 64-byte object per cycle is 64 KB. */
TEST(open_configure_traffic_close_1000)
{
	const long long limit = 48 * 1024;
	long long before, after, best = -1;
	struct h_dev d;
	struct h_opts o = opts;
	int attempt, i, fails = 0;

	o.num = 64;
	ASSERT_EQ(0, h_setup(&d, &o));
	h_detach(&d);
	/* Slab noise from per-CPU caches: a real leak grows every attempt. */
	for (attempt = 0; attempt < 3 && !fails; attempt++) {
		h_settle();
		before = h_slab_active_bytes();
		ASSERT_LT(0, before) TH_LOG("cannot read /proc/slabinfo");
		for (i = 0; i < 1000 && !fails; i++) {
			int r = h_attach(&d, &o);

			if (!r)
				r = tx_one(&d, d.pkt, i);
			if (!r)
				r = rx_one(&d, i, false);
			if (r) {
				TH_LOG("cycle %d: %s", i, strerror(-r));
				fails++;
			}
			h_detach(&d);
		}
		h_settle();
		after = h_slab_active_bytes();
		TH_LOG("attempt %d: slab %lld -> %lld bytes (%+lld)", attempt, before, after,
		       after - before);
		if (best < 0 || after - before < best)
			best = after - before;
		if (best <= limit)
			break;
	}
	EXPECT_EQ(0, fails);
	EXPECT_LE(best, limit);
	h_teardown(&d);
}

TEST_HARNESS_MAIN
