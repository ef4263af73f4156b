# shellcheck shell=bash
# scripts/guest.sh: boot and drive a small QEMU guest over a tap, on one of
# the network paths. Sourced by the end-to-end tests (selftests/e2e.sh) and
# the ping/iperf comparison (scripts/pingbench), in the test VM or, in host
# mode, directly on a machine with KVM.
#
# Paths:
#   rs       virtio-net on vhost-net-rs   (vhostfd on /dev/vhost-net-rs)
#   c        virtio-net on the C vhost-net (vhostfd on /dev/vhost-net)
#   node     virtio-net on whatever serves /dev/vhost-net, opened by QEMU
#            itself as libvirt and a plain `vhost=on` do (vhost-net-rs
#            with drop_in=1, or the C driver)
#   user     virtio-net in QEMU userspace (vhost=off)
#   e1000    emulated Intel e1000        (QEMU userspace)
#   rtl8139  emulated Realtek 8139       (QEMU userspace)
#
# Settings (environment, read by g_start):
#   G_QUEUES=N    N queue pairs (default 1): g_tap_up makes a multi_queue
#                 tap; rs and c give QEMU N tap queues and N vhost fds
#                 (fds=,vhostfds=, opened by selftests/build/mqexec), node
#                 lets QEMU open them; the guest gets 2 vCPUs.
#   G_TAPDEV=DEV  the guest's backend is this character device (a macvtap's
#                 /dev/tapN) instead of the tap $G_TAP.
#   G_QMP=PATH    QEMU listens for QMP on the unix socket PATH.
#   G_NETDEV_OPTS more options of the vhost paths' tap netdev ("poll-us=50").
#   G_QEMU_ARGS   more QEMU arguments, split at spaces ("-incoming unix:X",
#                 "-only-migratable").
#   G_MEM=SIZE    guest RAM, as QEMU's -m takes it (default 192M).
#   G_MACHINE=M   QEMU's machine type (default pc; a versioned one such as
#                 pc-i440fx-7.2 for a migration between QEMU versions).
#   G_QEMU=CMD    the QEMU to run, a command split at spaces (default
#                 qemu-system-x86_64, Debian 12's 7.2): "scripts/debian-qemu
#                 run ROOT" runs a Debian 13 system's QEMU 10 or 11.
#   G_IOMMU=1     the guest sits behind a virtual IOMMU: a q35 machine with
#                 intel-iommu (device-iotlb=on), the NIC with
#                 iommu_platform=on,ats=on, and intel_iommu=on in the guest,
#                 so that every address the guest gives the device is an
#                 I/O virtual address translated through the device IOTLB.
#
# Guest kernel and initramfs come from scripts/setup ($VNR_CACHE/guest).

G_HOST_IP=${G_HOST_IP:-10.213.0.1}
G_GUEST_IP=${G_GUEST_IP:-10.213.0.2}
G_TAP=${G_TAP:-vnrtap0}
G_MAC=${G_MAC:-52:54:00:12:34:56}
G_KERNEL=${G_KERNEL:-$VNR_CACHE/guest/bzImage}
G_INITRD=${G_INITRD:-$VNR_CACHE/guest/initramfs.cpio.gz}
G_BOOT_TIMEOUT=${G_BOOT_TIMEOUT:-300}
G_PID=
G_LOG=
G_EXIT=

# g_accel: the nested guests' accelerator: G_ACCEL if set (kvm or tcg),
# else KVM where it works, TCG where it does not. The test kernel has KVM
# built in (config/test-kernel.config), so inside the test VM /dev/kvm
# runs guests on the VM's nested SVM; a distribution kernel in the VM may
# have no /dev/kvm, or one that runs a BIOS but hangs in a kernel (as a
# nested software hypervisor can). A probe decides: the guest kernel boots
# under KVM without an initramfs, and KVM counts as working if it got as
# far as its panic for want of a root filesystem within 90 s (QEMU then
# exits, -no-reboot, so a working KVM answers in seconds; the margin is for
# a loaded host, where a working KVM boots slowly). In the
# test VM the answer is kept in /tmp (private to each boot) for every test
# of the boot; on a host, for this shell. g_accel_why says how it was reached.
G_ACCEL_AUTO=
g_accel() {
	if [ -n "${G_ACCEL:-}" ]; then echo "$G_ACCEL"; return; fi
	local f=/tmp/vnr-g-accel d ans=tcg why="no usable /dev/kvm"
	[ -n "$G_ACCEL_AUTO" ] || { [ -n "${VNR_IN_VM:-}" ] && [ -s $f ] && G_ACCEL_AUTO=$(cat $f); }
	if [ -z "$G_ACCEL_AUTO" ]; then
		# A distribution kernel in the test VM has KVM as modules, and
		# nothing there loads them before /dev/kvm is opened.
		if [ -n "${VNR_IN_VM:-}" ] && [ ! -e /dev/kvm ]; then
			modprobe -q kvm_amd 2>/dev/null || modprobe -q kvm_intel 2>/dev/null || true
		fi
		if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
			d=$(mktemp -d /tmp/vnr-kvm-probe.XXXXXX)
			timeout 90 qemu-system-x86_64 -machine pc -accel kvm -m 128M -nodefaults -display none \
				-no-reboot -serial "file:$d/console" -kernel "$G_KERNEL" \
				-append "console=ttyS0 panic=-1 acpi=off root=/dev/vnr-none" >"$d/qemu" 2>&1
			if grep -q 'Kernel panic' "$d/console" 2>/dev/null; then
				ans=kvm why="/dev/kvm booted the guest kernel"
			else
				why="/dev/kvm did not boot the guest kernel in 90 s: $(grep -v warning "$d/qemu" | head -c 200 | tr '\n' ' ')"
			fi
			rm -rf "$d"
		fi
		G_ACCEL_AUTO="$ans $why"
		[ -z "${VNR_IN_VM:-}" ] || echo "$G_ACCEL_AUTO" >$f
	fi
	echo "${G_ACCEL_AUTO%% *}"
}
g_accel_why() {
	if [ -n "${G_ACCEL:-}" ]; then echo "G_ACCEL=$G_ACCEL"; return; fi
	g_accel >/dev/null
	echo "${G_ACCEL_AUTO#* }"
}

# g_tap_up: creates $G_TAP with the host address (multi_queue if
# G_QUEUES > 1).
g_tap_up() {
	local mq=
	[ "${G_QUEUES:-1}" -gt 1 ] && mq=multi_queue
	ip link del "$G_TAP" 2>/dev/null || true
	ip tuntap add dev "$G_TAP" mode tap $mq || return 1
	ip addr add "$G_HOST_IP/24" dev "$G_TAP" || return 1
	ip link set "$G_TAP" up || return 1
}

g_tap_down() {
	ip link del "$G_TAP" 2>/dev/null || true
}

# g_start PATH [extra virtio-net device options]: boots the guest in the
# background; sets G_PID and G_LOG. Does not wait. The previous boot's
# state (G_PID, G_LOG, G_RUN_*, G_BOOT_S, G_EXIT) is cleared first, so that
# a g_start that fails leaves nothing of an earlier guest for g_wait or
# g_stop to act on; stop that guest (g_stop) before, or keep its G_PID.
g_start() {
	local path=$1 devopts=${2:-} queues=${G_QUEUES:-1} nic netdev vhostdev='' smp=1 launcher=() i fds='' vfds=''
	G_PID='' G_LOG='' G_BOOT_S='' G_EXIT=''
	G_RUN_CMD=() G_RUN_VHOSTDEV='' G_RUN_TAPDEV='' G_RUN_PATH=''
	[ -f "$G_KERNEL" ] && [ -f "$G_INITRD" ] || { echo "guest images missing: run scripts/setup" >&2; return 1; }
	case "$path" in
	rs) vhostdev=/dev/vhost-net-rs ;;
	c) vhostdev=/dev/vhost-net ;;
	node|user|e1000|rtl8139) ;;
	*) echo "unknown path '$path'" >&2; return 1 ;;
	esac
	if [ -n "${G_TAPDEV:-}" ]; then
		netdev="tap,id=n0,fd=4"
	else
		netdev="tap,id=n0,ifname=$G_TAP,script=no,downscript=no"
	fi
	case "$path" in
	rs|c|node) netdev+=",vhost=on,vhostforce=on"; nic="virtio-net-pci,netdev=n0" ;;
	user) netdev+=",vhost=off"; nic="virtio-net-pci,netdev=n0" ;;
	e1000) nic="e1000,netdev=n0" ;;
	rtl8139) nic="rtl8139,netdev=n0" ;;
	esac
	if [ "$queues" -gt 1 ] && [ -n "${G_TAPDEV:-}" ]; then
		echo "g_start: G_QUEUES > 1 needs the multiqueue tap \$G_TAP, not G_TAPDEV" >&2
		return 1
	fi
	if [ "$queues" -gt 1 ]; then
		smp=2
		nic+=",mq=on,vectors=$((2 * queues + 2))"
		if [ -n "$vhostdev" ]; then
			# fds= excludes ifname= and queues=: mqexec opens the queues.
			for ((i = 0; i < queues; i++)); do fds+="${fds:+:}$((10 + i))" vfds+="${vfds:+:}$((20 + i))"; done
			netdev="tap,id=n0,fds=$fds,vhost=on,vhostforce=on,vhostfds=$vfds"
			launcher=("$VNR_ROOT/selftests/build/mqexec" "$G_TAP" "$queues" "$vhostdev" --)
		else
			netdev+=",queues=$queues"
		fi
	elif [ -n "$vhostdev" ]; then
		netdev+=",vhostfd=3"
	fi
	# More tap netdev options for the vhost paths (poll-us=N: the vhost
	# workers busy-poll, VHOST_SET_VRING_BUSYLOOP_TIMEOUT).
	case "$path" in rs|c|node) [ -n "${G_NETDEV_OPTS:-}" ] && netdev+=",$G_NETDEV_OPTS" ;; esac
	[ -n "$devopts" ] && nic+=",$devopts"
	# The guest kernel has ACPI for the IOMMU's DMAR table only; the other
	# guests skip it, which keeps their boot as short as without it.
	local machine=${G_MACHINE:-pc} append="acpi=off" iommu=()
	if [ "${G_IOMMU:-0}" = 1 ]; then
		# Strict invalidation: with the guest's default lazy flush queue,
		# QEMU 7.2 does not pass every unmap on to the vhost device's
		# IOTLB, and the TX queue stalls soon after boot, on the C
		# driver as on vhost-net-rs.
		machine=q35 append="intel_iommu=on iommu.strict=1"
		# Interrupt remapping needs the split irqchip under KVM.
		[ "$(g_accel)" = kvm ] && machine+=",kernel-irqchip=split"
		# The IOMMU must exist before the devices behind it.
		iommu=(-device "intel-iommu,intremap=on,device-iotlb=on")
		# A modern-only device: a legacy one cannot have iommu_platform.
		nic+=",disable-legacy=on,iommu_platform=on,ats=on"
	fi
	G_LOG=$(mktemp /tmp/vnr-guest.XXXXXX)
	local args=(-machine "$machine" -accel "$(g_accel)" -m "${G_MEM:-192M}" -smp "$smp" -nographic -no-reboot
		-serial "file:$G_LOG" -monitor none -display none
		-kernel "$G_KERNEL" -initrd "$G_INITRD"
		-append "console=ttyS0 quiet panic=-1 $append vnr.ip=$G_GUEST_IP/24"
		"${iommu[@]}" -netdev "$netdev" -device "$nic,mac=$G_MAC")
	[ -n "${G_QMP:-}" ] && args+=(-qmp "unix:$G_QMP,server=on,wait=off")
	# shellcheck disable=SC2206  # split at spaces, as documented
	[ -n "${G_QEMU_ARGS:-}" ] && args+=($G_QEMU_ARGS)
	G_RUN_TAPDEV=${G_TAPDEV:-}
	[ "$queues" = 1 ] && G_RUN_VHOSTDEV=$vhostdev
	# For messages: the path and what serves it.
	case "$path" in
	rs|c) G_RUN_PATH="$path, $vhostdev" ;;
	node) G_RUN_PATH="node, /dev/vhost-net opened by QEMU" ;;
	*) G_RUN_PATH="$path, userspace" ;;
	esac
	[ "$queues" = 1 ] || G_RUN_PATH+=", $queues queues"
	[ "${G_IOMMU:-0}" != 1 ] || G_RUN_PATH+=", vIOMMU"
	# shellcheck disable=SC2206  # split at spaces, as documented
	G_RUN_CMD=("${launcher[@]}" ${G_QEMU:-qemu-system-x86_64} "${args[@]}")
	g_launch
}

# g_launch: starts the command g_start composed (G_RUN_*), with the vhost
# node on fd 3 and the macvtap on fd 4 where it takes them; sets G_PID.
g_launch() {
	(
		if [ -n "$G_RUN_VHOSTDEV" ]; then exec 3<>"$G_RUN_VHOSTDEV" || exit 1; fi
		if [ -n "$G_RUN_TAPDEV" ]; then exec 4<>"$G_RUN_TAPDEV" || exit 1; fi
		exec "${G_RUN_CMD[@]}"
	) >"$G_LOG.qemu" 2>&1 &
	G_PID=$!
}

# g_wait: waits until the guest is up and answers ping. Prints the seconds
# it took and keeps them in G_BOOT_S; fails with QEMU's own message if QEMU
# died, keeping its exit status in G_EXIT. Call it in the shell that called
# g_start, not in $(...): it may start QEMU again (below), which changes
# G_PID, and it learns QEMU's exit status from `wait`, which answers only
# for a child of this shell (bash keeps an exited child's status until a
# bare `wait` reaps every child).
#
# Under nested KVM (the test VM's SVM, emulated by TCG) a guest now and then
# fails while its kernel boots, in the nested hypervisor rather than in
# either vhost driver: it resets, and with -no-reboot QEMU exits with status
# 0 without a word; or the test VM's KVM cannot handle an exit and QEMU
# stops with "KVM internal error" (Debian's kernels, when an MMIO write to
# the virtio notify register exits during event delivery); or it hangs
# after the firmware with no word from the guest's kernel (seen once in
# about a hundred boots, QEMU 11.1 on C, 2026-12-06), which g_wait takes
# as such once G_HANG_S seconds (default 120; a guest boots under nested
# KVM in 5-17 s) have passed without the guest up. Any of them is
# retried once, saying so on stderr with the path and how long the failed
# attempt took; a second one, an exit with another status, any other QEMU
# message, or any failure under TCG fails. Each attempt has
# G_BOOT_TIMEOUT seconds, and G_BOOT_S is the successful attempt's time.
G_BOOT_S=
g_wait() {
	local t0=$SECONDS retried='' why
	G_BOOT_S='' G_EXIT=''
	while [ $((SECONDS - t0)) -lt "$G_BOOT_TIMEOUT" ]; do
		why=
		if ! kill -0 "$G_PID" 2>/dev/null; then
			# 127: not this shell's child, or reaped by a bare wait.
			wait "$G_PID" 2>/dev/null
			G_EXIT=$?
			[ "$G_EXIT" = 0 ] && [ ! -s "$G_LOG.qemu" ] && [ -z "$(g_oops)" ] &&
				why="exited silently with status 0 (a reset, with -no-reboot)"
		elif grep -q "KVM internal error" "$G_LOG.qemu" 2>/dev/null; then
			why="stopped with $(grep -m1 "KVM internal error" "$G_LOG.qemu")"
		elif [ $((SECONDS - t0)) -ge "${G_HANG_S:-120}" ] && [ "$(g_accel)" = kvm ] &&
			! grep -q VNR-GUEST-READY "$G_LOG" 2>/dev/null; then
			why="hung: the guest was not up ${G_HANG_S:-120} s after QEMU started"
		fi
		if [ -n "$why" ] && [ -z "$retried" ] && [ "$(g_accel)" = kvm ] &&
			! grep -q VNR-GUEST-READY "$G_LOG" 2>/dev/null; then
			retried=1
			echo "# the nested guest's QEMU ($G_RUN_PATH) $why during boot under KVM after" \
				"$((SECONDS - t0)) s (console: $(tail -n 1 "$G_LOG" 2>/dev/null | tr -d '\r' | head -c 120));" \
				"booting it once more" >&2
			kill -9 "$G_PID" 2>/dev/null
			wait "$G_PID" 2>/dev/null
			# Empty the logs here: g_launch's child truncates them
			# only once it runs, and this loop must not read the
			# first attempt's message again.
			: >"$G_LOG.qemu"
			: >"$G_LOG"
			G_EXIT=''
			t0=$SECONDS
			g_launch
			sleep 1
			continue
		fi
		if [ -n "$G_EXIT" ]; then
			local st="status $G_EXIT"
			[ "$G_EXIT" != 127 ] || st="status 127 or unknown (not this shell's child)"
			echo "QEMU ($G_RUN_PATH) exited with $st: $(tail -n 5 "$G_LOG.qemu" 2>/dev/null)" >&2
			g_oops | sed 's/^/# /' >&2
			return 1
		fi
		if grep -q "KVM internal error" "$G_LOG.qemu" 2>/dev/null; then
			echo "QEMU ($G_RUN_PATH) stopped: $(head -n 3 "$G_LOG.qemu")" >&2
			return 1
		fi
		if grep -q VNR-GUEST-READY "$G_LOG" 2>/dev/null && ping -c 1 -W 1 "$G_GUEST_IP" >/dev/null 2>&1; then
			G_BOOT_S=$((SECONDS - t0))
			# For the timing table (selftests/in-vm); on stderr, as
			# callers take the seconds from stdout or G_BOOT_S.
			echo "# nested guest up after $G_BOOT_S s ($(g_accel))" >&2
			echo "$G_BOOT_S"
			return 0
		fi
		sleep 1
	done
	echo "guest ($G_RUN_PATH) did not come up in ${G_BOOT_TIMEOUT}s; console: $(tail -n 5 "$G_LOG")" >&2
	g_oops | sed 's/^/# /' >&2
	return 1
}

# g_oops: the guest kernel's oops or panic report on its console, if any
# (up to 60 lines from its first line), for a test's failure message.
g_oops() {
	sed -n '/BUG: \|Oops\|general protection\|Kernel panic/,$p' "$G_LOG" 2>/dev/null | head -n 60
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

# g_vhost_fds: the running QEMU's vhost fds (on /dev/vhost-net-rs or
# /dev/vhost-net), in the order of its queue pairs.
g_vhost_fds() {
	local f
	for f in /proc/"$G_PID"/fd/*; do
		# A QEMU in a chroot (scripts/debian-qemu) shows the chroot's path.
		case "$(readlink "$f")" in */dev/vhost-net | */dev/vhost-net-rs) echo "${f##*/}" ;; esac
	done | sort -n
}

# g_fdinfo [FD]: the counters of one vhost fd of the running QEMU, or of
# all of them.
g_fdinfo() {
	local fd
	for fd in ${1:-$(g_vhost_fds)}; do
		[ -n "${1:-}" ] || echo "# fd $fd"
		cat "/proc/$G_PID/fdinfo/$fd" 2>/dev/null
	done
}

# g_vq_packets Q [FD]: packets counted by vhost-net-rs on vq Q (0 = RX,
# 1 = TX) of one vhost fd, or summed over all of them.
g_vq_packets() {
	g_fdinfo "${2:-}" | sed -n "s/^vq$1:.* packets=\([0-9]*\).*/\1/p" | awk '{ n += $1 } END { print n + 0 }'
}

# g_run COMMAND: runs COMMAND in the guest's shell (TCP port 7777, see
# scripts/mkinitramfs); prints its output and returns its status. Gives up
# after G_RUN_TIMEOUT seconds (default 120).
g_run() {
	local out rc
	# busybox nc -e connects only stdin and stdout to the socket: the
	# command's stderr is redirected by hand.
	out=$(printf '{ %s\n} 2>&1; printf "\\nVNR-RC=%%s\\n" $?; exit\n' "$1" |
		timeout "${G_RUN_TIMEOUT:-120}" busybox nc "$G_GUEST_IP" 7777 2>&1)
	rc=$(echo "$out" | sed -n 's/^VNR-RC=//p' | tail -n 1)
	echo "$out" | grep -v '^VNR-RC='
	[ "${rc:-1}" = 0 ]
}

# g_virtio_features: the guest's negotiated virtio-net feature string (one
# 0/1 character per bit, bit 0 first), read in the guest over g_run.
g_virtio_features() {
	g_run "for d in /sys/bus/virtio/devices/*; do [ \"\$(cat \$d/device)\" = 0x0001 ] && cat \$d/features; done"
}

# g_ping ARGS...: runs ping against the guest; prints
# "transmitted received loss_pct time_ms min avg max mdev" (rtt in ms).
g_ping() {
	ping -q "$@" "$G_GUEST_IP" 2>&1 | g_ping_summary
}

# g_ping_summary: ping's output on stdin, summarised as g_ping prints it.
g_ping_summary() {
	awk '
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

# g_iperf SECS LABEL [ARGS]: one iperf3 TCP run of SECS seconds against the
# guest's server (scripts/mkinitramfs), iperf3's ARGS added (-R: guest to
# host; -P N: N streams); prints the receiver's Mbit/s. The guest's server
# starts late and takes a moment to finish a test under TCG ("server is
# busy"), so a run that fails is retried; the last error is reported under
# LABEL, never turned silently into a number (0 is printed).
g_iperf() {
	local secs=$1 label=$2 json err=
	shift 2
	for _ in 1 2 3 4 5 6; do
		json=$(timeout $((secs + 60)) iperf3 -c "$G_GUEST_IP" -t "$secs" -J "$@" 2>&1)
		if err=$(echo "$json" | /usr/bin/python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit("no JSON from iperf3")
if d.get("error"):
    sys.exit(d["error"])
print(round(d["end"]["sum_received"]["bits_per_second"] / 1e6, 1))' 2>&1); then
			echo "$err"
			return 0
		fi
		echo "# $label: iperf3 $*: $err; retrying" >&2
		sleep 3
	done
	echo "# $label: iperf3 $* failed: $err" >&2
	echo 0
}

# g_counters: one line of counters of the running guest, for differences
# around a measurement: "key=value" pairs of
#   worker_ns, worker_vcs  run time (schedstat) and voluntary context
#                          switches (sleeps) of the QEMU process's vhost
#                          worker threads: "vhost-PID" of the C driver,
#                          "vhost-net-rs*" of vhost-net-rs
#   qemu_ns                run time of all its other threads (vCPUs, with
#                          the nested guest's own execution, and the main
#                          loop, which is the device on the userspace path)
#   tap_pkts, tap_bytes    packets (TSO/GSO ones count once) and bytes
#                          through $G_TAP, both directions
#   wakeups, calls         vhost-net-rs's worker wakeups and call-eventfd
#                          signals, all queues (fdinfo; 0 on the C driver,
#                          whose fdinfo has no counters)
#   guest_irqs             the guest's virtio interrupts (/proc/interrupts
#                          over g_run: a few packets of its own)
g_counters() {
	local t comm s=/sys/class/net/$G_TAP/statistics wn=0 wv=0 qn=0 run v
	for t in /proc/"$G_PID"/task/*; do
		read -r comm <"$t/comm" 2>/dev/null || continue
		read -r run _ <"$t/schedstat" 2>/dev/null || continue
		case "$comm" in
		vhost*)
			v=$(sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' "$t/status" 2>/dev/null)
			wn=$((wn + run)) wv=$((wv + ${v:-0}))
			;;
		*) qn=$((qn + run)) ;;
		esac
	done
	printf 'worker_ns=%s worker_vcs=%s qemu_ns=%s tap_pkts=%s tap_bytes=%s %s guest_irqs=%s\n' "$wn" "$wv" "$qn" \
		$(($(cat "$s/rx_packets") + $(cat "$s/tx_packets"))) $(($(cat "$s/rx_bytes") + $(cat "$s/tx_bytes"))) \
		"$(g_fdinfo 2>/dev/null | sed -n 's/.* wakeups=\([0-9]*\) calls=\([0-9]*\).*/\1 \2/p' |
			awk '{ w += $1; c += $2 } END { printf "wakeups=%d calls=%d", w, c }')" \
		"$(g_run 'cat /proc/interrupts' 2>/dev/null |
			awk '/virtio/ { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i } END { print n + 0 }')"
}
