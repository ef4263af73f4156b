// SPDX-License-Identifier: GPL-2.0
/*
 * packed: the packed virtqueue (VIRTIO_F_RING_PACKED, virtio 1.1 2.8) as
 * QEMU 7.2 and vhost-vdpa drive it through the vhost ioctls: the
 * descriptor ring in desc_user_addr, the driver and device event
 * suppression areas in avail_user_addr and used_user_addr, and both ring
 * positions with their wrap counters in VHOST_SET/GET_VRING_BASE (avail in
 * bits 0-15, used in bits 16-31, the wrap counter in bit 15 of each).
 *
 * datapath_packed runs the data-path cases on packed rings through the
 * harness; these cases write the packed ring themselves, to check what is
 * particular to it: chains of several descriptors and the used positions
 * that skip them, the buffer id of a chain's last descriptor, wrap
 * counters over many passes, event suppression, the base encoding, the
 * malformed rings the device must refuse, and dirty logging of ring
 * writes. The C vhost_net has no packed ring: there only `features` runs,
 * and checks that C refuses bit 34.
 */
#include "harness.h"
#include "kselftest_harness.h"

/* TCG, and more so the debug kernel, are slow (see datapath.c). */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

#define WAIT_MS		10000
#define QUIET_MS	300	/* how long "nothing happens" is watched for */
#define NUM		64
#define WINDOW		16	/* TX chains in flight: at most 48 of NUM entries */

#define SKIP_ON_C() do {							\
	if (h_on_c_driver())							\
		SKIP(return, "the C vhost_net has no packed ring");		\
} while (0)

static const struct h_opts popts = {
	.num = NUM, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1, .packed = true,
};

static struct vring_packed_desc pd(uint64_t addr, uint32_t len, uint16_t id, uint16_t flags)
{
	return (struct vring_packed_desc){ .addr = addr, .len = len, .id = id, .flags = flags };
}

/* A ring position: where the test expects the device's next used
 * descriptor, and how many ring entries went by in all. */
struct cursor {
	uint16_t pos;
	bool wrap;
	uint64_t entries;
};

static void advance(struct cursor *c, unsigned int n, unsigned int num)
{
	c->entries += n;
	c->pos += n;
	while (c->pos >= num) {
		c->pos -= num;
		c->wrap = !c->wrap;
	}
}

/* Queue q's driver-side used position, as the test starts from it. */
static struct cursor cursor_of(struct h_dev *d, int q)
{
	return (struct cursor){ d->vq[q].p_used, d->vq[q].p_used_wrap, 0 };
}

/* VHOST_*_VRING_BASE of a ring whose avail and used positions are both c. */
static uint32_t base_of(const struct cursor *c)
{
	return h_p_pos(c->pos, c->wrap) * 0x10001u;
}

/* Whether the descriptor at `pos` is a used one written in lap `wrap`. */
static bool used_at(struct h_vq *v, uint16_t pos, bool wrap)
{
	uint16_t f = __atomic_load_n(&v->pdesc[pos % v->num].flags, __ATOMIC_ACQUIRE);

	return !(f & H_P_AVAIL) == !wrap && !(f & H_P_USED) == !wrap;
}

/* ---- guest TX in chains of several shapes ------------------------------ */

enum { ONE, TWO, THREE, INDIRECT, KINDS };
static const unsigned int kind_entries[KINDS] = { 1, 2, 3, 1 };

static size_t frame_len(uint32_t seq)
{
	return 60 + (seq * 37) % 1400;
}

/*
 * Posts TX frame `seq` with buffer id seq % num, as a chain of kind
 * seq % nkinds: header and frame in one descriptor; header, frame; header
 * and the frame in two pieces; or those three in an indirect table at the
 * end of the buffer slot. Only the last descriptor carries the buffer id
 * (the others another one), as the device must take it from there. Inside
 * a table NEXT is reserved and ignored: every other table has it.
 */
static int tx_post(struct h_dev *d, uint32_t seq, unsigned int nkinds)
{
	struct h_vq *v = &d->vq[1];
	uint16_t id = seq % v->num, other = (id + 1) % v->num;
	uint64_t buf = h_buf(d, 1, id), tbl = buf + v->buf_size - 64;
	uint32_t hl = d->hdr_len, len = frame_len(seq), cut = len / 3;
	uint16_t tnext = (seq / nkinds) % 2 ? VRING_DESC_F_NEXT : 0;
	struct vring_packed_desc c[3], *t = h_ptr(d, tbl);
	uint8_t *p = h_ptr(d, buf);

	memset(p, 0, hl);
	h_frame(p + hl, seq, len);
	switch (seq % nkinds) {
	case ONE:
		c[0] = pd(buf, hl + len, id, 0);
		return h_packed_add(d, 1, c, 1);
	case TWO:
		c[0] = pd(buf, hl, other, VRING_DESC_F_NEXT);
		c[1] = pd(buf + hl, len, id, 0);
		return h_packed_add(d, 1, c, 2);
	case THREE:
		c[0] = pd(buf, hl, other, VRING_DESC_F_NEXT);
		c[1] = pd(buf + hl, cut, other, VRING_DESC_F_NEXT);
		c[2] = pd(buf + hl + cut, len - cut, id, 0);
		return h_packed_add(d, 1, c, 3);
	default:
		t[0] = pd(buf, hl, 0, tnext);
		t[1] = pd(buf + hl, cut, 0, tnext);
		t[2] = pd(buf + hl + cut, len - cut, 0, 0);
		c[0] = pd(tbl, 3 * sizeof(*t), id, VRING_DESC_F_INDIRECT);
		return h_packed_add(d, 1, c, 1);
	}
}

/*
 * Checks TX frame `seq`: intact on the tap, and its used descriptor at c
 * (buffer id, length 0: the device wrote nothing), with the other entries
 * of its chain left as the driver wrote them; takes it and moves c past
 * the chain. 0 or -1 (logged).
 */
static int tx_check(struct __test_metadata *_metadata, struct h_dev *d, struct cursor *c,
		    uint32_t seq, unsigned int nkinds)
{
	struct h_vq *v = &d->vq[1];
	unsigned int k = kind_entries[seq % nkinds], i;
	struct vring_packed_desc *u = &v->pdesc[c->pos];
	struct vring_used_elem e;
	uint8_t buf[2048];
	ssize_t n = h_pkt_recv(d, buf, sizeof(buf), WAIT_MS);

	if (n < 0 || h_check_frame(buf, n, frame_len(seq)) != seq) {
		TH_LOG("tx: frame %u (%zu bytes) not seen intact on the tap: %zd", seq, frame_len(seq), n);
		return -1;
	}
	if (h_wait_used(d, 1, 1, WAIT_MS) || !used_at(v, c->pos, c->wrap)) {
		TH_LOG("tx: frame %u: no used descriptor at position %u (wrap %d)", seq, c->pos, c->wrap);
		return -1;
	}
	if (u->id != seq % v->num || u->len != 0) {
		TH_LOG("tx: frame %u: used descriptor at %u has id %u, len %u; want id %u, len 0", seq,
		       c->pos, u->id, u->len, seq % v->num);
		return -1;
	}
	for (i = 1; i < k; i++) {
		struct cursor in = *c;

		advance(&in, i, v->num);
		if (used_at(v, in.pos, in.wrap)) {
			TH_LOG("tx: frame %u: a used descriptor inside its chain, at %u", seq, in.pos);
			return -1;
		}
	}
	e = h_take_used(d, 1);
	if (e.id != seq % v->num) {
		TH_LOG("tx: frame %u: the harness took id %u", seq, e.id);
		return -1;
	}
	advance(c, k, v->num);
	return 0;
}

/* Guest TX of frames *seq.. *seq + count - 1 in windows, each checked. */
static int tx_frames(struct __test_metadata *_metadata, struct h_dev *d, struct cursor *c,
		     uint32_t *seq, uint32_t count, unsigned int nkinds)
{
	uint32_t sent = *seq, got = *seq, end = *seq + count;

	while (got < end) {
		while (sent < end && sent - got < WINDOW) {
			if (tx_post(d, sent, nkinds))
				return -1;
			sent++;
		}
		h_kick(d, 1);
		while (got < sent)
			if (tx_check(_metadata, d, c, got++, nkinds))
				return -1;
	}
	*seq = end;
	return 0;
}

TEST(features)
{
	int fd = open(h_dev_path(), O_RDWR);
	uint64_t f = 0, g;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, h_ioctl(fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, h_ioctl(fd, VHOST_GET_FEATURES, &f));
	/* LOG_ALL left out: it would need a log base. */
	f &= ~(1ULL << VHOST_F_LOG_ALL);
	g = f | 1ULL << VIRTIO_F_RING_PACKED;
	if (h_on_c_driver()) {
		EXPECT_FALSE(f & (1ULL << VIRTIO_F_RING_PACKED));
		EXPECT_EQ(-EOPNOTSUPP, h_ioctl(fd, VHOST_SET_FEATURES, &g));
		/* The refusal is bit 34's: the rest is taken. */
		EXPECT_EQ(0, h_ioctl(fd, VHOST_SET_FEATURES, &f));
	} else {
		struct vhost_vring_state s = { .index = 1 };

		EXPECT_TRUE(f & (1ULL << VIRTIO_F_RING_PACKED)) TH_LOG("features %#llx", (unsigned long long)f);
		ASSERT_EQ(0, h_ioctl(fd, VHOST_SET_FEATURES, &g));
		/* A fresh packed ring: both indices 0, both wrap counters 1. */
		ASSERT_EQ(0, h_ioctl(fd, VHOST_GET_VRING_BASE, &s));
		EXPECT_EQ(0x80008000, s.num) TH_LOG("base %#x", s.num);
	}
	close(fd);
}

/* The ring format changes only while no backend is attached (EBUSY with
 * one: the ring was checked for the other format), and then starts at the
 * new format's first position. A packed ring may have any size (a guest
 * resizes one to 200 with a queue reset); a split ring is a power of two. */
TEST(format_change_and_ring_sizes)
{
	struct h_dev d;
	uint64_t split = 1ULL << VIRTIO_F_VERSION_1, packed = split | 1ULL << VIRTIO_F_RING_PACKED;
	struct vhost_vring_state s = { .index = 0 };
	int q;

	SKIP_ON_C();
	ASSERT_EQ(0, h_setup(&d, &popts));
	EXPECT_EQ(-EBUSY, h_ioctl(d.fd, VHOST_SET_FEATURES, &split));
	for (q = 0; q < 2; q++) {
		struct vhost_vring_file b = { .index = q, .fd = -1 };

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &split));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
	EXPECT_EQ(0, s.num) TH_LOG("split base after the change %#x", s.num);
	s.num = 200;
	EXPECT_EQ(-EINVAL, h_ioctl(d.fd, VHOST_SET_VRING_NUM, &s));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &packed));
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_NUM, &s));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
	EXPECT_EQ(0x80008000, s.num) TH_LOG("packed base after the change %#x", s.num);
	h_teardown(&d);
}

/* Chains of one, two and three descriptors and indirect ones, round after
 * round, over many passes of a 64-entry ring. */
TEST(tx_chains_over_wraps)
{
	struct h_dev d;
	struct cursor c;
	uint32_t seq = 0;

	SKIP_ON_C();
	ASSERT_EQ(0, h_setup(&d, &popts));
	c = cursor_of(&d, 1);
	EXPECT_EQ(0, tx_frames(_metadata, &d, &c, &seq, 1000, KINDS));
	EXPECT_LE(10 * NUM, c.entries) TH_LOG("only %llu ring entries", (unsigned long long)c.entries);
	EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, (uint8_t[2048]){ 0 }, 2048, QUIET_MS));
	h_teardown(&d);
}

/*
 * VIRTIO_F_IN_ORDER with a packed ring: the device still writes one used
 * descriptor per buffer (the spec allows it), at the buffer's first
 * position, so the harness's packed driver, which checks that, takes
 * them as before. Chains of one to three descriptors and indirect ones,
 * and mergeable RX over 512-byte buffers.
 */
TEST(in_order_with_a_packed_ring)
{
	struct h_opts o = popts;
	struct h_dev d;
	struct cursor c;
	uint32_t seq = 0;

	SKIP_ON_C();
	o.in_order = true;
	o.rx_buf = 512;
	ASSERT_EQ(0, h_setup(&d, &o));
	c = cursor_of(&d, 1);
	EXPECT_EQ(0, tx_frames(_metadata, &d, &c, &seq, 300, KINDS));
	EXPECT_EQ(0, h_run_rx(&d, 300, 1400));
	h_teardown(&d);
}

/*
 * Guest RX without mergeable buffers into chains of two: the header's
 * descriptor, then the frame's. Each used descriptor must stand at the
 * position the chains before it add up to, with the buffer's id and the
 * bytes written, and the frame must be whole in the second buffer.
 */
TEST(rx_two_descriptor_chains_over_wraps)
{
	struct h_opts o = popts;
	struct h_dev d;
	struct h_vq *v;
	struct cursor c;
	uint32_t posted = 0, sent = 0, got = 0, count = 800;
	uint8_t frame[2048];

	SKIP_ON_C();
	o.mrg_rxbuf = false;
	ASSERT_EQ(0, h_setup(&d, &o));
	v = &d.vq[0];
	c = cursor_of(&d, 0);
	while (got < count) {
		/* Up to WINDOW chains posted, then as many frames sent. */
		for (; posted < count && posted - got < WINDOW; posted++) {
			uint16_t id = posted % v->num;
			uint64_t buf = h_buf(&d, 0, id);
			struct vring_packed_desc ch[2] = {
				pd(buf, d.hdr_len, (id + 1) % v->num, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT),
				pd(buf + 64, v->buf_size - 64, id, VRING_DESC_F_WRITE),
			};

			ASSERT_EQ(0, h_packed_add(&d, 0, ch, 2));
		}
		h_kick(&d, 0);
		for (; sent < posted; sent++) {
			h_frame(frame, sent, frame_len(sent));
			ASSERT_EQ(frame_len(sent), send(d.pkt, frame, frame_len(sent), 0));
		}
		for (; got < sent; got++) {
			struct vring_packed_desc *u = &v->pdesc[c.pos];
			uint8_t *b = h_ptr(&d, h_buf(&d, 0, got % v->num));
			struct vring_used_elem e;
			uint16_t nb;

			ASSERT_EQ(0, h_wait_used(&d, 0, 1, WAIT_MS)) TH_LOG("rx: frame %u never used", got);
			ASSERT_TRUE(used_at(v, c.pos, c.wrap))
				TH_LOG("rx: frame %u: no used descriptor at %u (wrap %d)", got, c.pos, c.wrap);
			ASSERT_EQ(got % v->num, u->id) TH_LOG("rx: frame %u", got);
			ASSERT_EQ(d.hdr_len + frame_len(got), u->len) TH_LOG("rx: frame %u", got);
			ASSERT_FALSE(used_at(v, c.pos + 1, c.wrap ^ (c.pos + 1 == v->num)))
				TH_LOG("rx: frame %u: a used descriptor inside its chain", got);
			ASSERT_EQ(got, h_check_frame(b + 64, frame_len(got), frame_len(got)))
				TH_LOG("rx: frame %u corrupt", got);
			/* Virtio 1.x headers say num_buffers 1 without merging. */
			memcpy(&nb, b + 10, 2);
			ASSERT_EQ(1, nb) TH_LOG("rx: frame %u", got);
			e = h_take_used(&d, 0);
			ASSERT_EQ(got % v->num, e.id);
			advance(&c, 2, v->num);
		}
	}
	EXPECT_LE(10 * NUM, c.entries);
	h_teardown(&d);
}

/* Guest RX with mergeable 512-byte buffers: frames of 60 to 1459 bytes
 * take one to three, and num_buffers must say exactly how many. */
TEST(rx_mergeable_over_wraps)
{
	static uint8_t frame[2048], got_buf[4096];
	struct h_opts o = popts;
	struct h_dev d;
	uint32_t sent = 0, got = 0, count = 600;
	uint16_t start;

	SKIP_ON_C();
	o.rx_buf = 512;
	ASSERT_EQ(0, h_setup(&d, &o));
	start = d.vq[0].used_seen;
	h_rx_fill(&d, d.vq[0].num);
	while (got < count) {
		/* 8 frames need at most 24 of the 64 buffers. */
		for (; sent < count && sent - got < 8; sent++) {
			h_frame(frame, sent, frame_len(sent));
			ASSERT_EQ(frame_len(sent), send(d.pkt, frame, frame_len(sent), 0));
		}
		for (; got < sent; got++) {
			size_t want = d.hdr_len + frame_len(got);
			uint16_t nb = 0;
			ssize_t n = h_rx_take(&d, got_buf, sizeof(got_buf), &nb);

			ASSERT_EQ(want, n) TH_LOG("rx: frame %u", got);
			ASSERT_EQ((want + 511) / 512, nb) TH_LOG("rx: frame %u: num_buffers", got);
			ASSERT_EQ(got, h_check_frame(got_buf + d.hdr_len, n - d.hdr_len, frame_len(got)))
				TH_LOG("rx: frame %u corrupt", got);
			h_rx_fill(&d, nb);
		}
	}
	EXPECT_LE(10 * NUM, (uint16_t)(d.vq[0].used_seen - start));
	h_teardown(&d);
}

/* Sets the driver event suppression area of queue q: where in the ring
 * the driver wants its next interrupt, then whether it wants any. */
static void driver_event(struct h_dev *d, int q, uint16_t flags, const struct cursor *at)
{
	struct h_vq *v = &d->vq[q];

	if (at)
		v->pdriver->off_wrap = h_p_pos(at->pos, at->wrap);
	__atomic_store_n(&v->pdriver->flags, flags, __ATOMIC_SEQ_CST);
}

/* Posts `n` one-descriptor TX frames, kicks and waits for their used
 * entries, without taking them. */
static int tx_burst(struct h_dev *d, uint32_t *seq, unsigned int n)
{
	uint16_t before = h_used_pending(d, 1);
	unsigned int i;

	for (i = 0; i < n; i++)
		if (tx_post(d, (*seq)++, 1))
			return -1;
	h_kick(d, 1);
	return h_wait_used(d, 1, before + n, WAIT_MS);
}

static void tx_take_all(struct h_dev *d)
{
	while (h_used_pending(d, 1))
		h_take_used(d, 1);
}

/*
 * Event suppression, as the driver area sets it: with EVENT_IDX, DESC at a
 * position (here past a wrap) means no interrupt until the used
 * descriptor there is written; DISABLE means none; ENABLE means one. The
 * first check after a ring starts always signals (as C's split ring
 * does), so one frame goes first.
 */
static void event_case(struct __test_metadata *_metadata, bool event_idx)
{
	struct h_opts o = popts;
	struct h_dev d;
	struct h_vq *v;
	uint32_t seq = 0;

	o.event_idx = event_idx;
	ASSERT_EQ(0, h_setup(&d, &o));
	v = &d.vq[1];
	ASSERT_EQ(0, tx_burst(&d, &seq, 1));
	tx_take_all(&d);
	h_fired(v->call, QUIET_MS);
	if (event_idx) {
		struct cursor at;

		/* To 3 entries before the ring's end; the event at the sixth
		 * used descriptor from there: position 2 of the next lap,
		 * whose wrap counter is 0. */
		while (v->p_used != NUM - 3) {
			ASSERT_EQ(0, tx_burst(&d, &seq, 1));
			tx_take_all(&d);
		}
		at = cursor_of(&d, 1);
		advance(&at, 5, NUM);
		ASSERT_EQ(2, at.pos);
		ASSERT_FALSE(at.wrap);
		driver_event(&d, 1, VRING_PACKED_EVENT_FLAG_DESC, &at);
		h_fired(v->call, QUIET_MS);
		ASSERT_EQ(0, tx_burst(&d, &seq, 4));
		EXPECT_FALSE(h_fired(v->call, QUIET_MS)) TH_LOG("an interrupt before position 2 was used");
		ASSERT_EQ(0, tx_burst(&d, &seq, 2));
		EXPECT_TRUE(h_fired(v->call, WAIT_MS)) TH_LOG("no interrupt when position 2 was used");
		tx_take_all(&d);
	}
	driver_event(&d, 1, VRING_PACKED_EVENT_FLAG_DISABLE, NULL);
	h_fired(v->call, QUIET_MS);
	ASSERT_EQ(0, tx_burst(&d, &seq, 4));
	EXPECT_FALSE(h_fired(v->call, QUIET_MS)) TH_LOG("an interrupt with events disabled");
	tx_take_all(&d);
	driver_event(&d, 1, VRING_PACKED_EVENT_FLAG_ENABLE, NULL);
	ASSERT_EQ(0, tx_burst(&d, &seq, 1));
	EXPECT_TRUE(h_fired(v->call, WAIT_MS)) TH_LOG("no interrupt with events enabled");
	h_teardown(&d);
}

TEST(event_suppression_with_event_idx) { SKIP_ON_C(); event_case(_metadata, true); }
TEST(event_suppression_without_event_idx) { SKIP_ON_C(); event_case(_metadata, false); }

/*
 * A Linux guest kicks a packed ring when the device area asks
 * (virtqueue_kick_prepare_packed, h_kick_needed). An RX ring that never
 * runs dry must not ask on every refill. The device area starts as the
 * driver zeroed it: flags 0, ENABLE, a kick for every publish, until the
 * device writes it. With event-idx, a DESC position left from before may
 * come round once in two laps; every refill is what was wrong.
 */
TEST(rx_with_buffers_left_asks_for_no_kicks)
{
	struct h_opts o = popts;
	struct h_dev d;
	struct h_vq *v;
	uint8_t frame[128];
	unsigned int i, frames = 3 * NUM, asked = 0;

	SKIP_ON_C();
	ASSERT_EQ(0, h_setup(&d, &o));
	v = &d.vq[0];
	for (i = 0; i < NUM / 2; i++) {
		v->vr.desc[i] = (struct vring_desc){ h_buf(&d, 0, i), v->buf_size, VRING_DESC_F_WRITE, 0 };
		h_publish(&d, 0, i);
	}
	h_kick(&d, 0);
	for (i = 0; i < frames; i++) {
		struct vring_used_elem e;
		struct h_kick_mark from;

		h_frame(frame, i, 60);
		ASSERT_EQ(60, send(d.pkt, frame, 60, 0));
		ASSERT_EQ(0, h_wait_used(&d, 0, 1, WAIT_MS)) TH_LOG("rx: frame %u never used", i);
		e = h_take_used(&d, 0);
		/* The buffer goes straight back, as a guest's refill. */
		from = h_kick_mark(v);
		h_publish(&d, 0, e.id);
		if (h_kick_needed(&d, 0, from)) {
			asked++;
			h_kick(&d, 0);
		}
	}
	EXPECT_GE(frames / NUM, asked) TH_LOG("%u kicks asked for %u refills", asked, frames);
	/* The other way round: once a frame finds no buffer, the device
	 * asks, and the refill's kick brings the frame in. */
	for (i = 0; i < NUM / 2; i++) {
		h_frame(frame, frames + i, 60);
		ASSERT_EQ(60, send(d.pkt, frame, 60, 0));
		ASSERT_EQ(0, h_wait_used(&d, 0, 1, WAIT_MS)) TH_LOG("rx: frame %u never used", frames + i);
		h_take_used(&d, 0);
	}
	h_frame(frame, frames + i, 60);
	ASSERT_EQ(60, send(d.pkt, frame, 60, 0));
	ASSERT_EQ(0, h_wait_drained(&d, 0, WAIT_MS)) TH_LOG("the dry RX ring never asked for a kick");
	{
		struct h_kick_mark from = h_kick_mark(v);

		h_publish(&d, 0, 0);
		EXPECT_TRUE(h_kick_needed(&d, 0, from)) TH_LOG("a refill of the dry RX ring needs no kick");
		h_kick(&d, 0);
	}
	EXPECT_EQ(0, h_wait_used(&d, 0, 1, WAIT_MS)) TH_LOG("the frame waiting for a buffer never came");
	h_teardown(&d);
}

/*
 * QEMU's stop and restart (migration, vm stop): backend detached,
 * GET_VRING_BASE, and later SET_VRING_BASE with what it returned and the
 * backend again. The base must be exactly where the ring stands, wrap
 * counters included, and the chains posted while stopped must go out
 * after the restart, once each, in order.
 */
TEST(stop_and_resume_at_the_base)
{
	struct h_dev d;
	struct cursor c;
	uint32_t seq = 0, stopped_seq;
	int round;

	SKIP_ON_C();
	ASSERT_EQ(0, h_setup(&d, &popts));
	c = cursor_of(&d, 1);
	/* A base set is the base read back, each half in its place: here the
	 * avail position 11 ahead of the used one in the same lap, as with
	 * chains in flight. */
	{
		struct vhost_vring_state s = { .index = 1, .num = 0x80058010 };
		struct vhost_vring_file b = { .index = 1, .fd = -1 };

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
		EXPECT_EQ(0x80058010, s.num) TH_LOG("set 0x80058010, got %#x", s.num);
		s.num = 0x80008000;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
		b.fd = d.tap;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	/* Chains of 1, 2 and 3 entries: 50 of them end at entry 99, in the
	 * second lap (wrap counter 0); the second round ends at entry 165,
	 * in the third (wrap counter 1 again). */
	for (round = 0; round < 2; round++) {
		struct vhost_vring_state s = { .index = 1 };
		struct vhost_vring_file b = { .index = 1, .fd = -1 };
		uint32_t want;
		int i;

		ASSERT_EQ(0, tx_frames(_metadata, &d, &c, &seq, round ? 30 : 50, 3));
		want = base_of(&c);
		ASSERT_EQ(round ? 1 : 0, c.wrap) TH_LOG("%llu entries", (unsigned long long)c.entries);
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
		EXPECT_EQ(want, s.num) TH_LOG("round %d: base %#x, want %#x", round, s.num, want);
		/* Posted while stopped: nothing goes out. */
		stopped_seq = seq;
		for (i = 0; i < 3; i++)
			ASSERT_EQ(0, tx_post(&d, seq++, 3));
		h_kick(&d, 1);
		EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, (uint8_t[2048]){ 0 }, 2048, QUIET_MS));
		EXPECT_EQ(0, h_used_pending(&d, 1));
		/* Restarted at the base: each goes out once. */
		s.num = want;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
		b.fd = d.tap;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
		h_kick(&d, 1);
		for (i = 0; i < 3; i++)
			ASSERT_EQ(0, tx_check(_metadata, &d, &c, stopped_seq + i, 3));
		EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, (uint8_t[2048]){ 0 }, 2048, QUIET_MS));
	}
	h_teardown(&d);
}

/* RX stopped and resumed the same way, past a wrap, with the ring stocked
 * with buffers: the base is where the device stopped using them, and
 * every frame after the restart arrives in order. */
TEST(rx_stop_and_resume_at_the_base)
{
	struct vhost_vring_state s = { .index = 0 };
	struct vhost_vring_file b = { .index = 0, .fd = -1 };
	struct h_dev d;

	SKIP_ON_C();
	ASSERT_EQ(0, h_setup(&d, &popts));
	ASSERT_EQ(0, h_run_rx(&d, 150, 300));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
	/* 150 buffers of one entry each: index 22 of the third lap. */
	EXPECT_EQ(0x80168016, s.num) TH_LOG("base %#x", s.num);
	EXPECT_EQ(h_vq_base(&d, 0), s.num);
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
	b.fd = d.tap;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	EXPECT_EQ(0, h_run_rx(&d, 150, 300));
	h_teardown(&d);
}

/* Whether the TX queue carried nothing for QUIET_MS after a kick. */
static bool tx_quiet(struct h_dev *d)
{
	h_kick(d, 1);
	return h_pkt_recv(d, (uint8_t[2048]){ 0 }, 2048, QUIET_MS) == -ETIMEDOUT &&
	       h_used_pending(d, 1) == 0;
}

/*
 * A base with a position outside the ring: refused (EINVAL), or taken and
 * the ring does not run. Either way nothing is processed; a frame posted
 * meanwhile goes out once a good base is set. The ring size can also
 * shrink under a good base, leaving it outside: then the ring must not
 * run either.
 */
TEST(base_outside_the_ring)
{
	static const uint32_t bad[] = {
		0x80008000 | NUM,		/* avail index num */
		0x80008000 | NUM << 16,		/* used index num */
		0xffffffff,			/* both 32767 */
	};
	struct vhost_vring_file b = { .index = 1, .fd = -1 };
	struct vhost_vring_state s = { .index = 1 };
	struct cursor c;
	struct h_dev d;
	unsigned int i;
	uint32_t seq = 0;

	SKIP_ON_C();
	ASSERT_EQ(0, h_setup(&d, &popts));
	c = cursor_of(&d, 1);
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	ASSERT_EQ(0, tx_post(&d, seq, 1));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r;

		s.num = bad[i];
		r = h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s);
		if (r) {
			/* Refused: the fresh base must stand. */
			EXPECT_EQ(-EINVAL, r) TH_LOG("base %#x: %s", bad[i], strerror(-r));
			ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
			EXPECT_EQ(0x80008000, s.num) TH_LOG("a refused base %#x changed it", bad[i]);
			continue;
		}
		/* Taken: the ring must not run with it. */
		b.fd = d.tap;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
		EXPECT_EQ(0, h_fdinfo_u64(&d, "vq1:", "running=")) TH_LOG("base %#x", bad[i]);
		EXPECT_TRUE(tx_quiet(&d)) TH_LOG("base %#x: the ring ran", bad[i]);
		b.fd = -1;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	/* A good base, then a ring size it does not fit. */
	s.num = 0x80288028;	/* index 40 */
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
	s.num = NUM / 2;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_NUM, &s));
	b.fd = d.tap;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	EXPECT_EQ(0, h_fdinfo_u64(&d, "vq1:", "running="));
	EXPECT_TRUE(tx_quiet(&d)) TH_LOG("ran with its base past the end of a smaller ring");
	b.fd = -1;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	/* Back to a fresh base: the frame goes out, once. */
	s.num = NUM;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_NUM, &s));
	s.num = 0x80008000;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
	b.fd = d.tap;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	EXPECT_EQ(1, h_fdinfo_u64(&d, "vq1:", "running="));
	h_kick(&d, 1);
	EXPECT_EQ(0, tx_check(_metadata, &d, &c, seq, 1));
	EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, (uint8_t[2048]){ 0 }, 2048, QUIET_MS));
	h_teardown(&d);
}

/* ---- malformed rings ---------------------------------------------------- */

/* Each writes one malformed chain at the next avail position of queue q,
 * ids from 1 on (buffer 0 went first, and was used), in a ring of 8. */
#define BAD_NUM	8

static int bad_too_long(struct h_dev *d, int q)
{
	struct vring_packed_desc c[BAD_NUM];
	unsigned int i;

	for (i = 0; i < BAD_NUM; i++)
		c[i] = pd(h_buf(d, q, i), 64, i, VRING_DESC_F_NEXT);
	return h_packed_add(d, q, c, BAD_NUM);
}

static int bad_id(struct h_dev *d, int q)
{
	struct vring_packed_desc c = pd(h_buf(d, q, 1), d->hdr_len + 60, BAD_NUM, 0);

	h_frame((uint8_t *)h_ptr(d, h_buf(d, q, 1)) + d->hdr_len, 1, 60);
	return h_packed_add(d, q, &c, 1);
}

/* A good table of two (header, frame) at the end of slot 1. */
static uint64_t good_table(struct h_dev *d, int q)
{
	uint64_t buf = h_buf(d, q, 1), tbl = buf + d->vq[q].buf_size - 64;
	struct vring_packed_desc *t = h_ptr(d, tbl);

	memset(h_ptr(d, buf), 0, d->hdr_len);
	h_frame((uint8_t *)h_ptr(d, buf) + d->hdr_len, 1, 60);
	t[0] = pd(buf, d->hdr_len, 0, 0);
	t[1] = pd(buf + d->hdr_len, 60, 0, 0);
	t[2] = pd(0, 0, 0, 0);
	return tbl;
}

static int bad_indirect_next(struct h_dev *d, int q)
{
	struct vring_packed_desc c[2] = {
		pd(good_table(d, q), 32, 1, VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT),
		pd(h_buf(d, q, 2), 64, 1, 0),
	};

	return h_packed_add(d, q, c, 2);
}

static int bad_indirect_len(struct h_dev *d, int q)
{
	struct vring_packed_desc c = pd(good_table(d, q), 40, 1, VRING_DESC_F_INDIRECT);

	return h_packed_add(d, q, &c, 1);
}

/* RX: a buffer the device may write, then one it may only read. */
static int bad_read_after_write(struct h_dev *d, int q)
{
	struct vring_packed_desc c[2] = {
		pd(h_buf(d, q, 1), d->hdr_len, 1, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT),
		pd(h_buf(d, q, 1) + 64, 1500, 1, 0),
	};

	return h_packed_add(d, q, c, 2);
}

/* TX: the frame, then a buffer for the device to write. */
static int bad_tx_writable(struct h_dev *d, int q)
{
	uint64_t buf = h_buf(d, q, 1);
	struct vring_packed_desc c[2] = {
		pd(buf, d->hdr_len + 60, 1, VRING_DESC_F_NEXT),
		pd(buf + 1024, 100, 1, VRING_DESC_F_WRITE),
	};

	memset(h_ptr(d, buf), 0, d->hdr_len);
	h_frame((uint8_t *)h_ptr(d, buf) + d->hdr_len, 1, 60);
	return h_packed_add(d, q, c, 2);
}

/*
 * One good buffer through queue q first, so that the ring is known to run
 * and its base to have moved; then the malformed chain, and a kick (and on
 * RX a frame to receive). The error eventfd must fire, and nothing of the
 * chain be consumed: no used descriptor, nothing on the tap, the first
 * descriptor as the driver wrote it, the base just past the good buffer,
 * and the queue stopped as broken.
 */
static void bad_ring(struct __test_metadata *_metadata, int q, int (*bad)(struct h_dev *d, int q))
{
	struct h_opts o = popts;
	struct h_dev d;
	struct h_vq *v;
	struct cursor c;
	struct vhost_vring_state s = { .index = q };
	uint8_t frame[200], got[2048];
	uint16_t first, nb;
	const char *vq = q ? "vq1:" : "vq0:";

	o.num = BAD_NUM;
	ASSERT_EQ(0, h_setup(&d, &o));
	v = &d.vq[q];
	c = cursor_of(&d, q);
	if (q) {
		ASSERT_EQ(0, tx_post(&d, 0, 1));
		h_kick(&d, 1);
		ASSERT_EQ(0, tx_check(_metadata, &d, &c, 0, 1));
	} else {
		h_rx_fill(&d, 1);
		h_frame(frame, 0, 100);
		ASSERT_EQ(100, send(d.pkt, frame, 100, 0));
		ASSERT_EQ(d.hdr_len + 100, h_rx_take(&d, got, sizeof(got), &nb));
		ASSERT_EQ(0, h_check_frame(got + d.hdr_len, 100, 100));
	}
	ASSERT_EQ(0, bad(&d, q));
	first = v->pdesc[v->p_used].flags;
	h_kick(&d, q);
	if (!q) {
		h_frame(frame, 1, sizeof(frame));
		ASSERT_EQ(sizeof(frame), send(d.pkt, frame, sizeof(frame), 0));
	}
	EXPECT_TRUE(h_fired(v->err, WAIT_MS)) TH_LOG("no error signalled");
	EXPECT_EQ(0, h_used_pending(&d, q));
	EXPECT_EQ(first, v->pdesc[v->p_used].flags) TH_LOG("the first descriptor was written");
	if (q)
		EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, frame, sizeof(frame), QUIET_MS));
	EXPECT_EQ(0, h_fdinfo_u64(&d, vq, "running="));
	EXPECT_EQ(1, h_fdinfo_u64(&d, vq, "broken="));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
	EXPECT_EQ(h_vq_base(&d, q), s.num) TH_LOG("base %#x: the bad chain was consumed", s.num);
	h_teardown(&d);
}

TEST(malformed_chain_longer_than_num) { SKIP_ON_C(); bad_ring(_metadata, 1, bad_too_long); }
TEST(malformed_buffer_id_num) { SKIP_ON_C(); bad_ring(_metadata, 1, bad_id); }
TEST(malformed_indirect_with_next) { SKIP_ON_C(); bad_ring(_metadata, 1, bad_indirect_next); }
TEST(malformed_indirect_len_not_16s) { SKIP_ON_C(); bad_ring(_metadata, 1, bad_indirect_len); }
TEST(malformed_readable_after_writable) { SKIP_ON_C(); bad_ring(_metadata, 0, bad_read_after_write); }
TEST(malformed_tx_writable_buffer) { SKIP_ON_C(); bad_ring(_metadata, 1, bad_tx_writable); }

/* ---- dirty logging (see logging.c) -------------------------------------- */

#define LOG_PAGE	4096ULL
#define LOG_ALLOC	(H_LOG_BYTES + 8)
#define LOG_NUM		1024	/* a descriptor ring of four pages */
#define SENTINEL	0x5a5a

static bool log_bit(const uint8_t *bitmap, uint64_t page)
{
	return __atomic_load_n(&bitmap[page / 8], __ATOMIC_RELAXED) & (1u << (page % 8));
}

static void want_range(uint8_t *want, uint64_t gpa, uint64_t len)
{
	uint64_t page;

	for (page = gpa / LOG_PAGE; len && page <= (gpa + len - 1) / LOG_PAGE; page++)
		want[page / 8] |= 1u << (page % 8);
}

/* The pages of `want` the bitmap lacks; the first in *first. */
static unsigned int missing(const uint8_t *bitmap, const uint8_t *want, uint64_t *first)
{
	unsigned int n = 0;
	uint64_t page;

	*first = ~0ULL;
	for (page = 0; page < H_LOG_BYTES * 8; page++) {
		if ((want[page / 8] & (1u << (page % 8))) && !log_bit(bitmap, page)) {
			if (!n)
				*first = page;
			n++;
		}
	}
	return n;
}

/* Whether the device wrote its event position since mark_device() (with
 * EVENT_IDX, which these tests negotiate, it does each time it asks to be
 * kicked). */
static bool device_wrote(struct h_vq *v)
{
	return __atomic_load_n(&v->pdevice->off_wrap, __ATOMIC_ACQUIRE) != SENTINEL;
}

/*
 * Only the position is marked, never the flags. The device area is the
 * device's: it remembers the flags it wrote last and does not write them
 * again, and the TX worker may already have asked for a kick (flags DESC)
 * when the backend was attached. A sentinel in the flags would then stay
 * there for good and h_wait_drained() would wait for DESC in vain.
 */
static void mark_device(struct h_vq *v)
{
	__atomic_store_n(&v->pdevice->off_wrap, SENTINEL, __ATOMIC_SEQ_CST);
}

/*
 * TX with logging on: the device writes used descriptors into the
 * descriptor ring, at guest addresses it finds by reversing the memory
 * table, and its event area when it asks for a kick; those pages must be
 * logged. The frames' buffers and the driver area, which it only reads,
 * must not be.
 */
TEST(dirty_log_tx)
{
	uint8_t *bitmap = calloc(1, LOG_ALLOC), *want = calloc(1, LOG_ALLOC);
	int logfd = eventfd(0, EFD_NONBLOCK);
	struct h_opts o = popts;
	uint64_t first, page, bufs_logged = 0;
	uint32_t seq = 0, i;
	struct h_dev d;
	struct h_vq *v;
	struct cursor c;
	unsigned int n;

	SKIP_ON_C();
	ASSERT_TRUE(bitmap && want && logfd >= 0);
	o.num = LOG_NUM;
	ASSERT_EQ(0, h_setup(&d, &o));
	v = &d.vq[1];
	ASSERT_EQ(0, h_log_start(&d, bitmap, logfd));
	mark_device(v);
	c = cursor_of(&d, 1);
	/* 300 chains of 1 to 3 entries: about half the ring, two pages. */
	for (i = 0; i < 300; i++) {
		struct cursor at = c;

		ASSERT_EQ(0, tx_frames(_metadata, &d, &c, &seq, 1, KINDS));
		want_range(want, h_gpa(&d, &v->pdesc[at.pos]), sizeof(*v->pdesc));
	}
	ASSERT_EQ(0, h_wait_drained(&d, 1, WAIT_MS)) TH_LOG("the device did not ask for a kick");
	ASSERT_TRUE(device_wrote(v));
	want_range(want, h_gpa(&d, v->pdevice), sizeof(*v->pdevice));
	n = missing(bitmap, want, &first);
	EXPECT_EQ(0, n) TH_LOG("%u pages written but not logged, the first %#llx", n,
			       (unsigned long long)first);
	EXPECT_FALSE(log_bit(bitmap, h_gpa(&d, v->pdriver) / LOG_PAGE)) TH_LOG("the driver area was logged");
	for (page = v->buf_base / LOG_PAGE; page < (v->buf_base + LOG_NUM * v->buf_size) / LOG_PAGE; page++)
		bufs_logged += log_bit(bitmap, page);
	EXPECT_EQ(0, bufs_logged) TH_LOG("TX buffers the device only read were logged");
	EXPECT_TRUE(h_fired(logfd, 1000));
	h_teardown(&d);
	close(logfd);
	free(bitmap);
	free(want);
}

/*
 * RX with logging on: the packets' bytes in the buffers, the used
 * descriptors, and the event area, which the device writes to ask for a
 * kick when a frame finds no buffer (the first one here), must be logged.
 */
TEST(dirty_log_rx)
{
	uint8_t *bitmap = calloc(1, LOG_ALLOC), *want = calloc(1, LOG_ALLOC);
	int logfd = eventfd(0, EFD_NONBLOCK);
	struct h_opts o = popts;
	uint8_t frame[1600];
	uint32_t sent = 0, got = 0, count = 300;
	uint64_t first, end;
	struct h_dev d;
	struct h_vq *v;
	unsigned int n;

	SKIP_ON_C();
	ASSERT_TRUE(bitmap && want && logfd >= 0);
	o.num = LOG_NUM;
	ASSERT_EQ(0, h_setup(&d, &o));
	v = &d.vq[0];
	ASSERT_EQ(0, h_log_start(&d, bitmap, logfd));
	mark_device(v);
	h_frame(frame, sent, frame_len(sent));
	ASSERT_EQ(frame_len(sent), send(d.pkt, frame, frame_len(sent), 0));
	sent++;
	end = h_now_ns() + WAIT_MS * 1000000ULL;
	while (!device_wrote(v) && h_now_ns() < end)
		usleep(1000);
	ASSERT_TRUE(device_wrote(v)) TH_LOG("a frame without a buffer: the device did not ask for a kick");
	want_range(want, h_gpa(&d, v->pdevice), sizeof(*v->pdevice));
	while (got < count) {
		h_rx_fill(&d, 16);
		for (; sent < count && sent - got < 16; sent++) {
			h_frame(frame, sent, frame_len(sent));
			ASSERT_EQ(frame_len(sent), send(d.pkt, frame, frame_len(sent), 0));
		}
		for (; got < sent; got++) {
			uint16_t pos = v->p_used;
			struct vring_used_elem e;

			ASSERT_EQ(0, h_wait_used(&d, 0, 1, WAIT_MS)) TH_LOG("rx: frame %u never used", got);
			e = h_take_used(&d, 0);
			ASSERT_GT(v->num, e.id);
			ASSERT_EQ(d.hdr_len + frame_len(got), e.len) TH_LOG("rx: frame %u", got);
			want_range(want, h_gpa(&d, &v->pdesc[pos]), sizeof(*v->pdesc));
			want_range(want, h_buf(&d, 0, e.id), e.len);
		}
	}
	n = missing(bitmap, want, &first);
	EXPECT_EQ(0, n) TH_LOG("%u pages written but not logged, the first %#llx", n,
			       (unsigned long long)first);
	EXPECT_FALSE(log_bit(bitmap, h_gpa(&d, v->pdriver) / LOG_PAGE)) TH_LOG("the driver area was logged");
	EXPECT_TRUE(h_fired(logfd, 1000));
	h_teardown(&d);
	close(logfd);
	free(bitmap);
	free(want);
}

/*
 * Issue 33, defect 5: a busy-poll retry charged to the weight. With
 * VHOST_SET_VRING_BUSYLOOP_TIMEOUT, TX watches the ring when it finds it
 * empty and goes on when a chain shows up. On a packed ring that look and
 * the pop that follows read the descriptor's flags separately: a guest
 * that shows the AVAIL bit and takes it back in between makes the first
 * true and the second find nothing. Unless each such pass counts toward
 * the run's weight, as every pass of C's handle_tx_copy does
 * (vhost_exceeds_weight(vq, ++sent_pkts, total_len), `continue` included),
 * the run goes on for as long as the guest pulses, holding the queue's
 * lock: GET_VRING_BASE, SET_BACKEND and IOTLB writes on that queue wait.
 *
 * The bound: a run takes at most VHOST_NET_PKT_WEIGHT (256) passes, each
 * at most one busy-loop timeout (1000 us here) long: 256 ms. The ioctl
 * waits for the run that holds the lock and at most one more (a mutex is
 * handed to a waiter that lost it once), so 512 ms; a second leaves room
 * for a slow VM. The pulses go on for four.
 *
 * The worker polls on one CPU, the pulsing thread and the ioctl run on
 * another. A pulse that the device takes (its pop saw AVAIL) becomes a
 * used descriptor: the pulser sees its flags change and moves on to the
 * next position, as a driver would. Those passes are charged on any
 * driver (a packet went out); the ones that matter are the others.
 *
 * Whether pulses fall between the look and the pop often enough depends
 * on the machine; under the project's TCG test VM they mostly do not (the
 * device takes thousands of the pulsed chains, each charged), and this
 * case passed on the driver that did not charge the others too. It bounds
 * the queue's lock hold whatever the timing.
 */
struct pulser {
	struct h_dev *d;
	pthread_t thr;
	volatile bool stop;
	uint64_t until;			/* h_now_ns() deadline of the pulses */
	unsigned int spin;		/* pulse length, in loop turns */
	unsigned long pulses, taken;
};

#define PULSE_WINDOW	16

/* The pulses: the PULSE_WINDOW positions from the device's next one on
 * become available together and stop being so; a position the device
 * took (its flags turned used, which a compare-and-exchange sees) leaves
 * the window, which moves on, as a driver's would. */
static void *pulse_fn(void *arg)
{
	struct pulser *pl = arg;
	struct h_dev *d = pl->d;
	struct h_vq *v = &d->vq[1];
	uint64_t first = v->p_avail, j;	/* positions as counts from lap 0 */
	bool wrap0 = v->p_avail_wrap;
	bool taken[PULSE_WINDOW] = { 0 };

#define PULSE_DESC(n)	(&v->pdesc[(n) % v->num])
#define PULSE_WRAP(n)	(wrap0 ^ (((n) / v->num) & 1))
	for (j = first; j < first + PULSE_WINDOW; j++) {
		PULSE_DESC(j)->addr = h_buf(d, 1, j);
		PULSE_DESC(j)->len = d->hdr_len + 64;
		PULSE_DESC(j)->id = j % v->num;
		__atomic_store_n(&PULSE_DESC(j)->flags, h_p_avail_flags(0, !PULSE_WRAP(j)), __ATOMIC_RELEASE);
	}
	while (!pl->stop) {
		volatile unsigned int k;
		unsigned int i;

		for (i = 0; i < PULSE_WINDOW; i++) {
			uint16_t off = h_p_avail_flags(0, !PULSE_WRAP(first + i));

			if (!taken[i] && !__atomic_compare_exchange_n(&PULSE_DESC(first + i)->flags, &off,
								      h_p_avail_flags(0, PULSE_WRAP(first + i)),
								      false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				taken[i] = true;
		}
		for (k = 0; k < pl->spin; k++)
			;
		for (i = 0; i < PULSE_WINDOW; i++) {
			uint16_t on = h_p_avail_flags(0, PULSE_WRAP(first + i));

			if (!taken[i] && !__atomic_compare_exchange_n(&PULSE_DESC(first + i)->flags, &on,
								      h_p_avail_flags(0, !PULSE_WRAP(first + i)),
								      false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				taken[i] = true;
		}
		pl->pulses++;
		/* The device takes chains in order: a taken prefix leaves. */
		while (taken[0]) {
			memmove(taken, taken + 1, sizeof(taken) - sizeof(taken[0]));
			taken[PULSE_WINDOW - 1] = false;
			first++;
			pl->taken++;
			j = first + PULSE_WINDOW - 1;
			PULSE_DESC(j)->addr = h_buf(d, 1, j);
			PULSE_DESC(j)->len = d->hdr_len + 64;
			PULSE_DESC(j)->id = j % v->num;
			__atomic_store_n(&PULSE_DESC(j)->flags, h_p_avail_flags(0, !PULSE_WRAP(j)),
					 __ATOMIC_RELEASE);
		}
		if (!(pl->pulses % 64)) {
			h_kick(d, 1);
			if (h_now_ns() > pl->until)
				pl->stop = true;
		}
		for (k = 0; k < 200; k++)
			;
	}
#undef PULSE_DESC
#undef PULSE_WRAP
	return NULL;
}

static int pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

/* CPU time of this process's thread named `comm`, in clock ticks; 0 if
 * there is none. */
static unsigned long long thread_ticks(const char *comm)
{
	DIR *dir = opendir("/proc/self/task");
	unsigned long long ticks = 0;
	struct dirent *e;

	if (!dir)
		return 0;
	while ((e = readdir(dir))) {
		char path[300], buf[512], *p;
		unsigned long long ut, st;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f) && strstr(buf, comm) && (p = strrchr(buf, ')')) &&
		    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
			ticks = ut + st;
		fclose(f);
	}
	closedir(dir);
	return ticks;
}

/* One device, pulses `spin` loop turns long for up to 3 s: how long
 * GET_VRING_BASE on TX waits, in ns. */
static uint64_t pulse_case(struct __test_metadata *_metadata, unsigned int spin)
{
	struct vhost_vring_state t = { .index = 1, .num = 1000 }, s = { .index = 1 };
	int ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct pulser pl = { 0 };
	struct h_dev d;
	unsigned long long ticks;
	uint64_t t0, took;
	unsigned int i;

	/* The workers are made at SET_OWNER, with this thread's CPU mask. */
	if (pin_to(ncpu - 1) || h_setup(&d, &popts) || pin_to(0) ||
	    h_ioctl(d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &t)) {
		TH_LOG("setup failed");
		return ~0ULL;
	}
	for (i = 0; i < d.vq[1].num; i++) {
		uint8_t *p = h_ptr(&d, h_buf(&d, 1, i));

		memset(p, 0, d.hdr_len);
		h_frame(p + d.hdr_len, i, 64);
	}
	pl.d = &d;
	pl.spin = spin;
	pl.until = h_now_ns() + 3000ULL * 1000 * 1000;
	if (pthread_create(&pl.thr, NULL, pulse_fn, &pl)) {
		h_teardown(&d);
		return ~0ULL;
	}
	h_kick(&d, 1);
	/* The device's worker ("vhost-net-rs"), or with workers=2 its TX
	 * worker ("vhost-net-rs-tx"). */
	ticks = thread_ticks("(vhost-net-rs)") + thread_ticks("(vhost-net-rs-tx)");
	usleep(300 * 1000);
	ticks = thread_ticks("(vhost-net-rs)") + thread_ticks("(vhost-net-rs-tx)") - ticks;
	t0 = h_now_ns();
	if (h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s))
		TH_LOG("GET_VRING_BASE failed");
	took = h_now_ns() - t0;
	pl.stop = true;
	pthread_join(pl.thr, NULL);
	TH_LOG("pulses of %u turns: GET_VRING_BASE took %llu ms; %lu pulses, %lu taken by the device; "
	       "TX worker busy %llu%% before",
	       spin, (unsigned long long)(took / 1000000), pl.pulses, pl.taken,
	       ticks * 100 / (30 * sysconf(_SC_CLK_TCK) / 100));
	h_teardown(&d);
	return took;
}

TEST(i33_busy_poll_pulses_do_not_hold_the_queue)
{
	static const unsigned int spins[] = { 2, 30, 300, 3000 };
	unsigned int i;

	SKIP_ON_C();
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "needs two CPUs");
	/* Which pulse length the device's look and pop fall on either side of
	 * depends on the machine: several. */
	for (i = 0; i < sizeof(spins) / sizeof(spins[0]); i++)
		EXPECT_GT(1000ULL * 1000 * 1000, pulse_case(_metadata, spins[i]))
			TH_LOG("the worker held the queue through the guest's pulses of %u turns", spins[i]);
}

TEST_HARNESS_MAIN
