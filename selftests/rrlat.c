// SPDX-License-Identifier: GPL-2.0
/*
 * rrlat: request/response latency against the nested guest, in the manner of
 * netperf's TCP_RR (which is not in Debian's main archive, so not in the
 * guest's image).
 *
 *   rrlat ADDR PORT COUNT [SIZE]
 *
 * Connects to the guest's command shell (scripts/mkinitramfs: busybox
 * `nc -ll -p PORT -e /bin/sh`), turns it into an echo with `exec cat`, then
 * does COUNT transactions of SIZE bytes (default 1): write SIZE bytes, read
 * SIZE bytes back, one transaction in flight, TCP_NODELAY on. The echo runs
 * in the guest's user space, as netserver's does, so each transaction is a
 * packet each way through the device, the guest's stack and a wakeup of
 * cat. The first tenth of COUNT (at least 10) warms up and is not counted.
 * Prints one JSON line: transactions per second and the latency
 * percentiles in microseconds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Reads exactly n bytes; fails on EOF or error. */
static int read_all(int fd, char *buf, size_t n)
{
	while (n) {
		ssize_t r = read(fd, buf, n);

		if (r <= 0)
			return -1;
		buf += r;
		n -= r;
	}
	return 0;
}

/* The percentile p (0-100) of the sorted v[0..n), nearest rank. */
static double pct(const double *v, size_t n, double p)
{
	size_t k = (size_t)(p / 100 * n + 0.999999);

	return v[k ? k - 1 : 0];
}

int main(int argc, char **argv)
{
	static const char cmd[] = "echo VNR-RR-READY; exec cat\n";
	static const char ready[] = "VNR-RR-READY\n";
	struct sockaddr_in sa = { .sin_family = AF_INET };
	size_t count, size, warm, i, got = 0;
	char buf[4096], line[64];
	double *lat, t0 = 0, t1, sum = 0;
	struct timeval tmo = { .tv_sec = 20 };
	int fd, one = 1;

	if (argc < 4) {
		fprintf(stderr, "usage: %s ADDR PORT COUNT [SIZE]\n", argv[0]);
		return 2;
	}
	count = strtoul(argv[3], NULL, 0);
	size = argc > 4 ? strtoul(argv[4], NULL, 0) : 1;
	if (!count || !size || size > sizeof(buf) ||
	    inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "rrlat: bad arguments\n");
		return 2;
	}
	sa.sin_port = htons(atoi(argv[2]));
	warm = count / 10 < 10 ? 10 : count / 10;
	lat = calloc(count, sizeof(*lat));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (!lat || fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("rrlat: connect");
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A path that stalls fails the run instead of hanging it. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	if (write(fd, cmd, sizeof(cmd) - 1) != sizeof(cmd) - 1) {
		perror("rrlat: write");
		return 1;
	}
	/* The shell's answer, byte by byte: nothing after it may be eaten. */
	while (got < sizeof(line) - 1 && read(fd, line + got, 1) == 1 && line[got] != '\n')
		got++;
	line[got + 1 < sizeof(line) ? got + 1 : got] = 0;
	if (strncmp(line, ready, sizeof(ready) - 1)) {
		fprintf(stderr, "rrlat: the guest's shell did not answer (%s)\n", line);
		return 1;
	}
	memset(buf, 'r', size);
	for (i = 0; i < warm + count; i++) {
		double a = now_us();

		if (write(fd, buf, size) != (ssize_t)size || read_all(fd, buf, size)) {
			perror("rrlat: transaction");
			return 1;
		}
		if (i == warm)
			t0 = a;
		if (i >= warm)
			lat[i - warm] = now_us() - a;
	}
	t1 = now_us();
	for (i = 0; i < count; i++)
		sum += lat[i];
	qsort(lat, count, sizeof(*lat), cmp);
	printf("{\"n\":%zu,\"size\":%zu,\"trans_per_s\":%.1f,\"mean_us\":%.1f,\"p50_us\":%.1f,"
	       "\"p90_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f}\n",
	       count, size, count / ((t1 - t0) / 1e6), sum / count, pct(lat, count, 50),
	       pct(lat, count, 90), pct(lat, count, 99), lat[count - 1]);
	close(fd);
	return 0;
}
