#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# distro-install.sh: on a distribution's stock kernel or the distribution-
# like test kernel (scripts/distro-test boots one in the test VM), installs
# what `make install` staged for it and loads it the way an operator does:
# `modprobe vhost_net_rs`. KTAP output.
#
# VNR_STAGE names the staged root (make install DESTDIR=...; for the
# distribution-like kernel it also holds that kernel's own modules). The
# files go into this VM's root (a copy-on-write overlay of the host's),
# depmod indexes them with the kernel's modules, and modprobe must load tun
# (and tap, where it is a module) first. A signed module must load with
# signatures enforced; an unsigned one where they are not. Leaves the
# module loaded.
here=$(dirname "$0")
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"
# shellcheck source=ktap.sh
. "$here/ktap.sh"
: "${VNR_STAGE:?set VNR_STAGE to the root make install staged}"
rel=$(uname -r)
DEV=/dev/vhost-net-rs

vnr_ktap_start
ktap_set_plan 8
staged=("$VNR_STAGE/lib/modules/$rel/extra"/vhost-net-rs.ko*)
if [ -f "${staged[0]}" ]; then
	vnr_pass "staged_for_running_kernel" "$rel: ${staged[0]#"$VNR_STAGE"}"
else
	vnr_fail "staged_for_running_kernel" "nothing staged for $rel: $(find "$VNR_STAGE" -name 'vhost-net-rs.ko*' | tr '\n' ' ')"
	vnr_ktap_finish
fi
install_into_root() {
	mkdir -p "/lib/modules/$rel" &&
		cp -r "$VNR_STAGE/lib/modules/$rel/." "/lib/modules/$rel/" &&
		cp -r "$VNR_STAGE/etc/." /etc/ &&
		depmod -a "$rel"
}
vnr_check "installed_and_indexed" install_into_root
vnr_check "modinfo_by_name_reports_version" \
	test "$(modinfo -F version vhost_net_rs 2>/dev/null)" = "$(cat "$here/../VERSION")"
vermagic=$(modinfo -F vermagic vhost_net_rs 2>/dev/null)
if [ "${vermagic%% *}" = "$rel" ]; then vnr_pass "vermagic_matches_kernel" "$vermagic"
else vnr_fail "vermagic_matches_kernel" "vermagic '$vermagic', kernel $rel"; fi

# The dependencies must come from depmod's index, not be loaded already.
deps=$(modinfo -F depends vhost_net_rs 2>/dev/null | tr ',' ' ')
preloaded=
for dep in $deps; do
	if vnr_loaded "$dep" && ! rmmod "$dep" 2>/dev/null; then preloaded+=" $dep"; fi
done
before=$(dmesg | wc -l)
if modprobe vhost_net_rs && vnr_wait_node "$DEV"; then
	vnr_pass "modprobe_loads_module" "$(tr -d '\n' </sys/module/vhost_net_rs/version)"
else
	vnr_fail "modprobe_loads_module" "$(dmesg | tail -n +"$((before + 1))" | tail -n 5 | tr '\n' '|')"
fi
missing=
for dep in $deps; do vnr_loaded "$dep" || missing+=" $dep"; done
if [[ " $deps " != *" tun "* ]]; then vnr_fail "modprobe_loaded_its_dependencies_first" "tun is not a dependency ('$deps'): is it built in?"
elif [ -n "$preloaded" ]; then vnr_skip "modprobe_loaded_its_dependencies_first" "already loaded and in use before modprobe:$preloaded"
elif [ -n "$missing" ]; then vnr_fail "modprobe_loaded_its_dependencies_first" "not loaded:$missing"
else vnr_pass "modprobe_loaded_its_dependencies_first" "$deps"; fi
# No symbol may have failed to resolve against the distribution's kernel.
if dmesg | tail -n +"$((before + 1))" | grep -E 'vhost_net_rs: (Unknown symbol|disagrees)'; then
	vnr_fail "symbols_resolved" "see the lines above"
else
	vnr_pass "symbols_resolved"
fi
# Signed by make install with the kernel's key (the distribution-like
# kernel): it loads with signatures enforced and taints nothing for it.
# Unsigned (a distribution's key stays with it), or signed by a key the
# kernel does not trust (DKMS's, not enrolled: scripts/distro-test
# --module): the kernel loads it as signatures are not enforced, and marks
# itself tainted 'E' (8192).
tainted=$(cat /proc/sys/kernel/tainted)
sig_enforce=$(cat /sys/module/module/parameters/sig_enforce 2>/dev/null || echo unknown)
signer=$(modinfo -F signer vhost_net_rs 2>/dev/null)
if [ -n "$signer" ] && [ "$sig_enforce" = Y ]; then
	if vnr_loaded vhost_net_rs && [ $((tainted & 8192)) = 0 ]; then
		vnr_pass "signed_module_verified" "signer '$signer', sig_enforce=Y, tainted=$tainted"
	else
		vnr_fail "signed_module_verified" "signer '$signer', sig_enforce=$sig_enforce, tainted=$tainted"
	fi
elif [ "$sig_enforce" != Y ] && vnr_loaded vhost_net_rs; then
	name=unsigned_module_accepted by=''
	if [ -n "$signer" ]; then name=untrusted_signature_accepted by="signer '$signer', "; fi
	vnr_pass "$name" "${by}sig_enforce=$sig_enforce, tainted=$tainted (E=8192: $(((tainted & 8192) != 0)))"
else
	vnr_fail "unsigned_module_accepted" "signer '$signer', sig_enforce=$sig_enforce, tainted=$tainted"
fi
vnr_ktap_finish
