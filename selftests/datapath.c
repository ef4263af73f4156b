// SPDX-License-Identifier: GPL-2.0
/*
 * datapath: packets through /dev/vhost-net-rs, driven by harness.h.
 *
 * Guest TX: the test writes frames into the TX ring, kicks, and reads them
 * off an AF_PACKET socket on the tap. Guest RX: the test sends frames into
 * the tap and reads them out of the RX ring. Every payload is checked byte
 * for byte, and sequence numbers catch loss, duplication and reordering.
 * Set VNR_DEV=/dev/vhost-net to run the same cases on the C driver.
 *
 * Built with -DVNR_PACKED (datapath_packed), every case runs on packed
 * rings (VIRTIO_F_RING_PACKED): the harness turns the chains the cases
 * write into packed descriptors. The C driver has no packed ring, so there
 * the whole program skips; the few cases made of split-ring internals skip
 * on packed rings, saying why.
 *
 * Built with -DVNR_IN_ORDER (datapath_in_order), every case runs on split
 * rings with VIRTIO_F_IN_ORDER: the device may return a run of buffers
 * with one used element, and the harness's driver takes them as an
 * in-order driver does (h_take_in_order), checking that each element sits
 * in the slot of its run's first buffer. On both drivers: the C vhost_net
 * offers IN_ORDER since 6.17 (the program skips where it does not).
 */
#include "harness.h"
#include <sys/uio.h>
#include "kselftest_harness.h"

#ifdef VNR_PACKED
#define PACKED	true

/* After h_preconditions (same file, defined earlier): root and a device. */
__attribute__((constructor)) static void packed_preconditions(void)
{
	if (h_on_c_driver()) {
		printf("TAP version 13\n1..0 # SKIP %s: the C vhost_net has no packed ring\n",
		       h_dev_path());
		exit(4);
	}
}
#else
#define PACKED	false
#endif

#ifdef VNR_IN_ORDER
#define IN_ORDER	true

__attribute__((constructor)) static void in_order_preconditions(void)
{
	uint64_t features = 0;
	int fd = open(h_dev_path(), O_RDWR);

	if (fd >= 0 && ioctl(fd, VHOST_GET_FEATURES, &features) == 0 &&
	    !(features & (1ULL << VIRTIO_F_IN_ORDER))) {
		printf("TAP version 13\n1..0 # SKIP %s does not offer VIRTIO_F_IN_ORDER\n", h_dev_path());
		exit(4);
	}
	if (fd >= 0)
		close(fd);
}
#else
#define IN_ORDER	false
#endif

/* TCG, and more so the debug kernel, are slow: the harness's 30 s per test
 * would kill honest runs. A hung test still fails, just later. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

#define WAIT_MS 10000

/* Posts buffers, then reads `count` frames of `len` bytes (seq 0..count-1)
 * that were sent before any buffer existed. */
static int run_rx_posted(struct __test_metadata *_metadata, struct h_dev *d, uint32_t count, size_t len)
{
	uint32_t got;

	h_rx_fill(d, d->vq[0].num);
	for (got = 0; got < count; got++) {
		struct vring_used_elem e;
		uint8_t *hdr;

		if (h_wait_used(d, 0, 1, WAIT_MS)) {
			TH_LOG("rx: frame %u never arrived after buffers were posted", got);
			return -1;
		}
		e = h_take_used(d, 0);
		hdr = h_ptr(d, h_buf(d, 0, e.id % d->vq[0].num));
		if (h_check_frame(hdr + d->hdr_len, e.len - d->hdr_len, len) != got) {
			TH_LOG("rx: frame %u corrupt or out of order", got);
			return -1;
		}
	}
	return 0;
}

static const struct h_opts base_opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1, .packed = PACKED, .in_order = IN_ORDER,
};

TEST(tx_single)
{
	struct h_dev d;
	struct h_opts o = base_opts;

	ASSERT_EQ(0, h_setup(&d, &o));
	EXPECT_EQ(0, h_run_tx(&d, 1, 60, 0));
	h_teardown(&d);
}

TEST(rx_single)
{
	struct h_dev d;
	struct h_opts o = base_opts;

	ASSERT_EQ(0, h_setup(&d, &o));
	EXPECT_EQ(0, h_run_rx(&d, 1, 60));
	h_teardown(&d);
}

TEST(bulk_100k_each_way)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	/* The in-order build has datapath's own bulk run to lean on. */
	int n = getenv("VNR_BULK") ? atoi(getenv("VNR_BULK")) : IN_ORDER ? 20000 : 100000;

	ASSERT_EQ(0, h_setup(&d, &o));
	EXPECT_EQ(0, h_run_tx(&d, n, 128, 0));
	/* With IN_ORDER both drivers return TX batches as one used element
	 * (so the harness's reading of such runs is exercised too). */
	if (IN_ORDER)
		EXPECT_LT(0, d.vq[1].io_skipped) TH_LOG("no TX buffer came back in a run");
	EXPECT_EQ(0, h_run_rx(&d, n, 128));
	h_teardown(&d);
}

TEST(index_wraps_past_65535)
{
	struct h_dev d;
	struct h_opts o = base_opts;

	o.base = 65500;
	o.num = 64;
	ASSERT_EQ(0, h_setup(&d, &o));
	EXPECT_EQ(0, h_run_tx(&d, 300, 100, 0));
	EXPECT_EQ(0, h_run_rx(&d, 300, 100));
	h_teardown(&d);
}

TEST(every_feature_combination)
{
	int combo, fails = 0;

	for (combo = 0; combo < 32; combo++) {
		struct h_dev d;
		struct h_opts o = { .num = 128, .tap_offload = -1, .packed = PACKED, .in_order = IN_ORDER };
		int r;

		o.event_idx = combo & 1;
		o.indirect = combo & 2;
		o.mrg_rxbuf = combo & 4;
		o.version_1 = combo & 8;
		o.vhost_hdr = combo & 16;
		/* Small RX buffers force merging when mergeable is on. */
		o.rx_buf = o.mrg_rxbuf ? 512 : 2048;
		r = h_setup(&d, &o);
		if (!r)
			r = h_run_tx(&d, 150, 700, o.indirect ? combo % 2 : 0);
		if (!r)
			r = h_run_rx(&d, 150, 1400);
		if (r) {
			TH_LOG("combo %#x (event_idx %d indirect %d mrg %d v1 %d vhost_hdr %d) failed: %d",
			       combo, o.event_idx, o.indirect, o.mrg_rxbuf, o.version_1, o.vhost_hdr, r);
			fails++;
		}
		h_teardown(&d);
	}
	EXPECT_EQ(0, fails);
}

TEST(stop_and_restart_mid_stream)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	struct vhost_vring_state s = { .index = 1 };
	struct vhost_vring_file b = { .index = 1, .fd = -1 };
	uint8_t buf[2048];
	ssize_t n;

	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(0, h_run_tx(&d, 100, 80, 0));
	/* QEMU's stop: detach, read the base. */
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
	/* Every frame posted was used and taken: the base is where both are. */
	EXPECT_EQ(h_vq_base(&d, 1), s.num);
	/* A frame posted while stopped must not go out... */
	h_tx_post(&d, d.vq[1].avail_idx, 100, 80, 0);
	h_kick(&d, 1);
	EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, buf, sizeof(buf), 300));
	/* ...and goes out exactly once after the restart. */
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
	b.fd = d.tap;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	n = h_pkt_recv(&d, buf, sizeof(buf), WAIT_MS);
	EXPECT_EQ(100, h_check_frame(buf, n, 80));
	EXPECT_EQ(-ETIMEDOUT, h_pkt_recv(&d, buf, sizeof(buf), 300));
	h_teardown(&d);
}

TEST(backend_detach_stops_traffic)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	struct vhost_vring_file b = { .index = 0, .fd = -1 };
	uint8_t frame[128];

	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(0, h_run_rx(&d, 10, 100));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	h_frame(frame, 1, 100);
	ASSERT_EQ(100, send(d.pkt, frame, 100, 0));
	usleep(300 * 1000);
	EXPECT_EQ(0, h_used_pending(&d, 0));
	h_teardown(&d);
}

/* RX with no buffers posted must wait for the guest: no drop, no spin. */
TEST(rx_without_buffers_waits)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	uint8_t frame[128];
	uint64_t w0, w1;
	int i;

	ASSERT_EQ(0, h_setup(&d, &o));
	w0 = h_fdinfo_u64(&d, "vq0:", "wakeups=");
	for (i = 0; i < 5; i++) {
		h_frame(frame, i, 100);
		ASSERT_EQ(100, send(d.pkt, frame, 100, 0));
	}
	usleep(500 * 1000);
	w1 = h_fdinfo_u64(&d, "vq0:", "wakeups=");
	/* The counters are vhost-net-rs's own (fdinfo); on C only the
	 * delivery below is checked. */
	if (!h_on_c_driver()) {
		EXPECT_EQ(0, h_fdinfo_u64(&d, "vq0:", "drops="));
		/* One wakeup per arriving packet at most, not a busy loop. */
		EXPECT_LE(w1 - w0, 20) TH_LOG("%llu wakeups while waiting", (unsigned long long)(w1 - w0));
	}
	/* The guest posts buffers: all five arrive, in order. */
	EXPECT_EQ(0, run_rx_posted(_metadata, &d, 5, 100));
	h_teardown(&d);
}

TEST(backend_must_be_a_tap)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	struct vhost_vring_file b = { .index = 1 };
	int p[2], u[2];

	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(0, pipe(p));
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_DGRAM, 0, u));
	b.fd = p[0];
	EXPECT_EQ(-ENOTSOCK, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	b.fd = u[0];
	EXPECT_EQ(-ENOTSOCK, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	b.fd = d.vq[0].call;
	EXPECT_EQ(-ENOTSOCK, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	/* The C driver also takes AF_PACKET raw sockets; vhost-net-rs only
	 * takes taps and macvtaps (see README, "Differences"). */
	b.fd = d.pkt;
	EXPECT_EQ(h_on_c_driver() ? 0 : -ENOTSOCK, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	b.fd = 12345;	/* not open */
	EXPECT_EQ(-ENOTSOCK, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	/* The real tap still works after all that. */
	b.fd = d.tap;
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	EXPECT_EQ(0, h_run_tx(&d, 10, 64, 0));
	close(p[0]); close(p[1]); close(u[0]); close(u[1]);
	h_teardown(&d);
}

/* Malformed TX rings: each must fire the error eventfd, and the device must
 * stay closable. `bad` writes the malformed chain at head 0. */
static void bad_ring(struct __test_metadata *_metadata, void (*bad)(struct h_dev *d))
{
	struct h_dev d;
	struct h_opts o = base_opts;

	o.num = 8;
	ASSERT_EQ(0, h_setup(&d, &o));
	bad(&d);
	h_kick(&d, 1);
	EXPECT_TRUE(h_fired(d.vq[1].err, WAIT_MS));
	h_teardown(&d);
}

static void bad_loop(struct h_dev *d)
{
	struct vring_desc *t = d->vq[1].vr.desc;

	t[0] = (struct vring_desc){ h_buf(d, 1, 0), 64, VRING_DESC_F_NEXT, 1 };
	t[1] = (struct vring_desc){ h_buf(d, 1, 1), 64, VRING_DESC_F_NEXT, 0 };
	h_publish(d, 1, 0);
}

static void bad_nested_indirect(struct h_dev *d)
{
	struct vring_desc *it = h_ptr(d, h_buf(d, 1, 4));

	it[0] = (struct vring_desc){ h_buf(d, 1, 4), 32, VRING_DESC_F_INDIRECT, 0 };
	d->vq[1].vr.desc[0] = (struct vring_desc){ h_gpa(d, it), 16, VRING_DESC_F_INDIRECT, 0 };
	h_publish(d, 1, 0);
}

static void bad_address(struct h_dev *d)
{
	d->vq[1].vr.desc[0] = (struct vring_desc){ H_MEM_SIZE + 4096, 64, 0, 0 };
	h_publish(d, 1, 0);
}

static void bad_length_overflow(struct h_dev *d)
{
	struct vring_desc *t = d->vq[1].vr.desc;

	t[0] = (struct vring_desc){ 0, 0xffffffffu, VRING_DESC_F_NEXT, 1 };
	t[1] = (struct vring_desc){ 0, 0xffffffffu, 0, 0 };
	h_publish(d, 1, 0);
}

static void bad_avail_jump(struct h_dev *d)
{
	d->vq[1].vr.desc[0] = (struct vring_desc){ h_buf(d, 1, 0), 64, 0, 0 };
	d->vq[1].vr.avail->idx = d->vq[1].avail_idx + 9;	/* num is 8 */
}

/* On a packed ring the loop becomes a chain of num descriptors that all
 * have NEXT (see h_publish), one the device must refuse the same way. */
TEST(malformed_descriptor_loop) { bad_ring(_metadata, bad_loop); }
TEST(malformed_nested_indirect)
{
	if (PACKED)
		SKIP(return, "packed: INDIRECT inside a table is reserved (virtio 1.1 2.8.19), not an error");
	bad_ring(_metadata, bad_nested_indirect);
}
TEST(malformed_address_outside_regions) { bad_ring(_metadata, bad_address); }
TEST(malformed_length_overflow) { bad_ring(_metadata, bad_length_overflow); }
TEST(malformed_avail_jump)
{
	if (PACKED)
		SKIP(return, "packed: no avail index to jump (packed.c has the packed ring's malformed cases)");
	bad_ring(_metadata, bad_avail_jump);
}

/* 64 KB GSO frames (see harness.h). Whether a virtio header describes our GSO frame. */
static bool gso_hdr_ok(struct __test_metadata *_metadata, const void *p, const char *what)
{
	struct virtio_net_hdr h;

	memcpy(&h, p, sizeof(h));
	if (h.gso_type == VIRTIO_NET_HDR_GSO_TCPV4 && h.gso_size == H_GSO_MSS &&
	    (h.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM))
		return true;
	TH_LOG("%s: header lost its GSO: flags %#x gso_type %u gso_size %u", what, h.flags,
	       h.gso_type, h.gso_size);
	return false;
}

/* Guest TX of `count` 64 KB GSO frames, one at a time. split: the header in
 * its own descriptor and the frame over three more of uneven sizes. The
 * chains go into the table in ring order, as an in-order driver puts them
 * (the C driver then takes heads from its own count, not the avail ring). */
static int gso_tx(struct __test_metadata *_metadata, struct h_dev *d, int s, uint32_t count,
		  bool split)
{
	static uint8_t want[H_GSO_LEN], got[H_GSO_LEN + 64];
	struct h_vq *v = &d->vq[1];
	uint64_t buf = h_buf(d, 1, 0);
	uint8_t *p = h_ptr(d, buf);
	uint32_t seq, hl = d->hdr_len;
	uint16_t head = 0;

	for (seq = 0; seq < count; seq++) {
		struct vring_desc *t = v->vr.desc;
		uint16_t at[4], k;
		ssize_t n;

		for (k = 0; k < 4; k++)
			at[k] = (head + k) % v->num;
		memset(p, 0, hl);
		memcpy(p, &h_gso_hdr, sizeof(h_gso_hdr));
		h_gso_frame(p + hl, H_GSO_LEN, seq);
		if (split) {
			t[at[0]] = (struct vring_desc){ buf, hl, VRING_DESC_F_NEXT, at[1] };
			t[at[1]] = (struct vring_desc){ buf + hl, 1000, VRING_DESC_F_NEXT, at[2] };
			t[at[2]] = (struct vring_desc){ buf + hl + 1000, 30000, VRING_DESC_F_NEXT, at[3] };
			t[at[3]] = (struct vring_desc){ buf + hl + 31000, H_GSO_LEN - 31000, 0, 0 };
		} else {
			t[at[0]] = (struct vring_desc){ buf, hl + H_GSO_LEN, 0, 0 };
		}
		h_publish(d, 1, at[0]);
		head = at[split ? 3 : 0] + 1;
		h_kick(d, 1);
		n = -ETIMEDOUT;
		{
			struct pollfd pf = { .fd = s, .events = POLLIN };

			while ((n = recv(s, got, sizeof(got), MSG_TRUNC)) < 0 && errno == EAGAIN)
				if (poll(&pf, 1, WAIT_MS) != 1)
					break;
		}
		if (n != (ssize_t)(sizeof(struct virtio_net_hdr) + H_GSO_LEN)) {
			TH_LOG("gso tx: frame %u: got %zd bytes on the tap, want %zu", seq, n,
			       sizeof(struct virtio_net_hdr) + H_GSO_LEN);
			return -1;
		}
		if (!gso_hdr_ok(_metadata, got, "gso tx"))
			return -1;
		h_gso_frame(want, H_GSO_LEN, seq);
		if (memcmp(got + sizeof(struct virtio_net_hdr), want, H_GSO_LEN)) {
			TH_LOG("gso tx: frame %u corrupt", seq);
			return -1;
		}
		if (h_wait_used(d, 1, 1, WAIT_MS))
			return -1;
		h_take_used(d, 1);
	}
	return 0;
}

/* Guest RX of `count` 64 KB GSO frames sent into the tap, read back from the
 * RX ring (merged over several buffers if mergeable is on). */
static int gso_rx(struct __test_metadata *_metadata, struct h_dev *d, int s, uint32_t count)
{
	static uint8_t frame[H_GSO_LEN], got[H_GSO_LEN + 64];
	struct h_vq *v = &d->vq[0];
	uint32_t seq;

	h_rx_fill(d, v->num);
	for (seq = 0; seq < count; seq++) {
		struct iovec io[2] = { { (void *)&h_gso_hdr, sizeof(h_gso_hdr) }, { frame, H_GSO_LEN } };
		struct msghdr mh = { .msg_iov = io, .msg_iovlen = 2 };
		uint16_t nb;
		ssize_t off;

		h_gso_frame(frame, H_GSO_LEN, seq);
		if (sendmsg(s, &mh, 0) != (ssize_t)(sizeof(h_gso_hdr) + H_GSO_LEN)) {
			TH_LOG("gso rx: sendmsg: %s", strerror(errno));
			return -1;
		}
		off = h_rx_take(d, got, sizeof(got), &nb);
		if (off < 0) {
			TH_LOG("gso rx: frame %u not received (drops %llu)", seq,
			       (unsigned long long)h_fdinfo_u64(d, "vq0:", "drops="));
			return -1;
		}
		if (off != d->hdr_len + H_GSO_LEN) {
			TH_LOG("gso rx: frame %u: %zd bytes in %u buffers, want %u", seq, off, nb,
			       d->hdr_len + H_GSO_LEN);
			return -1;
		}
		if (!gso_hdr_ok(_metadata, got, "gso rx"))
			return -1;
		if (memcmp(got + d->hdr_len, frame, H_GSO_LEN)) {
			TH_LOG("gso rx: frame %u corrupt", seq);
			return -1;
		}
		h_rx_fill(d, nb);
	}
	return 0;
}

/* Both directions, for one layout of guest buffers. */
static void gso_case(struct __test_metadata *_metadata, bool mrg, bool v1, unsigned int num,
		     uint32_t rx_buf, bool split)
{
	struct h_dev d;
	struct h_opts o = { .num = num, .event_idx = true, .indirect = true, .mrg_rxbuf = mrg,
			    .version_1 = v1, .rx_buf = rx_buf, .tx_buf = H_GSO_LEN + 4096,
			    .tap_offload = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6, .packed = PACKED,
			    .in_order = IN_ORDER };
	int s;

	ASSERT_EQ(0, h_setup(&d, &o));
	s = h_gso_sock(&d);
	ASSERT_LE(0, s) TH_LOG("gso socket: %s", strerror(-s));
	EXPECT_EQ(0, gso_tx(_metadata, &d, s, 20, split));
	EXPECT_EQ(0, gso_rx(_metadata, &d, s, 20));
	if (h_fdinfo_u64(&d, "vq0:", "drops=") != ~0ULL)	/* the C driver has no counters */
		EXPECT_EQ(0, h_fdinfo_u64(&d, "vq0:", "drops="));
	close(s);
	h_teardown(&d);
}

/* Mergeable buffers of 2 KB: 33 of them per frame. */
TEST(gso_64k_mergeable) { gso_case(_metadata, true, true, 256, 2048, false); }
/* 512-byte buffers: 129 per frame, more than one batch of heads. */
TEST(gso_64k_mergeable_small_buffers) { gso_case(_metadata, true, false, 256, 512, true); }
/* No mergeable buffers: the guest posts 64 KB ones ("big packets"), with the
 * 10-byte legacy header. */
TEST(gso_64k_big_buffers) { gso_case(_metadata, false, false, 16, H_GSO_LEN + 64, true); }

/*
 * GSO over UDP tunnels (VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO and
 * HOST_UDP_TUNNEL_GSO, bits 65 and 67, in the second feature word), as
 * QEMU 11.1 negotiates them with a Linux 7.3 vhost: the virtio-net header
 * is struct virtio_net_hdr_v1_hash_tunnel, 24 bytes, in the guest's
 * buffers and on the tap alike (vhost_net_set_features). A device that
 * got the length wrong shifts every frame by 12 bytes, one way or the
 * other. Skips where the device does not offer the bits.
 */
#define TNL_BITS	(1ULL << (VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO - 64) | \
			 1ULL << (VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO - 64))
#define TNL_OFFLOAD	(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_UDP_TUNNEL_GSO | \
			 TUN_F_UDP_TUNNEL_GSO_CSUM)
#define TNL_HDR_LEN	104	/* outer Ethernet, IPv4, UDP, VXLAN; inner Ethernet, IPv4, TCP */
#define TNL_MSS		1000

static bool tunnel_offered(void)
{
	uint64_t arr[3] = { 2, 0, 0 };
	int fd = open(h_dev_path(), O_RDWR);
	bool ok;

	if (fd < 0)
		return false;
	ok = ioctl(fd, VHOST_GET_FEATURES_ARRAY, arr) == 0 && (arr[2] & TNL_BITS) == TNL_BITS;
	close(fd);
	return ok;
}

/* Plain frames both ways, of several lengths and both TX layouts. */
static void tunnel_header_case(struct __test_metadata *_metadata, bool vhost_hdr)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	size_t lens[] = { 60, 1000, 1514 };
	unsigned int i;

	if (!tunnel_offered())
		SKIP(return, "%s does not offer UDP-tunnel GSO", h_dev_path());
	o.udp_tunnel = true;
	o.vhost_hdr = vhost_hdr;
	/* A tap without a vnet header takes no offloads. */
	o.tap_offload = vhost_hdr ? -1 : TNL_OFFLOAD;
	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(24, d.hdr_len);
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		EXPECT_EQ(0, h_run_tx(&d, 200, lens[i], 0)) TH_LOG("tx, %zu bytes", lens[i]);
		EXPECT_EQ(0, h_run_tx(&d, 200, lens[i], 1)) TH_LOG("tx split, %zu bytes", lens[i]);
		EXPECT_EQ(0, h_run_rx(&d, 200, lens[i])) TH_LOG("rx, %zu bytes", lens[i]);
	}
	h_teardown(&d);
}

/* The tap adds and strips the header, as with QEMU (TUNSETVNETHDRSZ 24). */
TEST(udp_tunnel_header_on_the_tap) { tunnel_header_case(_metadata, false); }
/* vhost adds and strips it (VHOST_NET_F_VIRTIO_NET_HDR): a tap without one. */
TEST(udp_tunnel_header_by_vhost) { tunnel_header_case(_metadata, true); }

/*
 * VHOST_SET_FEATURES carries one word and clears the second (C's
 * virtio_features_from_u64): the header is 12 bytes again from then on, as
 * a QEMU without the array ioctls would set it.
 */
TEST(udp_tunnel_off_by_one_word_set_features)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	int sz = 12;

	if (!tunnel_offered())
		SKIP(return, "%s does not offer UDP-tunnel GSO", h_dev_path());
	o.udp_tunnel = true;
	o.tap_offload = TNL_OFFLOAD;
	ASSERT_EQ(0, h_setup(&d, &o));
	EXPECT_EQ(0, h_run_tx(&d, 50, 500, 0));
	EXPECT_EQ(0, h_run_rx(&d, 50, 500));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &d.features));
	ASSERT_EQ(0, ioctl(d.tap, TUNSETVNETHDRSZ, &sz));
	ASSERT_EQ(0, ioctl(d.tap, TUNSETOFFLOAD, (unsigned long)(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)));
	d.features_hi = 0;
	d.hdr_len = 12;
	EXPECT_EQ(0, h_run_tx(&d, 50, 500, 0));
	EXPECT_EQ(0, h_run_rx(&d, 50, 500));
	h_teardown(&d);
}

static uint16_t ip_csum(const uint8_t *ip)
{
	uint32_t sum = 0;
	int i;

	for (i = 0; i < 20; i += 2)
		sum += ip[i] << 8 | ip[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return htons(~sum & 0xffff);
}

static void ipv4_hdr(uint8_t *ip, size_t tot, uint8_t proto, const char *addrs)
{
	uint16_t t = htons(tot), c;

	memset(ip, 0, 20);
	ip[0] = 0x45;
	memcpy(ip + 2, &t, 2);
	ip[6] = 0x40;		/* DF */
	ip[8] = 64;
	ip[9] = proto;
	memcpy(ip + 12, addrs, 8);
	c = ip_csum(ip);
	memcpy(ip + 10, &c, 2);
}

/* A TCP/IPv4 segment of `len` bytes in all, in VXLAN over UDP/IPv4, as a
 * guest with tunnel TSO hands it to its NIC for the other side to cut. */
static void tnl_frame(uint8_t *f, size_t len, uint32_t seq)
{
	uint8_t *udp = f + 34, *in = f + 50, *tcp = f + 84;
	uint16_t ulen = htons(len - 34), sport = htons(49152 + seq % 1000), vx = htons(4789);
	uint32_t nseq = htonl(seq);
	size_t i;

	memcpy(f, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00", 14);
	ipv4_hdr(f + 14, len - 14, 17, "\x0a\xd6\x00\x01\x0a\xd6\x00\x02");
	memset(udp, 0, 16);
	memcpy(udp, &sport, 2);
	memcpy(udp + 2, &vx, 2);
	memcpy(udp + 4, &ulen, 2);
	udp[8] = 0x08;		/* VXLAN: VNI valid */
	udp[14] = 42;		/* VNI 42 */
	memcpy(in, "\x02\x00\x00\x00\x01\x02\x02\x00\x00\x00\x01\x01\x08\x00", 14);
	ipv4_hdr(in + 14, len - 64, 6, "\x0a\xd7\x00\x01\x0a\xd7\x00\x02");
	memset(tcp, 0, 20);
	memcpy(tcp, "\x9c\x40\x13\x89", 4);	/* 40000 -> 5001 */
	memcpy(tcp + 4, &nseq, 4);
	tcp[12] = 0x50;
	tcp[13] = 0x18;		/* PSH ACK */
	tcp[14] = 0xff;
	for (i = TNL_HDR_LEN; i < len; i++)
		f[i] = (uint8_t)(seq * 7 + i + (i >> 8));
}

/* Its header: TCPV4 GSO in a UDPv4 tunnel, the inner TCP checksum to fill,
 * and the tunnel offsets tun checks (virtio_net_hdr_tnl_to_skb). */
static struct virtio_net_hdr_v1_hash_tunnel tnl_hdr(uint16_t outer_th, uint16_t inner_nh)
{
	struct virtio_net_hdr_v1_hash_tunnel h = { 0 };

	h.hash_hdr.hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
	h.hash_hdr.hdr.gso_type = VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4;
	h.hash_hdr.hdr.hdr_len = TNL_HDR_LEN;
	h.hash_hdr.hdr.gso_size = TNL_MSS;
	h.hash_hdr.hdr.csum_start = 84;
	h.hash_hdr.hdr.csum_offset = 16;
	h.outer_th_offset = outer_th;
	h.inner_nh_offset = inner_nh;
	return h;
}

/* One guest TX of the tunnelled frame (seq, len) with header `h`; returns
 * the length of what the IPv4 socket `s` saw of it (the frame whole, as
 * the tap took it: unsegmented), -ETIMEDOUT if nothing. The chain is used
 * either way. */
static ssize_t tnl_tx(struct __test_metadata *_metadata, struct h_dev *d, int s, uint32_t seq,
		      size_t len, const struct virtio_net_hdr_v1_hash_tunnel *h, uint8_t *got,
		      size_t cap, int wait_ms)
{
	struct h_vq *v = &d->vq[1];
	uint16_t head = v->avail_idx % v->num;
	uint64_t buf = h_buf(d, 1, head);
	uint8_t *p = h_ptr(d, buf);
	struct pollfd pf = { .fd = s, .events = POLLIN };
	ssize_t n;

	memcpy(p, h, sizeof(*h));
	tnl_frame(p + sizeof(*h), len, seq);
	v->vr.desc[head] = (struct vring_desc){ buf, sizeof(*h) + len, 0, 0 };
	h_publish(d, 1, head);
	h_kick(d, 1);
	while ((n = recv(s, got, cap, MSG_TRUNC)) < 0 && errno == EAGAIN)
		if (poll(&pf, 1, wait_ms) != 1) {
			n = -ETIMEDOUT;
			break;
		}
	if (h_wait_used(d, 1, 1, WAIT_MS)) {
		TH_LOG("tunnel tx: frame %u: chain never used", seq);
		return -EIO;
	}
	h_take_used(d, 1);
	return n;
}

/*
 * Guest TX of tunnelled TCP GSO frames: ones that fit a page (the batched
 * path, vhost_net_build_xdp) and ones that do not (one sendmsg each), seen
 * whole on the tap. Then a frame whose inner network header lies inside the
 * outer UDP header: tun drops it (virtio_net_hdr_tnl_to_skb: inner_nh <
 * outer_th + sizeof(struct udphdr)), on either driver, and the queue goes on.
 */
TEST(udp_tunnel_gso_tx)
{
	static uint8_t want[32768], got[32768 + 64];
	struct virtio_net_hdr_v1_hash_tunnel good = tnl_hdr(34, 64), bad = tnl_hdr(34, 40);
	size_t lens[] = { TNL_HDR_LEN + 2 * TNL_MSS + 300, TNL_HDR_LEN + 20 * TNL_MSS + 300 };
	struct h_dev d;
	struct h_opts o = base_opts;
	uint32_t seq = 0;
	unsigned int i, k;
	ssize_t n;
	int s;

	if (!tunnel_offered())
		SKIP(return, "%s does not offer UDP-tunnel GSO", h_dev_path());
	o.udp_tunnel = true;
	o.tap_offload = TNL_OFFLOAD;
	o.tx_buf = 32768;
	ASSERT_EQ(0, h_setup(&d, &o));
	/* IPv4 frames, no virtio header: AF_PACKET has none for tunnels. */
	s = h_packet_socket(&d, ETH_P_IP, false);
	ASSERT_LE(0, s) TH_LOG("ipv4 socket: %s", strerror(-s));
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (k = 0; k < 20; k++, seq++) {
			n = tnl_tx(_metadata, &d, s, seq, lens[i], &good, got, sizeof(got), WAIT_MS);
			ASSERT_EQ((ssize_t)lens[i], n) TH_LOG("frame %u of %zu bytes", seq, lens[i]);
			tnl_frame(want, lens[i], seq);
			ASSERT_EQ(0, memcmp(got, want, lens[i])) TH_LOG("frame %u corrupt", seq);
		}
		/* Bad offsets: dropped by tun; not seen within a second. */
		n = tnl_tx(_metadata, &d, s, seq++, lens[i], &bad, got, sizeof(got), 1000);
		EXPECT_EQ(-ETIMEDOUT, n) TH_LOG("a tunnel header with bad offsets got through");
		n = tnl_tx(_metadata, &d, s, seq, lens[i], &good, got, sizeof(got), WAIT_MS);
		EXPECT_EQ((ssize_t)lens[i], n) TH_LOG("the frame after a dropped one");
		seq++;
	}
	close(s);
	h_teardown(&d);
}

/*
 * The host's side of tunnelled GSO, for guest RX: a second tap, bridged to
 * d's. A frame written to it with a tunnel header enters the host as a UDP
 * tunnel GSO packet, as from a VXLAN peer, and the bridge forwards it whole
 * to d's tap, whose offloads take it (TUN_F_UDP_TUNNEL_GSO). AF_PACKET has
 * no tunnel header, and the test kernel no VXLAN. The bridge has multicast
 * snooping off: with it on, the bridge joins the snoopers' groups as it
 * comes up and reports them (br_dev_open() and br_multicast_join_snoopers()
 * in net/bridge), frames the guest's RX queue would take before the
 * tunnel's. Returns the injector's fd and names the bridge in `br`, or
 * -errno.
 */
static int tnl_injector(struct h_dev *d, char *br)
{
	struct ifreq ifr = { 0 };
	int fd = open("/dev/net/tun", O_RDWR), sz = sizeof(struct virtio_net_hdr_v1_hash_tunnel), r;
	char cmd[384];

	br[0] = 0;
	if (fd < 0)
		return -errno;
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, IFNAMSIZ, "vnri%d", getpid() % 10000);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 || ioctl(fd, TUNSETVNETHDRSZ, &sz) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	snprintf(cmd, sizeof(cmd), "ip link add vnrb%d type bridge mcast_snooping 0", getpid() % 10000);
	if (system(cmd)) {
		close(fd);
		return -ENODEV;
	}
	snprintf(br, IFNAMSIZ, "vnrb%d", getpid() % 10000);
	snprintf(cmd, sizeof(cmd),
		 "ip link set %s master %s && ip link set %s master %s && "
		 "ip link set %s up && ip link set %s up",
		 ifr.ifr_name, br, d->ifname, br, ifr.ifr_name, br);
	if (h_no_ipv6(br) || h_no_ipv6(ifr.ifr_name) || system(cmd)) {
		close(fd);
		return -EIO;
	}
	return fd;
}

/* Whether an Ethernet frame is IPv4 UDP to the VXLAN port (tnl_frame's). */
static bool is_vxlan(const uint8_t *f, size_t len)
{
	return len >= 38 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 17 &&
	       f[36] == 0x12 && f[37] == 0xb5;
}

/* The first `len` bytes of `p` in hex, for a log line. */
static const char *hex(const uint8_t *p, size_t len)
{
	static char s[2 * 64 + 1];
	size_t i;

	for (i = 0; i < len && i < 64; i++)
		snprintf(s + 2 * i, 3, "%02x", p[i]);
	s[2 * i] = 0;
	return s;
}

/*
 * Guest RX of tunnelled TCP GSO frames: the device hands the guest tun's
 * 24-byte header (tun_vnet_hdr_tnl_from_skb) with the tunnel GSO type and
 * offsets, the frame whole after it, over as many mergeable buffers as it
 * takes. vhost only sets num_buffers in it.
 */
TEST(udp_tunnel_gso_rx)
{
	static uint8_t frame[32768], got[32768 + 64];
	struct virtio_net_hdr_v1_hash_tunnel h = tnl_hdr(34, 64), r;
	size_t lens[] = { TNL_HDR_LEN + 2 * TNL_MSS + 300, TNL_HDR_LEN + 20 * TNL_MSS + 300 };
	struct h_dev d;
	struct h_opts o = base_opts;
	uint32_t seq = 0;
	unsigned int i, k, strays = 0;
	char br[IFNAMSIZ], cmd[64];
	int inj;

	if (!tunnel_offered())
		SKIP(return, "%s does not offer UDP-tunnel GSO", h_dev_path());
	o.udp_tunnel = true;
	o.tap_offload = TNL_OFFLOAD;
	ASSERT_EQ(0, h_setup(&d, &o));
	inj = tnl_injector(&d, br);
	ASSERT_LE(0, inj) TH_LOG("injector tap and bridge: %s", strerror(-inj));
	h_rx_fill(&d, d.vq[0].num);
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (k = 0; k < 20; k++, seq++) {
			struct iovec io[2] = { { &h, sizeof(h) }, { frame, lens[i] } };
			uint16_t nb = 0;
			ssize_t off;

			tnl_frame(frame, lens[i], seq);
			ASSERT_EQ((ssize_t)(sizeof(h) + lens[i]), writev(inj, io, 2))
				TH_LOG("injector write: %s", strerror(errno));
			off = h_rx_take(&d, got, sizeof(got), &nb);
			/* Should the bridge's own traffic still reach the guest
			 * (as the IGMPv3 report for 224.0.0.106 did, on
			 * Debian's kernels, with snooping on): skip what is
			 * not a VXLAN frame, a few at most, and show what it
			 * was. */
			while (off > (ssize_t)sizeof(h) && strays < 8 && !is_vxlan(got + sizeof(h), off - sizeof(h))) {
				strays++;
				TH_LOG("stray frame of %zd bytes skipped: %s", off - (ssize_t)sizeof(h),
				       hex(got + sizeof(h), off - sizeof(h) < 64 ? off - sizeof(h) : 64));
				h_rx_fill(&d, nb);
				off = h_rx_take(&d, got, sizeof(got), &nb);
			}
			ASSERT_EQ((ssize_t)(sizeof(h) + lens[i]), off)
				TH_LOG("frame %u of %zu bytes: %zd in %u buffers", seq, lens[i], off, nb);
			memcpy(&r, got, sizeof(r));
			EXPECT_EQ(VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4,
				  r.hash_hdr.hdr.gso_type);
			EXPECT_EQ(TNL_MSS, r.hash_hdr.hdr.gso_size);
			EXPECT_TRUE(r.hash_hdr.hdr.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM);
			EXPECT_EQ(84, r.hash_hdr.hdr.csum_start);
			EXPECT_EQ(34, r.outer_th_offset);
			EXPECT_EQ(64, r.inner_nh_offset);
			ASSERT_EQ(0, memcmp(got + sizeof(h), frame, lens[i])) TH_LOG("frame %u corrupt", seq);
			h_rx_fill(&d, nb);
		}
	}
	snprintf(cmd, sizeof(cmd), "ip link del %s", br);
	EXPECT_EQ(0, system(cmd));
	close(inj);
	h_teardown(&d);
}

TEST(counters_show_the_traffic)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	char path[64], buf[4096];
	unsigned long long pk;
	ssize_t n;
	char *p;
	int f;

	if (h_on_c_driver())
		SKIP(return, "the counters are vhost-net-rs's fdinfo");
	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(0, h_run_tx(&d, 77, 100, 0));
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", d.fd);
	f = open(path, O_RDONLY);
	ASSERT_LE(0, f);
	n = read(f, buf, sizeof(buf) - 1);
	ASSERT_LT(0, n);
	buf[n] = 0;
	close(f);
	p = strstr(buf, "vq1:");
	ASSERT_NE(NULL, p) TH_LOG("%s", buf);
	p = strstr(p, "packets=");
	ASSERT_NE(NULL, p);
	pk = strtoull(p + 8, NULL, 10);
	EXPECT_EQ(77, pk) TH_LOG("%s", buf);
	h_teardown(&d);
}

/* Keeps the TX ring full of 60-byte frames (which the host stack drops) and
 * counts what the device uses, from its own thread. */
struct tx_pump {
	struct h_dev *d;
	volatile int stop;
	volatile uint64_t used;
	unsigned int bad;
	pthread_t thr;
};

static void *tx_pump_fn(void *arg)
{
	struct tx_pump *p = arg;
	struct h_dev *d = p->d;
	struct h_vq *tx = &d->vq[1];

	while (!p->stop) {
		if (h_used_pending(d, 1) > (uint16_t)(tx->avail_idx - tx->used_seen)) {
			p->bad++;
			break;
		}
		while (h_used_pending(d, 1)) {
			h_take_used(d, 1);
			p->used++;
		}
		while ((uint16_t)(tx->avail_idx - tx->used_seen) < tx->num) {
			uint16_t head = tx->avail_idx % tx->num;

			tx->vr.desc[head] = (struct vring_desc){ h_buf(d, 1, head), d->hdr_len + 60, 0, 0 };
			h_publish(d, 1, head);
		}
		h_kick(d, 1);
		usleep(200);
	}
	return NULL;
}

/*
 * VIRTIO_F_RING_RESET: a guest resets one queue (ethtool -G rx N), and QEMU
 * 7.2 stops and restarts that queue alone (vhost_net_virtqueue_reset and
 * _restart): backend -1, GET_VRING_BASE, then SET_VRING_NUM (a new size:
 * 128 or 256, or on packed rings 200, which is not a power of two),
 * SET_VRING_BASE, SET_VRING_ADDR and the backend again. The other queue
 * must not stop meanwhile, and the reset one must carry traffic after.
 */
TEST(ring_reset_one_queue_while_the_other_runs)
{
	struct h_dev d;
	struct h_opts o = { .num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true,
			    .version_1 = true, .tap_offload = -1, .packed = PACKED, .in_order = IN_ORDER };
	struct tx_pump pump = { 0 };
	__u64 features = 0;
	int round;

	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_FEATURES, &features));
	ASSERT_NE(0, features & (1ULL << VIRTIO_F_RING_RESET)) TH_LOG("RING_RESET is not offered");
	EXPECT_EQ(0, h_run_rx(&d, 100, 200));
	pump.d = &d;
	ASSERT_EQ(0, pthread_create(&pump.thr, NULL, tx_pump_fn, &pump));
	for (round = 0; round < 20; round++) {
		/* A packed ring may take any size, as Linux resizes it. */
		unsigned int num = round % 2 ? (PACKED ? 200 : 128) : 256;
		struct vhost_vring_file b = { .index = 0, .fd = -1 };
		struct vhost_vring_state s = { .index = 0 };
		struct vhost_vring_addr a;
		uint64_t before = pump.used, end;

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BASE, &s));
		/* Every buffer the device took was used, and taken by h_run_rx. */
		EXPECT_EQ(h_vq_base(&d, 0), s.num) TH_LOG("round %d: RX base %#x, used %#x", round, s.num, h_vq_base(&d, 0));
		h_vq_layout(&d, 0, num, 0, 2048);
		s.num = num;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_NUM, &s));
		s.num = h_vq_base(&d, 0);	/* a fresh ring */
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BASE, &s));
		a = h_vring_addr(&d, 0, false);
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
		b.fd = d.tap;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
		EXPECT_EQ(0, h_run_rx(&d, 50, 200)) TH_LOG("round %d: no RX after the reset", round);
		/* TX kept going through the other queue's reset. */
		end = h_now_ns() + 5000000000ULL;
		while (pump.used == before && !pump.bad && h_now_ns() < end)
			usleep(1000);
		EXPECT_NE(before, pump.used) TH_LOG("round %d: TX stalled", round);
	}
	pump.stop = 1;
	pthread_join(pump.thr, NULL);
	EXPECT_EQ(0, pump.bad) TH_LOG("a TX used index ran ahead of the avail index");
	TH_LOG("%llu TX frames used through 20 RX resets", (unsigned long long)pump.used);
	h_teardown(&d);
}

/* Threads of this process (the vhost_task workers are among them). */
static int thread_count(void)
{
	char buf[512];
	int n = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

/*
 * VHOST_SET_FORK_FROM_OWNER 0: the workers are kthreads that adopt the
 * owner's address space, not threads of the owner. Only before SET_OWNER
 * (EBUSY after), only 0 or 1 (EINVAL), read back by GET, and RESET_OWNER
 * returns to the default (1), as in C. Traffic flows both ways on them.
 */
TEST(kthread_workers)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	uint8_t mode = 7;
	int before = thread_count();

	o.kthread_workers = true;
	ASSERT_EQ(0, h_setup(&d, &o));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_FORK_FROM_OWNER, &mode));
	EXPECT_EQ(VHOST_FORK_OWNER_KTHREAD, mode);
	/* No worker among this process's threads. */
	EXPECT_EQ(before, thread_count());
	mode = VHOST_FORK_OWNER_TASK;
	EXPECT_EQ(-EBUSY, h_ioctl(d.fd, VHOST_SET_FORK_FROM_OWNER, &mode));
	EXPECT_EQ(0, h_run_tx(&d, 2000, 100, 0));
	EXPECT_EQ(0, h_run_rx(&d, 2000, 100));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_RESET_OWNER, NULL));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_FORK_FROM_OWNER, &mode));
	EXPECT_EQ(VHOST_FORK_OWNER_TASK, mode);
	mode = 2;
	EXPECT_EQ(-EINVAL, h_ioctl(d.fd, VHOST_SET_FORK_FROM_OWNER, &mode));
	/* Back to vhost_task workers: threads of this process again. */
	ASSERT_EQ(0, h_configure(&d, &o));
	EXPECT_LT(before, thread_count());
	EXPECT_EQ(0, h_run_tx(&d, 100, 100, 0));
	h_teardown(&d);
}

/*
 * VHOST_SET_VRING_BUSYLOOP_TIMEOUT (QEMU's poll-us=): the workers poll the
 * ring (TX) and the tap (RX) for that long before sleeping. It is read back
 * per queue, and traffic both ways is intact with it on, then off again.
 */
TEST(busy_polling_carries_traffic)
{
	struct h_dev d;
	struct h_opts o = base_opts;
	int q;

	ASSERT_EQ(0, h_setup(&d, &o));
	for (q = 0; q < 2; q++) {
		struct vhost_vring_state s = { .index = q, .num = 100 + q };

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s));
	}
	for (q = 0; q < 2; q++) {
		struct vhost_vring_state s = { .index = q };

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_VRING_BUSYLOOP_TIMEOUT, &s));
		EXPECT_EQ(100 + q, s.num);
	}
	EXPECT_EQ(0, h_run_tx(&d, 3000, 100, 0));
	EXPECT_EQ(0, h_run_rx(&d, 3000, 100));
	for (q = 0; q < 2; q++) {
		struct vhost_vring_state s = { .index = q, .num = 0 };

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s));
	}
	EXPECT_EQ(0, h_run_tx(&d, 500, 100, 0));
	EXPECT_EQ(0, h_run_rx(&d, 500, 100));
	h_teardown(&d);
}

TEST_HARNESS_MAIN
