#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# qemu-versions.sh: the end-to-end set that differs between QEMU versions,
# on the QEMUs a Debian 13 host runs (trixie's 10.0, trixie-backports'
# 11.1), on vhost-net-rs and on the C driver in the same run. KTAP output.
#
# Each QEMU runs in its own Debian 13 system (scripts/debian-qemu prepare,
# which `make check-qemu` runs first), through G_QEMU (scripts/guest.sh).
# For each, with its version as the tests' prefix, the cases that differ
# between QEMU versions (make check-e2e runs the whole set on 7.2):
#   - the guest boots on each driver under that QEMU (its process runs in
#     the Debian 13 system), pings, and iperf3 moves data both ways;
#   - the guest negotiates the same virtio features on vhost-net-rs as on
#     C: QEMU withholds a bit its kernel_feature_bits asks for and the
#     backend does not offer, so a difference here is a feature one driver
#     offers and the other lacks (docs/features.md);
#   - a packed=on guest: packed rings on vhost-net-rs, split ones on C;
#   - e2e-configs.sh's multiqueue (ethtool -L, every queue pair carries
#     traffic, ring reset, the drop-in node) and iommu (vIOMMU, device
#     IOTLB) configurations, the latter with the nested guests on TCG;
#   - migrate.sh: the packed guest within this version, and split guests
#     from QEMU 7.2 to this one and back (pc-i440fx-7.2), on both drivers,
#     with the stream's bytes compared end to end. Its page-by-page RAM
#     comparison is off (VNR_MIGRATE_PMEM=0): under nested KVM the kvmclock
#     page differs by design; `make check-e2e` runs it on 7.2 under TCG.
#
# VNR_QEMU_ROOTS="ROOT..." picks the systems (default: every one
# scripts/debian-qemu list names). Skips when there is none.
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib.sh
. scripts/lib.sh
# shellcheck source=../scripts/guest.sh
. scripts/guest.sh
# shellcheck source=ktap.sh
. selftests/ktap.sh
trap 'g_stop; g_tap_down' EXIT

vnr_ktap_start
if [ -n "${VNR_QEMU_ROOTS:-}" ]; then
	systems=()
	for r in $VNR_QEMU_ROOTS; do
		l=$(scripts/debian-qemu list | awk -v r="$r" '$2 == r { print $1 }')
		[ -n "$l" ] || { ktap_exit_fail_msg "$r is not a system scripts/debian-qemu made"; }
		systems+=("$l $r")
	done
else
	mapfile -t systems < <(scripts/debian-qemu list)
fi
if [ ${#systems[@]} = 0 ]; then
	ktap_skip_all "no Debian 13 QEMU: scripts/debian-qemu prepare makes them (make check-qemu runs it)"
	exit "$KSFT_SKIP"
fi
vnr_loaded vhost_net_rs || insmod "$VNR_KO"
selftests/load-c-vhost >/dev/null 2>&1 || true

# relay PREFIX COMMAND...: runs a KTAP test script and reports each of its
# results as this script's own, its name prefixed; its other lines become
# comments. A script that fails without reporting a failure fails here.
relay() {
	local prefix=$1 line name failed=0 rc=
	shift
	while IFS= read -r line; do
		if [[ $line =~ ^VNR-RELAY-RC=([0-9]+)$ ]]; then
			rc=${BASH_REMATCH[1]}
		elif [[ $line =~ ^ok\ [0-9]+\ (.*)\ \#\ SKIP(.*)$ ]]; then
			vnr_skip "$prefix${BASH_REMATCH[1]}" "${BASH_REMATCH[2]# }"
		elif [[ $line =~ ^ok\ [0-9]+\ (.*)$ ]]; then
			ktap_test_pass "$prefix${BASH_REMATCH[1]}"
		elif [[ $line =~ ^not\ ok\ [0-9]+\ (.*)$ ]]; then
			name=${BASH_REMATCH[1]}
			ktap_test_fail "$prefix${name% # *}"
			failed=1
		elif [[ $line == \#* ]]; then
			echo "$line"
		elif [ -n "$line" ]; then
			echo "# $line"
		fi
	done < <("$@" 2>&1; echo "VNR-RELAY-RC=$?")
	if [ "$failed" = 0 ] && [ "$rc" != 0 ] && [ "$rc" != "$KSFT_SKIP" ]; then
		vnr_fail "${prefix}exits_cleanly" "$* exited with status ${rc:-?} without reporting a failure"
	fi
}

for sys in "${systems[@]}"; do
	read -r label root <<<"$sys"
	p="${label}_"
	export G_QEMU="$VNR_ROOT/scripts/debian-qemu run $root"
	echo "# ===== $label: $(cat "$root/.vnr-qemu-version") in $root"
	features_rs='' features_c='' booted=0
	g_tap_up || { vnr_fail "${p}tap_setup" "could not create $G_TAP"; continue; }
	for drv in rs c; do
		if [ "$drv" = c ] && [ ! -c /dev/vhost-net ]; then vnr_skip "${p}guest_on_c" "no /dev/vhost-net"; continue; fi
		g_start "$drv"
		if ! g_wait >/dev/null; then
			vnr_fail "${p}guest_boots_on_$drv" "$(tail -n 3 "$G_LOG" 2>/dev/null)" "$(cat "$G_LOG.qemu" 2>/dev/null)"
			g_stop; continue
		fi
		booted=$((booted + 1))
		# The QEMU that runs is the Debian 13 system's: its root is there.
		qroot=$(readlink "/proc/$G_PID/root") want=$(scripts/debian-qemu where "$root")
		if [ "$qroot" = "$want" ] && [ -n "$(g_vhost_fds)" ]; then
			vnr_pass "${p}guest_boots_on_$drv" "after ${G_BOOT_S}s; QEMU's root $qroot, vhost fds $(g_vhost_fds | tr '\n' ' ')"
		else
			vnr_fail "${p}guest_boots_on_$drv" "QEMU's root '$qroot' (want $want), vhost fds '$(g_vhost_fds | tr '\n' ' ')'"
		fi
		r=$(g_ping -c 100 -i 0.02 -W 2)
		read -r tx rx _ <<<"$r"
		if [ "$tx" = 100 ] && [ "$rx" = 100 ]; then vnr_pass "${p}ping_100_no_loss_on_$drv" "$r"
		else vnr_fail "${p}ping_100_no_loss_on_$drv" "$r"; fi
		rx0=$(g_vq_packets 0) tx0=$(g_vq_packets 1)
		to=$(g_iperf 3 "${p}iperf3_$drv") from=$(g_iperf 3 "${p}iperf3_$drv" -R)
		moved=
		[ "$drv" = rs ] && moved="; vhost-net-rs's counters: RX +$(($(g_vq_packets 0) - rx0)) TX +$(($(g_vq_packets 1) - tx0)) packets"
		counted=1
		if [ "$drv" = rs ]; then
			[ $(($(g_vq_packets 0) - rx0)) -gt 1000 ] && [ $(($(g_vq_packets 1) - tx0)) -gt 1000 ] || counted=0
		fi
		if awk -v a="$to" -v b="$from" 'BEGIN { exit !(a > 0 && b > 0) }' && [ "$counted" = 1 ]; then
			vnr_pass "${p}iperf3_both_ways_on_$drv" "host -> guest $to Mbit/s, guest -> host $from Mbit/s$moved"
		else
			vnr_fail "${p}iperf3_both_ways_on_$drv" "host -> guest $to Mbit/s, guest -> host $from Mbit/s$moved"
		fi
		f=$(g_virtio_features)
		[ "$drv" = rs ] && features_rs=$f || features_c=$f
		g_stop
	done
	g_tap_down
	bits() { echo "$1" | awk '{ s = ""; for (i = 1; i <= length($0); i++) if (substr($0, i, 1) == "1") s = s " " (i - 1); print s }'; }
	if [ -z "$features_rs" ] || [ -z "$features_c" ]; then
		vnr_fail "${p}same_features_as_c" "features not read: rs '$features_rs' c '$features_c'"
	elif [ "$features_rs" = "$features_c" ]; then
		vnr_pass "${p}same_features_as_c" "guest's virtio-net feature bits:$(bits "$features_rs")"
	else
		vnr_fail "${p}same_features_as_c" "rs:$(bits "$features_rs")" "c: $(bits "$features_c")"
	fi

	if [ "$booted" = 0 ]; then
		# No guest boots on this QEMU: its other cases would only repeat it.
		vnr_fail "${p}other_cases" "not run: no guest booted on $label"
		continue
	fi
	# Packed rings: vhost-net-rs negotiates them (bit 34, both queues packed
	# in fdinfo) and carries a flood; C, which has none, runs the same
	# guest on split rings.
	g_tap_up || { vnr_fail "${p}tap_setup" "could not create $G_TAP"; continue; }
	for drv in rs c; do
		[ "$drv" = c ] && [ ! -c /dev/vhost-net ] && continue
		g_start "$drv" packed=on
		if ! g_wait >/dev/null; then vnr_fail "${p}packed_guest_boots_on_$drv" "$(cat "$G_LOG.qemu" 2>/dev/null)"; g_stop; continue; fi
		bit=$(g_virtio_features | cut -c35)
		rings=$(g_fdinfo | grep -c 'ring=packed')
		n0=$(( $(g_vq_packets 0) + $(g_vq_packets 1) ))
		r=$(g_ping -f -c 2000 -W 2)
		read -r tx rx _ <<<"$r"
		n=$(( $(g_vq_packets 0) + $(g_vq_packets 1) - n0 ))
		if [ "$drv" = rs ]; then
			if [ "$bit" = 1 ] && [ "$rings" = 2 ] && [ "${rx:-0}" -gt 1000 ] && [ "$n" -ge $((2 * rx)) ]; then
				vnr_pass "${p}packed_rings_on_rs" "bit 34=$bit, packed rings $rings; flood $r; packets counted $n"
			else
				vnr_fail "${p}packed_rings_on_rs" "bit 34=${bit:-?}, packed rings $rings; flood $r; packets counted $n" "$(g_fdinfo)"
			fi
		elif [ "$bit" = 0 ] && [ "${rx:-0}" -gt 1000 ]; then
			vnr_pass "${p}packed_guest_on_c_runs_split" "bit 34=$bit; flood $r"
		else
			vnr_fail "${p}packed_guest_on_c_runs_split" "bit 34=${bit:-?}; flood $r"
		fi
		g_stop
	done
	g_tap_down

	relay "${p}" env VNR_E2E=full VNR_E2E_CONFIGS=multiqueue selftests/e2e-configs.sh
	# The vIOMMU guests on TCG: under nested KVM with this QEMU's intel-iommu
	# (split irqchip) the test VM's kernel once overflowed its interrupt
	# stack in SVM's vCPU loop and panicked, with the C driver's guest
	# (2026-12-06), where QEMU 7.2's ran clean.
	relay "${p}" env VNR_E2E=full VNR_E2E_CONFIGS=iommu G_ACCEL=tcg selftests/e2e-configs.sh
	# Migration: a packed guest within this version; split guests from
	# Debian 12's QEMU 7.2 to this one and back, on 7.2's machine type.
	relay "${p}" env VNR_E2E=full VNR_MIGRATE_PMEM=0 VNR_MIGRATE_CASES="rs:rs:packed" selftests/migrate.sh
	relay "${p}from_qemu-7.2_" env VNR_E2E=full VNR_MIGRATE_PMEM=0 VNR_MIGRATE_CASES="rs:rs c:c" \
		VNR_MIGRATE_SRC_QEMU=qemu-system-x86_64 G_MACHINE=pc-i440fx-7.2 selftests/migrate.sh
	relay "${p}to_qemu-7.2_" env VNR_E2E=full VNR_MIGRATE_PMEM=0 VNR_MIGRATE_CASES="rs:rs c:c" \
		VNR_MIGRATE_DST_QEMU=qemu-system-x86_64 G_MACHINE=pc-i440fx-7.2 selftests/migrate.sh
done
vnr_ktap_finish
