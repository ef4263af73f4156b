// SPDX-License-Identifier: GPL-2.0
/*
 * mqexec: opens the queues of a multiqueue tap and as many vhost devices,
 * then runs a command (QEMU) with them as its open files. It is how the
 * end-to-end tests give QEMU `-netdev tap,queues=N,fds=...,vhostfds=...`:
 * the shell cannot open a tap queue (that takes TUNSETIFF).
 *
 *   mqexec TAP N VHOST_DEV -- COMMAND [ARGS...]
 *
 * Tap queue i is fd 10+i, vhost device i is fd 20+i (N <= 8): the command
 * line says fds=10:11:...,vhostfds=20:21:... The tap must exist with
 * multi_queue (ip tuntap add dev TAP mode tap multi_queue); each queue is
 * opened with IFF_VNET_HDR, as QEMU opens its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/if_tun.h>

#define TAP_FD_BASE 10
#define VHOST_FD_BASE 20
#define MAX_QUEUES 8

static void usage(void)
{
	fprintf(stderr, "usage: mqexec TAP N VHOST_DEV -- COMMAND [ARGS...]\n"
			"  Opens N queues of the multiqueue tap TAP as fds %d.. and N times\n"
			"  VHOST_DEV as fds %d.., then runs COMMAND with them (N <= %d).\n",
		TAP_FD_BASE, VHOST_FD_BASE, MAX_QUEUES);
	exit(2);
}

/* Opens `path` (or a tap queue of `tap`) at exactly fd `at`. */
static void open_at(const char *path, const char *tap, int at)
{
	int fd = open(path, O_RDWR);

	if (fd < 0) {
		fprintf(stderr, "mqexec: open %s: %s\n", path, strerror(errno));
		exit(1);
	}
	if (tap) {
		struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_MULTI_QUEUE };

		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", tap);
		if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
			fprintf(stderr, "mqexec: queue of tap %s: %s (created with multi_queue?)\n", tap,
				strerror(errno));
			exit(1);
		}
	}
	if (fd != at && (dup2(fd, at) < 0 || close(fd) < 0)) {
		fprintf(stderr, "mqexec: dup2 to %d: %s\n", at, strerror(errno));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int queues, i;

	if (argc < 6 || strcmp(argv[4], "--") != 0)
		usage();
	queues = atoi(argv[2]);
	if (queues < 1 || queues > MAX_QUEUES)
		usage();
	for (i = 0; i < queues; i++) {
		open_at("/dev/net/tun", argv[1], TAP_FD_BASE + i);
		open_at(argv[3], NULL, VHOST_FD_BASE + i);
	}
	execvp(argv[5], &argv[5]);
	fprintf(stderr, "mqexec: %s: %s\n", argv[5], strerror(errno));
	return 127;
}
