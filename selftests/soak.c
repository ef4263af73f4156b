// SPDX-License-Identifier: GPL-2.0
/*
 * soak: a sustained bidirectional flood through one device for a bounded
 * time. Every payload and sequence number is checked in both directions;
 * at the end the counters must add up and kernel memory must be back.
 *
 *   soak MINUTES      (TAP output; `make soak MINUTES=N` runs it in the VM)
 */
#define VNR_NO_PRECONDITIONS /* a tool: it checks its own devices */
#include "harness.h"
#include <pthread.h>

static struct h_dev d;
static uint64_t deadline;
static uint64_t tx_ok, rx_ok;
static const char *tx_err, *rx_err;

static void *tx_thread(void *arg)
{
	struct h_vq *v = &d.vq[1];
	uint8_t buf[2048];
	uint32_t seq = 0, got = 0;

	(void)arg;
	while (h_now_ns() < deadline && !tx_err) {
		uint32_t burst = 0;

		while (seq - got < 32) {
			uint16_t head = v->avail_idx % v->num;
			uint8_t *p = h_ptr(&d, h_buf(&d, 1, head));
			size_t len = 60 + seq % 1400;

			memset(p, 0, d.hdr_len);
			h_frame(p + d.hdr_len, seq, len);
			v->vr.desc[head] = (struct vring_desc){ h_buf(&d, 1, head), d.hdr_len + len, 0, 0 };
			h_publish(&d, 1, head);
			seq++;
			burst++;
		}
		h_kick(&d, 1);
		while (got < seq) {
			struct pollfd pf = { .fd = d.pkt, .events = POLLIN };
			ssize_t n;

			if (poll(&pf, 1, 5000) != 1) {
				tx_err = "TX frame lost";
				return NULL;
			}
			n = recv(d.pkt, buf, sizeof(buf), 0);
			if (h_check_frame(buf, n, 60 + got % 1400) != got) {
				tx_err = "TX frame corrupt or out of order";
				return NULL;
			}
			got++;
		}
		if (h_wait_used(&d, 1, (uint16_t)(v->avail_idx - v->used_seen), 5000)) {
			tx_err = "TX used ring stalled";
			return NULL;
		}
		while (h_used_pending(&d, 1))
			h_take_used(&d, 1);
	}
	tx_ok = got;
	return NULL;
}

static void *rx_thread(void *arg)
{
	struct h_vq *v = &d.vq[0];
	uint8_t frame[2048];
	uint32_t seq = 0, got = 0, i;

	(void)arg;
	for (i = 0; i < v->num; i++) {
		uint16_t head = v->avail_idx % v->num;

		v->vr.desc[head] = (struct vring_desc){ h_buf(&d, 0, head), v->buf_size, VRING_DESC_F_WRITE, 0 };
		h_publish(&d, 0, head);
	}
	h_kick(&d, 0);
	while (h_now_ns() < deadline && !rx_err) {
		while (seq - got < 32) {
			size_t len = 60 + seq % 1400;

			h_frame(frame, seq, len);
			if (send(d.pkt, frame, len, 0) != (ssize_t)len) {
				rx_err = "send failed";
				return NULL;
			}
			seq++;
		}
		while (got < seq) {
			struct vring_used_elem e;
			uint8_t *p;

			if (h_wait_used(&d, 0, 1, 5000)) {
				rx_err = "RX frame lost";
				return NULL;
			}
			e = h_take_used(&d, 0);
			p = h_ptr(&d, h_buf(&d, 0, e.id % v->num));
			if (h_check_frame(p + d.hdr_len, e.len - d.hdr_len, 60 + got % 1400) != got) {
				rx_err = "RX frame corrupt or out of order";
				return NULL;
			}
			got++;
			{
				uint16_t head = v->avail_idx % v->num;

				v->vr.desc[head] = (struct vring_desc){ h_buf(&d, 0, head), v->buf_size,
									VRING_DESC_F_WRITE, 0 };
				h_publish(&d, 0, head);
				h_kick(&d, 0);
			}
		}
	}
	rx_ok = got;
	return NULL;
}

int main(int argc, char **argv)
{
	struct h_opts o = { .num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = false,
			    .version_1 = true, .rx_buf = 2048, .tap_offload = -1 };
	double minutes = argc > 1 ? atof(argv[1]) : 1;
	pthread_t t[2];
	long long s0, s1;
	int fails = 0, r, fd;

	printf("TAP version 13\n1..3\n");
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd >= 0 && write(fd, "3", 1) < 0)
		perror("drop_caches");
	s0 = h_slab_kb();
	r = h_setup(&d, &o);
	if (r) {
		printf("not ok 1 setup # %s\n", strerror(-r));
		return 1;
	}
	deadline = h_now_ns() + (uint64_t)(minutes * 60e9);
	pthread_create(&t[0], NULL, tx_thread, NULL);
	pthread_create(&t[1], NULL, rx_thread, NULL);
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	printf("%s 1 soak_tx_every_payload_checked # %llu frames%s%s\n", tx_err ? "not ok" : "ok",
	       (unsigned long long)tx_ok, tx_err ? ": " : "", tx_err ? tx_err : "");
	printf("%s 2 soak_rx_every_payload_checked # %llu frames%s%s\n", rx_err ? "not ok" : "ok",
	       (unsigned long long)rx_ok, rx_err ? ": " : "", rx_err ? rx_err : "");
	fails += !!tx_err + !!rx_err;
	h_teardown(&d);
	if (fd >= 0 && write(fd, "3", 1) < 0)
		perror("drop_caches");
	usleep(500 * 1000);
	s1 = h_slab_kb();
	printf("%s 3 soak_resources_stable # slab %lld -> %lld kB\n", s1 - s0 < 1024 ? "ok" : "not ok", s0, s1);
	fails += s1 - s0 >= 1024;
	return fails ? 1 : 0;
}
