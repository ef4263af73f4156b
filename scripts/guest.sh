# shellcheck shell=bash
# scripts/guest.sh: boot and drive a small QEMU guest over a tap, on one of
# the network paths. Sourced by the end-to-end tests (selftests/e2e.sh) and
# the ping/iperf comparison (scripts/pingbench), in the test VM or, in host
# mode, directly on a machine with KVM.
#
# Paths:
#   rs       virtio-net on vhost-net-rs   (vhostfd on /dev/vhost-net-rs)
#   c        virtio-net on the C vhost-net (vhostfd on /dev/vhost-net)
#   user     virtio-net in QEMU userspace (vhost=off)
#   e1000    emulated Intel e1000        (QEMU userspace)
#   rtl8139  emulated Realtek 8139       (QEMU userspace)
#
# Guest kernel and initramfs come from scripts/setup ($VNR_CACHE/guest).

G_HOST_IP=${G_HOST_IP:-10.213.0.1}
G_GUEST_IP=${G_GUEST_IP:-10.213.0.2}
G_TAP=${G_TAP:-vnrtap0}
G_KERNEL=${G_KERNEL:-$VNR_CACHE/guest/bzImage}
G_INITRD=${G_INITRD:-$VNR_CACHE/guest/initramfs.cpio.gz}
G_BOOT_TIMEOUT=${G_BOOT_TIMEOUT:-300}
G_PID=
G_LOG=
G_VHOSTFD_DEV=

# KVM inside the test VM is never there; on a real host, use it if it works.
g_accel() {
	if [ -n "${G_ACCEL:-}" ]; then echo "$G_ACCEL"; return; fi
	if [ -w /dev/kvm ] && [ -z "${VNR_IN_VM:-}" ]; then echo kvm; else echo tcg; fi
}

g_tap_up() {
	ip link del "$G_TAP" 2>/dev/null || true
	ip tuntap add dev "$G_TAP" mode tap || return 1
	ip addr add "$G_HOST_IP/24" dev "$G_TAP" || return 1
	ip link set "$G_TAP" up || return 1
}

g_tap_down() {
	ip link del "$G_TAP" 2>/dev/null || true
}

# g_start PATH [extra virtio-net device options]: boots the guest in the
# background; sets G_PID and G_LOG. Does not wait.
g_start() {
	local path=$1 devopts=${2:-} nic netdev vhostfd=
	[ -f "$G_KERNEL" ] && [ -f "$G_INITRD" ] || { echo "guest images missing: run scripts/setup" >&2; return 1; }
	netdev="tap,id=n0,ifname=$G_TAP,script=no,downscript=no"
	case "$path" in
	rs) G_VHOSTFD_DEV=/dev/vhost-net-rs; vhostfd=1 ;;
	c) G_VHOSTFD_DEV=/dev/vhost-net; vhostfd=1 ;;
	user|e1000|rtl8139) G_VHOSTFD_DEV= ;;
	*) echo "unknown path '$path'" >&2; return 1 ;;
	esac
	case "$path" in
	rs|c) netdev+=",vhost=on,vhostforce=on,vhostfd=3"; nic="virtio-net-pci,netdev=n0" ;;
	user) netdev+=",vhost=off"; nic="virtio-net-pci,netdev=n0" ;;
	e1000) nic="e1000,netdev=n0" ;;
	rtl8139) nic="rtl8139,netdev=n0" ;;
	esac
	[ -n "$devopts" ] && nic+=",$devopts"
	G_LOG=$(mktemp /tmp/vnr-guest.XXXXXX)
	local args=(-machine pc -accel "$(g_accel)" -m 192M -smp 1 -nographic -no-reboot
		-serial "file:$G_LOG" -monitor none -display none
		-kernel "$G_KERNEL" -initrd "$G_INITRD"
		-append "console=ttyS0 quiet panic=-1 vnr.ip=$G_GUEST_IP/24"
		-netdev "$netdev" -device "$nic,mac=52:54:00:12:34:56")
	if [ -n "$vhostfd" ]; then
		qemu-system-x86_64 "${args[@]}" 3<>"$G_VHOSTFD_DEV" >"$G_LOG.qemu" 2>&1 &
	else
		qemu-system-x86_64 "${args[@]}" >"$G_LOG.qemu" 2>&1 &
	fi
	G_PID=$!
}

# g_wait: waits until the guest is up and answers ping. Prints the seconds
# it took; fails with QEMU's own message if QEMU died.
g_wait() {
	local t0=$SECONDS
	while [ $((SECONDS - t0)) -lt "$G_BOOT_TIMEOUT" ]; do
		if ! kill -0 "$G_PID" 2>/dev/null; then
			echo "QEMU exited: $(tail -n 5 "$G_LOG.qemu" 2>/dev/null)" >&2
			return 1
		fi
		if grep -q VNR-GUEST-READY "$G_LOG" 2>/dev/null && ping -c 1 -W 1 "$G_GUEST_IP" >/dev/null 2>&1; then
			echo $((SECONDS - t0))
			return 0
		fi
		sleep 1
	done
	echo "guest did not come up in ${G_BOOT_TIMEOUT}s; console: $(tail -n 5 "$G_LOG")" >&2
	return 1
}

g_stop() {
	[ -n "$G_PID" ] || return 0
	kill "$G_PID" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$G_PID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$G_PID" 2>/dev/null
	wait "$G_PID" 2>/dev/null
	G_PID=
	rm -f "$G_LOG" "$G_LOG.qemu"
}

# g_fdinfo: the vhost fd's counters in the running QEMU (fd 3).
g_fdinfo() {
	cat "/proc/$G_PID/fdinfo/3" 2>/dev/null
}

# g_vq_packets Q: packets counted by vhost-net-rs on vq Q (0 = RX, 1 = TX).
g_vq_packets() {
	g_fdinfo | sed -n "s/^vq$1:.* packets=\([0-9]*\).*/\1/p"
}

# g_ping ARGS...: runs ping against the guest; prints
# "transmitted received loss_pct time_ms min avg max mdev" (rtt in ms).
g_ping() {
	local out
	out=$(ping -q "$@" "$G_GUEST_IP" 2>&1)
	echo "$out" | awk '
		/packets transmitted/ {
			tx = $1; rx = $4
			for (i = 1; i <= NF; i++) {
				if ($i ~ /%$/) { loss = $i; sub("%", "", loss) }
				if ($i == "time") { t = $(i + 1); sub("ms", "", t) }
			}
		}
		/^rtt|^round-trip/ { split($4, r, "/"); mn = r[1]; av = r[2]; mx = r[3]; md = r[4] }
		END { if (tx == "") exit 1; printf "%s %s %s %s %s %s %s %s\n", tx, rx, loss, t, mn+0, av+0, mx+0, md+0 }'
}
