#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# e2e.sh: a real QEMU guest on vhost-net-rs, end to end. KTAP output.
#
# Runs in the test VM after module.sh (the module is loaded). Boots the tiny
# guest from scripts/setup with
#   -netdev tap,...,vhost=on,vhostforce=on,vhostfd=3  3<>/dev/vhost-net-rs
# and pings it from the host side of the tap. vhostforce makes any vhost
# failure fatal instead of a silent fallback to QEMU userspace, and the
# module's own counters must account for the packets.
#
# VNR_E2E=fast (the default in `make check`) boots one guest: ping, flood,
# counters, then kill -9 of QEMU mid-flood and unload. VNR_E2E=full (`make
# check-e2e`) adds a clean quit, the C-driver loss comparison, a packed=on
# guest on both drivers and, unless VNR_E2E_VARIANTS=0, the four guest
# feature variants: eight more boots.
# VNR_E2E_FLOOD (default 2000) sets the flood size.
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib.sh
. scripts/lib.sh
# shellcheck source=../scripts/guest.sh
. scripts/guest.sh
# shellcheck source=ktap.sh
. selftests/ktap.sh
FLOOD=${VNR_E2E_FLOOD:-2000}
FULL=$([ "${VNR_E2E:-fast}" = full ] && echo 1 || echo 0)
slab_kb() { awk '/^Slab:/ {print $2}' /proc/meminfo; }
trap 'g_stop; g_tap_down' EXIT

# kill -9 of the running QEMU in the middle of a flood; then the module must
# unload (no reference left behind) and slab usage must be back.
kill9_check() {
	local s0 s1 pp
	sync; echo 3 >/proc/sys/vm/drop_caches; s0=$(slab_kb)
	ping -f -c 100000 -W 1 "$G_GUEST_IP" >/dev/null 2>&1 &
	pp=$!
	sleep 3
	kill -9 "$G_PID"; wait "$G_PID" 2>/dev/null; G_PID=
	kill "$pp" 2>/dev/null; wait "$pp" 2>/dev/null
	sleep 1
	if rmmod vhost_net_rs; then
		sync; echo 3 >/proc/sys/vm/drop_caches; sleep 1; s1=$(slab_kb)
		# A leaked device, its queues and its scratch buffers are ~100 KiB.
		if [ $((s1 - s0)) -lt 512 ]; then vnr_pass "kill_9_mid_flood_then_unload" "slab ${s0} -> ${s1} kB"
		else vnr_fail "kill_9_mid_flood_then_unload" "slab grew ${s0} -> ${s1} kB"; fi
		insmod "$VNR_KO"
	else
		vnr_fail "kill_9_mid_flood_then_unload" "rmmod failed after QEMU was killed"
	fi
}

vnr_ktap_start
vnr_loaded vhost_net_rs || insmod "$VNR_KO"
selftests/load-c-vhost >/dev/null 2>&1 || true
g_tap_up || { vnr_fail tap_setup "could not create $G_TAP"; vnr_ktap_finish; }

# --- boot on vhost-net-rs -------------------------------------------------------
# -only-migratable: QEMU refuses a vhost device that cannot log dirty pages
# (no VHOST_F_LOG_ALL) instead of only blocking migration.
G_QEMU_ARGS=-only-migratable g_start rs
if g_wait >/dev/null; then
	vnr_pass "guest_boots_on_vhost_net_rs_only_migratable" "reachable after ${G_BOOT_S}s"
else
	vnr_fail "guest_boots_on_vhost_net_rs_only_migratable" "$(tail -n 3 "$G_LOG" 2>/dev/null)" "$(cat "$G_LOG.qemu" 2>/dev/null)"
	vnr_ktap_finish
fi

r=$(g_ping -c 200 -i 0.05 -W 2)
read -r tx rx _ <<<"$r"
if [ "$tx" = 200 ] && [ "$rx" = 200 ]; then vnr_pass "ping_200_no_loss" "$r"; else vnr_fail "ping_200_no_loss" "$r"; fi

before_tx=$(g_vq_packets 1) before_rx=$(g_vq_packets 0)
r=$(g_ping -f -c "$FLOOD" -W 2)
read -r tx rx rs_loss _ <<<"$r"
if [ "$tx" = "$FLOOD" ] && [ "${rx:-0}" -gt 0 ]; then vnr_pass "flood_${FLOOD}_completes" "$r"; else vnr_fail "flood_${FLOOD}_completes" "$r"; fi

# Echo requests go host -> guest through vq 0 (RX); replies come back through
# vq 1 (TX). Both counters must have moved by at least what ping saw.
after_tx=$(g_vq_packets 1) after_rx=$(g_vq_packets 0)
dtx=$((${after_tx:-0} - ${before_tx:-0})) drx=$((${after_rx:-0} - ${before_rx:-0}))
if [ "$drx" -ge "${rx:-1}" ] && [ "$dtx" -ge "${rx:-1}" ]; then
	vnr_pass "counters_prove_vhost_net_rs_carried_them" "vq0 +$drx vq1 +$dtx for $rx replies"
else
	vnr_fail "counters_prove_vhost_net_rs_carried_them" "vq0 +$drx vq1 +$dtx for $rx replies" "$(g_fdinfo)"
fi

if [ "$FULL" = 0 ]; then
	# Fast mode: reuse this guest for the kill -9 check.
	kill9_check
	vnr_skip "clean_quit_c_comparison_and_variants" "needs VNR_E2E=full (make check-e2e)"
	vnr_ktap_finish
fi

# Clean quit: QEMU closes the fd, the module must be unloadable again.
g_stop
if rmmod vhost_net_rs && insmod "$VNR_KO"; then vnr_pass "unload_after_clean_quit"; else vnr_fail "unload_after_clean_quit" "rmmod failed"; fi

# --- the C driver, same flood, for the loss comparison --------------------------
if [ -c /dev/vhost-net ]; then
	g_start c
	if g_wait >/dev/null; then
		r=$(g_ping -f -c "$FLOOD" -W 2)
		read -r _ _ c_loss _ <<<"$r"
		d=$(awk -v a="${rs_loss:-100}" -v b="${c_loss:-0}" 'BEGIN { d = a - b; print (d <= 2) ? "ok" : "bad" }')
		if [ "$d" = ok ]; then vnr_pass "flood_loss_within_2pp_of_c" "rs ${rs_loss}% c ${c_loss}%"
		else vnr_fail "flood_loss_within_2pp_of_c" "rs ${rs_loss}% c ${c_loss}%"; fi
	else
		vnr_fail "flood_loss_within_2pp_of_c" "the C-driver guest did not boot"
	fi
	g_stop
else
	vnr_skip "flood_loss_within_2pp_of_c" "no /dev/vhost-net"
fi

# --- the packed virtqueue -----------------------------------------------------------
# A packed=on guest: vhost-net-rs negotiates VIRTIO_F_RING_PACKED (bit 34 of
# the guest's virtio features, ring=packed on both queues in fdinfo) and
# carries the ping and the flood, with a loss within 2 points of the same
# guest on C, which has no packed ring and so runs it on split rings.
packed_loss=
for drv in rs c; do
	if [ "$drv" = c ] && [ ! -c /dev/vhost-net ]; then vnr_skip "packed_guest_on_c_runs_split" "no /dev/vhost-net"; continue; fi
	g_start "$drv" packed=on
	if ! g_wait >/dev/null; then vnr_fail "packed_guest_boots_on_$drv" "$(cat "$G_LOG.qemu" 2>/dev/null)"; g_stop; continue; fi
	bit=$(g_virtio_features | cut -c35)
	rings=$(g_fdinfo | grep -c 'ring=packed')
	if [ "$drv" = rs ]; then
		if [ "$bit" = 1 ] && [ "$rings" = 2 ]; then vnr_pass "packed_guest_negotiates_packed_on_rs" "feature bit 34=$bit, packed rings: $rings"
		else vnr_fail "packed_guest_negotiates_packed_on_rs" "feature bit 34=${bit:-?}, packed rings: $rings" "$(g_fdinfo)"; fi
		r=$(g_ping -c 200 -i 0.05 -W 2)
		read -r tx rx _ <<<"$r"
		if [ "$tx" = 200 ] && [ "$rx" = 200 ]; then vnr_pass "packed_ping_200_no_loss" "$r"; else vnr_fail "packed_ping_200_no_loss" "$r"; fi
		before=$(( $(g_vq_packets 0) + $(g_vq_packets 1) ))
		r=$(g_ping -f -c "$FLOOD" -W 2)
		read -r tx rx packed_loss _ <<<"$r"
		moved=$(( $(g_vq_packets 0) + $(g_vq_packets 1) - before ))
		if [ "$tx" = "$FLOOD" ] && [ "${rx:-0}" -gt 0 ] && [ "$moved" -ge $((2 * rx)) ]; then
			vnr_pass "packed_flood_${FLOOD}_on_rs" "$r; packets counted $moved"
		else
			vnr_fail "packed_flood_${FLOOD}_on_rs" "$r; packets counted $moved" "$(g_fdinfo)"
		fi
	else
		if [ "$bit" = 0 ]; then vnr_pass "packed_guest_on_c_runs_split" "feature bit 34=0"
		else vnr_fail "packed_guest_on_c_runs_split" "feature bit 34=${bit:-?}"; fi
		r=$(g_ping -f -c "$FLOOD" -W 2)
		read -r _ _ c_loss _ <<<"$r"
		if [ -z "$packed_loss" ]; then
			vnr_fail "packed_flood_loss_within_2pp_of_c" "no vhost-net-rs packed flood to compare"
		else
			d=$(awk -v a="$packed_loss" -v b="${c_loss:-0}" 'BEGIN { print (a - b <= 2) ? "ok" : "bad" }')
			if [ "$d" = ok ]; then vnr_pass "packed_flood_loss_within_2pp_of_c" "rs packed ${packed_loss}% c split ${c_loss}%"
			else vnr_fail "packed_flood_loss_within_2pp_of_c" "rs packed ${packed_loss}% c split ${c_loss}%"; fi
		fi
	fi
	g_stop
done

# --- guest-side feature variants --------------------------------------------------
if [ "${VNR_E2E_VARIANTS:-1}" = 1 ]; then
	for v in mrg_rxbuf=off event_idx=off indirect_desc=off csum=off,gso=off; do
		name="flood_variant_${v//[=,]/_}"
		g_start rs "$v"
		if ! g_wait >/dev/null; then vnr_fail "$name" "guest did not boot"; g_stop; continue; fi
		r=$(g_ping -f -c "$FLOOD" -W 2)
		read -r tx rx _ <<<"$r"
		if [ "$tx" = "$FLOOD" ] && [ "${rx:-0}" -gt $((FLOOD / 2)) ]; then vnr_pass "$name" "$r"; else vnr_fail "$name" "$r"; fi
		g_stop
	done
else
	vnr_skip "flood_variants" "VNR_E2E_VARIANTS=0"
fi

# --- kill -9 of QEMU mid-flood: nothing leaks, the module unloads ----------------
g_start rs
if g_wait >/dev/null; then kill9_check; else vnr_fail "kill_9_mid_flood_then_unload" "guest did not boot"; fi
vnr_ktap_finish
