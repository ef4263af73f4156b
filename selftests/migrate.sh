#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# migrate.sh: live migration of a running guest whose network is on vhost.
# KTAP output. Runs in the test VM (`make check-e2e`).
#
# Two QEMUs on one bridge: the source boots the guest on tap vnrmig0, the
# destination waits on tap vnrmig1 with `-incoming unix:...`, both with
# vhost=on,vhostforce=on and the same MAC. While the host streams data
# into the guest (it lands in the guest's RAM through the RX ring) and
# pings it 100 times a second, QEMU migrates the guest over a unix socket. QEMU turns the
# device's dirty logging on for that (VHOST_F_LOG_ALL, SET_LOG_BASE,
# VHOST_VRING_F_LOG) and reads the log to resend what the device wrote; a
# page the device wrote but did not log reaches the destination stale.
#
# Each case checks:
#   - the migration completes, and the destination runs;
#   - the guest answers on the destination once the source is gone;
#   - the flood's loss is bounded by the outage: at most one packet per
#     interval (100 a second by default) over QEMU's measured downtime
#     plus 2 s for the destination to start and the bridge to learn the
#     guest's new port, plus 20 in flight;
#   - the streamed bytes the guest read match, byte for byte (md5), what
#     the host sent. The guest's reader is stopped (SIGSTOP) as soon as
#     the migration starts (when the guest's shell answers in time, which
#     under TCG it often does not during a migration: a failed attempt is
#     reported, though the signal may have gone through, even late) and
#     continued on the destination (up to 5 attempts, and again while the
#     sender finishes; a STOP arriving after a CONT does nothing), so what
#     arrives meanwhile waits in the guest's socket queue, in the RX
#     buffers the device wrote, across the switch-over; a page the device
#     wrote without logging it reaches the destination stale, and since
#     the data was taken (and acknowledged) on the source, nothing
#     resends it. The migration's bandwidth is capped
#     (VNR_MIGRATE_BANDWIDTH, default 16 MiB/s) so that its first copy of
#     RAM is still going on while the device writes;
#   - the guest's RAM arrived whole: the destination starts paused (-S);
#     once the migration has completed, the source's RAM (paused, device
#     stopped) and the destination's RAM as it arrived are dumped
#     (pmemsave) and compared page by page, then the destination runs. A
#     page that differs was written on the source without being logged,
#     by the device or (see G_MEM below) by QEMU itself. With the
#     comparison, the flood (and its loss bound) covers the migration up
#     to the switch-over: it ends before the guest is held;
#   - ping sees no duplicate replies (an echo request replayed from a
#     stale RX page);
#   - on vhost-net-rs, the destination's own counters carried the traffic.
# Cases: vhost-net-rs to vhost-net-rs, the C driver to the C driver (the
# comparison, same run), vhost-net-rs to the C driver (a host changing
# drivers under a running guest), and a packed=on guest from vhost-net-rs
# to vhost-net-rs (packed rings log their ring writes too; C has no packed
# ring, so that guest cannot move to C). That QEMU accepts the device with
# -only-migratable is checked by e2e.sh's first boot.
#
# Only with VNR_E2E=full (make check-e2e); otherwise it skips.
# VNR_MIGRATE_RATE sets the stream's rate in bytes/s (default 1000000);
# VNR_MIGRATE_BANDWIDTH the migration's in bytes/s;
# VNR_MIGRATE_CASES the cases as SRC:DST[:packed] words (default "rs:rs c:c
# rs:c rs:rs:packed"); VNR_MIGRATE_PMEM=0 skips the RAM comparison (the
# destination then starts running).
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib.sh
. scripts/lib.sh
# shellcheck source=../scripts/guest.sh
. scripts/guest.sh
# shellcheck source=ktap.sh
. selftests/ktap.sh

PY=/usr/bin/python3
HELPER=selftests/migrate.py
BR=vnrbr0 SRC_TAP=vnrmig0 DST_TAP=vnrmig1
RATE=${VNR_MIGRATE_RATE:-1000000}
BANDWIDTH=${VNR_MIGRATE_BANDWIDTH:-16777216}
# The flood's interval in seconds; empty for ping -f (as fast as replies
# come, which keeps a nested TCG guest's CPU busy).
PING_INTERVAL=${VNR_MIGRATE_PING_INTERVAL-0.01}
PMEM=${VNR_MIGRATE_PMEM:-1}
[ "$PMEM" = 1 ] || PMEM=
CASES=${VNR_MIGRATE_CASES:-rs:rs c:c rs:c rs:rs:packed}
# The source's and the destination's QEMU commands (scripts/guest.sh's
# G_QEMU), for a migration between QEMU versions; both need the same
# versioned machine type (G_MACHINE). Default: G_QEMU for both.
SRC_QEMU=${VNR_MIGRATE_SRC_QEMU:-${G_QEMU:-}}
DST_QEMU=${VNR_MIGRATE_DST_QEMU:-${G_QEMU:-}}
# Guest RAM: 192 MiB less 8 KiB, deliberately not a multiple of 256 KiB.
# QEMU before 9.0 loses guest-CPU writes when it migrates a TCG guest
# (upstream 03bfc2188f, "physmem: Fix migration dirty bitmap coherency with
# TCG memory access"): its fast dirty-bitmap sync, taken for a RAM block
# whose length is a whole number of 64-page words, clears dirty bits
# without resetting the vCPUs' TLB entries, so a write through an entry
# that was already dirty sets no bit and the page is never sent again. The
# destination then runs with stale kernel pages and crashes, whatever the
# vhost driver. A length off that grid takes the per-page path, which
# resets the TLB. Measured in this VM on QEMU 7.2: 17 and 27 stale pages
# after rs->rs and C->rs migrations at 192 MiB. With KVM the size does not
# matter.
export G_MEM=196600K
MEM_BYTES=$((196600 * 1024))
WORK=$(mktemp -d /tmp/vnr-migrate.XXXXXX)
SRC_PID='' DST_PID='' SRC_LOG='' DST_LOG='' BG_PIDS=()

# stop_qemu PID LOG: what g_stop does, for one of the two QEMUs; the
# caller's G_PID and G_LOG are left as they were.
stop_qemu() {
	[ -n "$1" ] || return 0
	local G_PID=$1 G_LOG=$2
	g_stop
}

stop_all() {
	local p
	for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	BG_PIDS=()
	stop_qemu "$SRC_PID" "$SRC_LOG"
	stop_qemu "$DST_PID" "$DST_LOG"
	SRC_PID='' DST_PID=''
	rm -f "$WORK"/*
}

net_down() {
	ip link del "$SRC_TAP" 2>/dev/null
	ip link del "$DST_TAP" 2>/dev/null
	ip link del "$BR" 2>/dev/null
	true
}
trap 'stop_all; net_down; rm -rf "$WORK"' EXIT

# The host's address is on the bridge; the two taps are its ports.
net_up() {
	local t
	net_down
	ip link add "$BR" type bridge forward_delay 0 || return 1
	ip addr add "$G_HOST_IP/24" dev "$BR" || return 1
	ip link set "$BR" up || return 1
	for t in "$SRC_TAP" "$DST_TAP"; do
		ip tuntap add dev "$t" mode tap || return 1
		ip link set "$t" master "$BR" || return 1
		ip link set "$t" up || return 1
	done
}

# reader_signal STOP|CONT [TRIES]: stops or continues the guest's stream
# reader, in up to TRIES attempts (default 1) of 20 s each; says how it
# went if not at the first attempt. A command the host gave up on may
# still reach the guest's shell later (TCP resends it after the host's nc
# is gone), so a late STOP must not undo a CONT: the CONT leaves
# /rx.resumed, and the STOP does nothing once it is there.
reader_signal() {
	local out try t0=$SECONDS cmd
	case $1 in
	STOP) cmd='[ -e /rx.resumed ] || kill -STOP $(cat /rx.pid)' ;;
	CONT) cmd='touch /rx.resumed; kill -CONT $(cat /rx.pid)' ;;
	esac
	for ((try = 1; try <= ${2:-1}; try++)); do
		if out=$(G_RUN_TIMEOUT=20 g_run "$cmd" 2>&1); then
			[ "$try" = 1 ] || vnr_detail "kill -$1 of the guest's reader went through at attempt $try, after $((SECONDS - t0)) s"
			return 0
		fi
	done
	vnr_detail "kill -$1 of the guest's reader failed $((try - 1)) times in $((SECONDS - t0)) s: $(echo "$out" | tr '\n' ' ')"
	return 1
}

drv_name() { [ "$1" = rs ] && echo vhost-net-rs || echo C; }

# compare_ram NAME: the destination started paused (-S). Dumps the
# source's RAM after the switch-over and the destination's RAM as it
# arrived, checks that no page differs, then lets the destination run.
compare_ram() {
	local name=$1 side diff ok=1
	if ! "$PY" "$HELPER" wait-status "$WORK/dst.qmp" paused 60 >/dev/null 2>&1; then
		vnr_detail "the destination did not reach 'paused'"
		ok=
	fi
	for side in src dst; do
		"$PY" "$HELPER" qmp "$WORK/$side.qmp" pmemsave \
			"{\"val\": 0, \"size\": $MEM_BYTES, \"filename\": \"$WORK/$side.mem\"}" >/dev/null || ok=
	done
	diff=$("$PY" "$HELPER" pagediff "$WORK/src.mem" "$WORK/dst.mem" 2>&1)
	rm -f "$WORK/src.mem" "$WORK/dst.mem"
	if [ -n "$ok" ] && [ "$(echo "$diff" | head -n 1)" = "0 pages differ" ]; then
		vnr_pass "${name}_ram_identical" "$((MEM_BYTES >> 20)) MiB compared page by page"
	else
		vnr_fail "${name}_ram_identical" "source vs destination RAM after the switch-over: $(echo "$diff" | head -n 12 | tr '\n' '|')"
	fi
	"$PY" "$HELPER" qmp "$WORK/dst.qmp" cont >/dev/null || vnr_detail "cont on the destination failed"
}

# migrate_case SRC DST [packed]: one migration from a guest on driver SRC
# (rs or c) to a QEMU on driver DST; with "packed", the guest's virtio-net
# device has packed=on, and its rings must be packed on the source.
migrate_case() {
	local src=$1 dst=$2 name="migrate_${1}_to_${2}${3:+_$3}" devopts=${3:+packed=on} t out total downtime setup bytes r tx rx loss
	local bound sent_bytes sent_md5 got dst_rx i mig dups answered stopper
	G_TAP=$SRC_TAP G_QMP=$WORK/src.qmp G_QEMU_ARGS='' G_QEMU=$SRC_QEMU g_start "$src" "$devopts" || { vnr_fail "${name}_completes" "QEMU did not start"; return; }
	SRC_PID=$G_PID SRC_LOG=$G_LOG
	# g_wait may start QEMU again: take its pid whether it booted or not.
	g_wait >/dev/null
	r=$?
	SRC_PID=$G_PID t=$G_BOOT_S
	if [ "$r" != 0 ]; then
		vnr_fail "${name}_completes" "the source guest did not boot"
		stop_all
		return
	fi
	if [ -n "$devopts" ]; then
		# Both queues of the source's vhost fd run packed rings.
		if [ "$(g_fdinfo | grep -c 'ring=packed')" = 2 ]; then vnr_pass "${name}_rings_are_packed"
		else vnr_fail "${name}_rings_are_packed" "$(g_fdinfo)"; fi
	fi
	G_TAP=$DST_TAP G_QMP=$WORK/dst.qmp G_QEMU_ARGS="-incoming unix:$WORK/mig.sock${PMEM:+ -S}" G_QEMU=$DST_QEMU g_start "$dst" "$devopts" ||
		{ vnr_fail "${name}_completes" "QEMU did not start"; stop_all; return; }
	DST_PID=$G_PID DST_LOG=$G_LOG
	G_PID=$SRC_PID G_LOG=$SRC_LOG

	# The guest reads what arrives on port 8888 into md5sum; /rx.pid is the
	# reader (nc), which is stopped across the migration.
	if ! g_run "rm -f /rx.md5 /rx.done /rx.pid /rx.resumed; (sh -c 'echo \$\$ >/rx.pid; exec nc -l -p 8888' | md5sum >/rx.md5; touch /rx.done) </dev/null >/dev/null 2>&1 &" >/dev/null; then
		vnr_fail "${name}_completes" "could not start the guest's receiver"
		stop_all
		return
	fi
	sleep 1
	"$PY" "$HELPER" stream "$G_GUEST_IP" 8888 "$RATE" "$WORK/stop" >"$WORK/stream.out" 2>&1 &
	BG_PIDS+=($!)
	if [ -n "$PING_INTERVAL" ]; then
		ping -q -i "$PING_INTERVAL" -W 1 "$G_GUEST_IP" >"$WORK/ping.out" 2>&1 &
	else
		ping -f -W 1 "$G_GUEST_IP" >"$WORK/ping.out" 2>&1 &
	fi
	BG_PIDS+=($!)
	sleep 3
	"$PY" "$HELPER" migrate "$WORK/src.qmp" "unix:$WORK/mig.sock" 600 "$BANDWIDTH" >"$WORK/migrate.out" 2>&1 &
	mig=$!
	# The STOP goes in the background: the guest's shell can take its full
	# timeout to answer under TCG, and the flood must end when the
	# migration does, not when the shell answers.
	reader_signal STOP &
	stopper=$!
	wait "$mig"
	mig=$?
	if [ "$mig" = 0 ] && [ -n "$PMEM" ]; then
		# The flood covers the migration up to the switch-over and ends
		# here: while the comparison holds the guest nothing can answer,
		# and what piles up meanwhile says nothing about the driver. The
		# destination's part is checked after it runs (the guest answers,
		# the stream arrives, its counters moved).
		kill -INT "${BG_PIDS[1]}" 2>/dev/null
		wait "${BG_PIDS[1]}" 2>/dev/null
		BG_PIDS[1]=
		compare_ram "$name"
	fi
	wait "$stopper"
	if [ "$mig" != 0 ] || ! "$PY" "$HELPER" wait-status "$WORK/dst.qmp" running 60 >/dev/null 2>&1; then
		vnr_fail "${name}_completes" "$(cat "$WORK/migrate.out")" "$(tail -n 3 "$DST_LOG.qemu" 2>/dev/null)"
		stop_all
		return
	fi
	out=$(cat "$WORK/migrate.out")
	read -r total downtime setup bytes <<<"$out"
	vnr_pass "${name}_completes" \
		"$(drv_name "$src") -> $(drv_name "$dst"): total ${total} ms, downtime ${downtime} ms, setup ${setup} ms, $((bytes / 1048576)) MiB sent; source booted in ${t}s"
	echo "# MIGRATION $src $dst total_ms=$total downtime_ms=$downtime"

	# The destination carries the guest from here; the source goes away.
	G_PID=$DST_PID G_LOG=$DST_LOG
	# The STOP may have reached the guest even if its answer did not (the
	# guest is held paused for the RAM comparison meanwhile), and a reader
	# left stopped stalls the stream for good: the CONT is retried until
	# the destination's shell answers. Taking that long is a failure of
	# its own, in the stream check below.
	reader_signal CONT 5
	stop_qemu "$SRC_PID" "$SRC_LOG"
	SRC_PID=
	sleep 6
	touch "$WORK/stop"
	kill -INT "${BG_PIDS[1]}" 2>/dev/null
	wait "${BG_PIDS[1]}" 2>/dev/null
	# The sender ends once the guest has taken what it sent. Should the
	# reader still be stopped (a STOP overtaking the CONT between its check
	# and its kill), it is continued again meanwhile; the device's own
	# stall would still time the sender out.
	i=$SECONDS
	while kill -0 "${BG_PIDS[0]}" 2>/dev/null && [ $((SECONDS - i)) -lt 120 ]; do
		sleep 5
		G_RUN_TIMEOUT=10 g_run 'touch /rx.resumed; kill -CONT $(cat /rx.pid)' >/dev/null 2>&1
	done
	wait "${BG_PIDS[0]}" 2>/dev/null
	BG_PIDS=()

	r=$(g_ping -c 5 -i 0.2 -W 2)
	read -r tx answered _ <<<"$r"
	if [ "${answered:-0}" -ge 4 ]; then vnr_pass "${name}_guest_answers_after" "$r"
	else
		vnr_fail "${name}_guest_answers_after" "$r" "destination console: $(tail -n 8 "$DST_LOG" 2>/dev/null | tr '\n' '|')" \
			"destination vhost: $(g_fdinfo 2>/dev/null | tr '\n' '|')" "bridge: $(bridge fdb show br "$BR" 2>/dev/null | grep -i "$G_MAC" | tr '\n' '|')"
		# Hung, or only deaf? The vCPU's RIP twice, a second apart.
		for i in 1 2; do
			vnr_detail "destination RIP: $("$PY" "$HELPER" qmp "$WORK/dst.qmp" human-monitor-command \
				'{"command-line": "info registers"}' 2>&1 | grep -o 'RIP=[0-9a-f]*' | head -n 1)"
			sleep 1
		done
	fi

	r=$(g_ping_summary <"$WORK/ping.out")
	read -r tx rx loss _ <<<"$r"
	# Packets sent per second while no reply comes: 1 / interval, or 100
	# for ping -f.
	bound=$(awk -v d="${downtime:-0}" -v i="${PING_INTERVAL:-0.01}" 'BEGIN { printf "%d", (d + 2000) / 1000 / i + 20 }')
	if [ -n "$tx" ] && [ $((tx - rx)) -le "$bound" ]; then
		vnr_pass "${name}_flood_loss_bounded" "lost $((tx - rx)) of $tx (${loss}%), bound $bound"
	else
		vnr_fail "${name}_flood_loss_bounded" "lost $((${tx:-0} - ${rx:-0})) of ${tx:-?}, bound $bound" "$(tail -n 3 "$WORK/ping.out")"
	fi
	dups=$(sed -n 's/.*+\([0-9]*\) duplicates.*/\1/p' "$WORK/ping.out")
	if [ "${dups:-0}" = 0 ]; then vnr_pass "${name}_no_duplicate_replies"
	else vnr_fail "${name}_no_duplicate_replies" "$dups duplicates" "$(tail -n 3 "$WORK/ping.out")"; fi

	read -r sent_bytes sent_md5 <"$WORK/stream.out"
	got=
	i=$SECONDS
	while [ "${answered:-0}" -gt 0 ] && [ $((SECONDS - i)) -lt 60 ]; do
		got=$(G_RUN_TIMEOUT=10 g_run "[ -e /rx.done ] && cat /rx.md5" 2>/dev/null) && break
		sleep 1
	done
	got=$(echo "$got" | awk 'NR == 1 { print $1 }')
	if [ -n "$sent_md5" ] && [ "$got" = "$sent_md5" ]; then
		vnr_pass "${name}_rx_stream_intact" "$sent_bytes bytes, md5 $sent_md5"
	else
		vnr_fail "${name}_rx_stream_intact" "sent $sent_bytes bytes with md5 '$sent_md5', the guest read md5 '$got'" \
			"$(cat "$WORK/stream.out")" "guest: $(G_RUN_TIMEOUT=10 g_run 'netstat -tn; ls /rx.*' 2>&1 | tr '\n' ' ')"
	fi

	if [ "$dst" = rs ]; then
		dst_rx=$(g_vq_packets 0)
		if [ "${dst_rx:-0}" -gt 0 ]; then vnr_pass "${name}_destination_carries_traffic" "vq0 $dst_rx packets"
		else vnr_fail "${name}_destination_carries_traffic" "no RX packets on the destination" "$(g_fdinfo)"; fi
	fi
	stop_all
}

vnr_ktap_start
if [ "${VNR_E2E:-fast}" != full ]; then
	ktap_skip_all "needs VNR_E2E=full (make check-e2e)"
	exit "$KSFT_SKIP"
fi
vnr_loaded vhost_net_rs || insmod "$VNR_KO"
selftests/load-c-vhost >/dev/null 2>&1 || true
[ -x "$PY" ] || { vnr_fail python3 "$PY not found: run scripts/setup"; vnr_ktap_finish; }
net_up || { vnr_fail net_setup "could not create the bridge and taps"; vnr_ktap_finish; }

for c in $CASES; do
	IFS=: read -r src dst opts <<<"$c"
	if { [ "$src" = c ] || [ "$dst" = c ]; } && [ ! -c /dev/vhost-net ]; then
		vnr_skip "migrate_${src}_to_${dst}${opts:+_$opts}" "no /dev/vhost-net"
		continue
	fi
	migrate_case "$src" "$dst" "$opts"
done

vnr_ktap_finish
