#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# libvirt.sh: libvirt starts and stops a guest on vhost-net-rs, as an
# operator's host does. KTAP output.
#
# For each Debian 13 system scripts/debian-qemu made (libvirt 11.3 with QEMU
# 10.0, libvirt 12.9 with QEMU 11.1), libvirtd runs in that system and
# starts a type='kvm' domain made from etc/libvirt-domain.xml: its disk
# replaced by the nested guest's kernel and initramfs, its first interface
# kept (virtio, <driver name='vhost' queues='2'/>) on a multiqueue tap this
# script makes (type='ethernet', managed='no'), the macvtap one dropped.
# libvirt opens the vhost node itself only for type='kvm' domains, which
# is why this runs where the test VM has KVM. Three forms:
#   rs      <backend vhost='/dev/vhost-net-rs'/>, the C driver loaded too;
#   dropin  no backend attribute: libvirt opens /dev/vhost-net, served by
#           vhost-net-rs loaded with drop_in=1 (the C driver unloaded);
#   c       the same domain as dropin, on the C vhost_net.
# In each: the domain's QEMU holds two vhost fds on the expected node (on
# vhost-net-rs, its counters move), ping, a flood and iperf3 through it,
# `ethtool -L eth0 combined 2` in the guest, `virsh destroy`, and then
# nothing left: no QEMU, no reference on the module (it unloads). `virsh
# save` and `virsh restore` with traffic after run with VNR_LIBVIRT_SAVE=1:
# in the test VM libvirt's save job does not return once QEMU has saved and
# exited, on either driver, so by default they are reported as a skip.
#
# VNR_QEMU_ROOTS="ROOT..." picks the systems (default: every one
# scripts/debian-qemu list names). Skips when there is none or no /dev/kvm.
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib.sh
. scripts/lib.sh
# shellcheck source=../scripts/guest.sh
. scripts/guest.sh
# shellcheck source=ktap.sh
. selftests/ktap.sh
DOM=vnr-libvirt
FLOOD=${VNR_E2E_FLOOD:-2000}
# The system (as scripts/debian-qemu names it) and its view in this boot.
ROOT= VIEW=

in_root() { "$VNR_ROOT/scripts/debian-qemu" enter "$ROOT" "$@"; }
# Every virsh command has two minutes: a hang fails its test instead of
# the run.
virsh() { timeout 120 "$VNR_ROOT/scripts/debian-qemu" enter "$ROOT" virsh -c qemu:///system "$@"; }

cleanup() {
	if [ -n "$ROOT" ]; then
		virsh destroy "$DOM" >/dev/null 2>&1
		virsh undefine "$DOM" >/dev/null 2>&1
		pkill -x libvirtd 2>/dev/null
		wait 2>/dev/null
	fi
	g_tap_down
}
trap cleanup EXIT

vnr_ktap_start
if [ -n "${VNR_QEMU_ROOTS:-}" ]; then
	systems=()
	for r in $VNR_QEMU_ROOTS; do systems+=("x $r"); done
else
	mapfile -t systems < <(scripts/debian-qemu list)
fi
if [ ${#systems[@]} = 0 ]; then
	ktap_skip_all "no Debian 13 system: scripts/debian-qemu prepare makes them (make check-qemu runs it)"
	exit "$KSFT_SKIP"
fi
if [ "$(g_accel)" != kvm ]; then
	ktap_skip_all "libvirt opens the vhost node only for type='kvm' domains, and KVM does not work here ($(g_accel_why))"
	exit "$KSFT_SKIP"
fi

# domain_xml FORM: etc/libvirt-domain.xml made into the test's domain.
domain_xml() {
	FORM=$1 KERNEL=$G_KERNEL INITRD=$G_INITRD TAP=$G_TAP MAC=$G_MAC GUEST_IP=$G_GUEST_IP \
		SERIAL=$SERIAL /usr/bin/python3 - etc/libvirt-domain.xml <<-'EOF'
	import os, sys
	import xml.etree.ElementTree as ET
	e = os.environ
	dom = ET.parse(sys.argv[1]).getroot()
	dom.find("name").text = "vnr-libvirt"
	mem = dom.find("memory"); mem.text = "256"; mem.set("unit", "MiB")
	dom.find("vcpu").text = "2"
	os_ = dom.find("os")
	os_.find("type").set("machine", "pc")
	for tag, text in (("kernel", e["KERNEL"]), ("initrd", e["INITRD"]),
	                  ("cmdline", "console=ttyS0 quiet panic=-1 acpi=off vnr.ip=%s/24" % e["GUEST_IP"])):
	    ET.SubElement(os_, tag).text = text
	devs = dom.find("devices")
	for d in devs.findall("disk") + devs.findall("serial") + devs.findall("console"):
	    devs.remove(d)
	ifaces = devs.findall("interface")
	for i in ifaces[1:]:
	    devs.remove(i)
	nic = ifaces[0]
	nic.set("type", "ethernet")
	nic.remove(nic.find("source"))
	ET.SubElement(nic, "target", dev=e["TAP"], managed="no")
	ET.SubElement(nic, "mac", address=e["MAC"])
	nic.find("driver").set("queues", "2")
	backend = nic.find("backend")
	if e["FORM"] == "rs":
	    backend.set("vhost", "/dev/vhost-net-rs")
	else:
	    del backend.attrib["vhost"]
	serial = ET.SubElement(devs, "serial", type="file")
	ET.SubElement(serial, "source", path=e["SERIAL"])
	ET.SubElement(serial, "target", port="0")
	ET.dump(dom)
	EOF
}

# start_libvirtd: libvirtd in ROOT, QEMU run as root without cgroups,
# namespaces or a security driver (the test VM has none of them set up),
# its output to a file rather than virtlogd.
start_libvirtd() {
	cat >"$VIEW/etc/libvirt/qemu.conf" <<-EOF
	user = "root"
	group = "root"
	dynamic_ownership = 0
	security_driver = "none"
	cgroup_controllers = [ ]
	namespaces = [ ]
	stdio_handler = "file"
	EOF
	cat >"$VIEW/etc/libvirt/libvirtd.conf" <<-EOF
	log_filters = "1:qemu.qemu_saveimage 1:qemu.qemu_process 1:qemu.qemu_driver 1:util.command 3:*"
	log_outputs = "1:file:/var/log/libvirt/libvirtd.log"
	EOF
	mkdir -p "$VIEW/run/libvirt"
	# libvirt's QEMUs are daemons: when one ends, its parent is gone and it
	# is left to be reaped by init, which libvirt waits for. The test VM's
	# init reaps no orphans, so libvirt would see each QEMU it stops live
	# on as a zombie ("Failed to terminate process ... with SIGKILL"), and
	# a save or destroy fail. libvirtd runs under a reaper of its own (a
	# child subreaper) instead.
	/usr/bin/python3 - "$VNR_ROOT/scripts/debian-qemu" "$ROOT" <<-'EOF' &
	import ctypes, os, sys
	ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
	pid = os.fork()
	if pid == 0:
	    os.execv(sys.argv[1], [sys.argv[1], "enter", sys.argv[2], "libvirtd"])
	while True:
	    try:
	        if os.wait()[0] == pid:
	            break
	    except ChildProcessError:
	        break
	EOF
	LIBVIRTD_REAPER=$!
	# It probes each QEMU it finds before it answers: seconds, under TCG more.
	for _ in $(seq 120); do virsh version >/dev/null 2>&1 && return 0; sleep 1; done
	return 1
}

# libvirt_state: for a failure's details: the domain's QEMU log and
# libvirtd's, the processes, the vhost fds' counters.
libvirt_state() {
	tail -n 20 "$VIEW/var/log/libvirt/qemu/$DOM.log" 2>/dev/null
	tail -n 40 "$VIEW/var/log/libvirt/libvirtd.log" 2>/dev/null
	ps -eo pid,ppid,stat,wchan:30,args | grep -E '[q]emu-system|[l]ibvirt|[i]ohelper' | cut -c1-200
	virsh domstate "$DOM" --reason 2>&1
	g_fdinfo
}

# qemu_pid: the domain's QEMU, as libvirt recorded it.
qemu_pid() { cat "$VIEW/run/libvirt/qemu/$DOM.pid" 2>/dev/null; }

# wait_guest: the guest answers ping (up to 120 s).
wait_guest() {
	for _ in $(seq 240); do
		ping -c 1 -W 1 "$G_GUEST_IP" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

# form_case LABEL FORM NODE: the domain's whole life on one form.
form_case() {
	local label=$1 form=$2 node=$3 p="${1}_${2}_" fds r tx rx n rx0 tx0 to from
	SERIAL=/tmp/vnr-libvirt-$form.log
	rm -f "$SERIAL"
	g_tap_down
	G_QUEUES=2 g_tap_up || { vnr_fail "${p}tap_setup" "could not create $G_TAP"; return; }
	domain_xml "$form" >/tmp/vnr-libvirt.xml
	if ! out=$(virsh define /tmp/vnr-libvirt.xml 2>&1) || ! out=$(virsh start "$DOM" 2>&1); then
		vnr_fail "${p}domain_starts" "$out" "$(tail -n 20 "$VIEW/var/log/libvirt/qemu/$DOM.log" 2>/dev/null)"
		virsh undefine "$DOM" >/dev/null 2>&1
		return
	fi
	G_PID=$(qemu_pid)
	if wait_guest; then
		vnr_pass "${p}domain_starts" "QEMU pid $G_PID; guest answers"
	else
		vnr_fail "${p}domain_starts" "the guest did not answer" "$(tail -n 5 "$SERIAL" 2>/dev/null)" \
			"$(tail -n 20 "$VIEW/var/log/libvirt/qemu/$DOM.log" 2>/dev/null)"
		virsh destroy "$DOM" >/dev/null 2>&1; virsh undefine "$DOM" >/dev/null 2>&1
		return
	fi
	# libvirt opened the node: the fds QEMU holds.
	# QEMU runs in the system's chroot: its fds show the node below it.
	fds=$(for f in /proc/"$G_PID"/fd/*; do readlink "$f"; done | grep -c "$node\$")
	if [ "$fds" = 2 ]; then vnr_pass "${p}qemu_holds_two_vhost_fds_on_${node##*/}"
	else vnr_fail "${p}qemu_holds_two_vhost_fds_on_${node##*/}" "$fds fds on $node"; fi
	rx0=$(g_vq_packets 0) tx0=$(g_vq_packets 1)
	r=$(g_ping -c 100 -i 0.02 -W 2)
	read -r tx rx _ <<<"$r"
	if [ "$tx" = 100 ] && [ "$rx" = 100 ]; then vnr_pass "${p}ping_100_no_loss" "$r"; else vnr_fail "${p}ping_100_no_loss" "$r"; fi
	r=$(g_ping -f -c "$FLOOD" -W 2)
	read -r tx rx _ <<<"$r"
	if [ "$tx" = "$FLOOD" ] && [ "${rx:-0}" -gt $((FLOOD / 2)) ]; then vnr_pass "${p}flood_${FLOOD}" "$r"; else vnr_fail "${p}flood_${FLOOD}" "$r"; fi
	to=$(g_iperf 3 "${p}iperf3") from=$(g_iperf 3 "${p}iperf3" -R)
	if awk -v a="$to" -v b="$from" 'BEGIN { exit !(a > 0 && b > 0) }'; then
		vnr_pass "${p}iperf3_both_ways" "host -> guest $to Mbit/s, guest -> host $from Mbit/s"
	else
		vnr_fail "${p}iperf3_both_ways" "host -> guest $to Mbit/s, guest -> host $from Mbit/s"
	fi
	if [ "$node" != /dev/vhost-net ] || [ "$form" = dropin ]; then
		n=$(( $(g_vq_packets 0) - rx0 + $(g_vq_packets 1) - tx0 ))
		if [ "$n" -gt "$FLOOD" ]; then vnr_pass "${p}counters_prove_vhost_net_rs" "+$n packets on its queues"
		else vnr_fail "${p}counters_prove_vhost_net_rs" "+$n packets on its queues" "$(g_fdinfo)"; fi
	fi
	if r=$(g_run "ethtool -L eth0 combined 2 && ethtool -l eth0 | tail -n 5"); then
		vnr_pass "${p}ethtool_L_combined_2" "$(echo "$r" | tr '\n' ' ')"
	else
		vnr_fail "${p}ethtool_L_combined_2" "$r"
	fi
	r=$(g_ping -f -c 500 -W 2)
	read -r tx rx _ <<<"$r"
	if [ "${rx:-0}" -gt 250 ]; then vnr_pass "${p}flood_on_two_queue_pairs" "$r"; else vnr_fail "${p}flood_on_two_queue_pairs" "$r"; fi
	# save: QEMU stops and its fds close; restore: libvirt opens the node
	# again for a new QEMU, which loads the rings' state.
	rm -f /tmp/vnr-libvirt.sav
	if [ "${VNR_LIBVIRT_SAVE:-0}" != 1 ]; then
		vnr_skip "${p}save_restore" "in the test VM libvirt's save job does not return after QEMU has saved and exited (libvirt 11.3 and 12.9, on C as on vhost-net-rs); VNR_LIBVIRT_SAVE=1 runs it"
	elif ! out=$(virsh save "$DOM" /tmp/vnr-libvirt.sav 2>&1); then
		vnr_fail "${p}save" "$out" "$(libvirt_state)"
	elif vnr_pass "${p}save" "$(ls -l /tmp/vnr-libvirt.sav)" && ! out=$(virsh restore /tmp/vnr-libvirt.sav 2>&1); then
		vnr_fail "${p}restore_then_traffic" "$out" "$(libvirt_state)"
	else
		G_PID=$(qemu_pid)
		r=$(g_ping -c 50 -i 0.05 -W 2)
		read -r tx rx _ <<<"$r"
		if [ "${rx:-0}" -ge 45 ]; then vnr_pass "${p}restore_then_traffic" "$r"
		else vnr_fail "${p}restore_then_traffic" "$r" "$(tail -n 5 "$SERIAL")" "$(libvirt_state)"; fi
	fi
	rm -f /tmp/vnr-libvirt.sav
	virsh destroy "$DOM" >/dev/null 2>&1
	virsh undefine "$DOM" >/dev/null 2>&1
	sleep 1
	if kill -0 "$G_PID" 2>/dev/null; then
		vnr_fail "${p}destroy_leaves_nothing" "QEMU $G_PID still runs"
	else
		vnr_pass "${p}destroy_leaves_nothing" "QEMU gone"
	fi
	G_PID=
	g_tap_down
}

# reload_rs [ARGS]: whether vhost_net_rs unloads now (no reference left),
# then loads it again with ARGS.
reload_rs() {
	rmmod vhost_net_rs 2>/dev/null && insmod "$VNR_KO" "$@"
}

vnr_loaded vhost_net_rs || insmod "$VNR_KO"
selftests/load-c-vhost >/dev/null 2>&1 || true
for sys in "${systems[@]}"; do
	read -r _ ROOT <<<"$sys"
	VIEW=$(scripts/debian-qemu where "$ROOT")
	label=libvirt-$(in_root dpkg-query -W -f '${Version}' libvirt-daemon | sed 's/[-~+].*//')
	echo "# ===== $label ($(cat "$ROOT/.vnr-qemu-version")) in $ROOT"
	if ! start_libvirtd; then
		vnr_fail "${label}_libvirtd_starts" "$(tail -n 20 "$VIEW/var/log/libvirt/libvirtd.log" 2>/dev/null)"
		continue
	fi
	vnr_pass "${label}_libvirtd_starts" "$(virsh version 2>&1 | tr '\n' ' ')"
	form_case "$label" rs /dev/vhost-net-rs
	if reload_rs; then vnr_pass "${label}_rs_module_unloads_after"; else vnr_fail "${label}_rs_module_unloads_after" "rmmod failed"; fi
	# The drop-in: the C driver out of the way, vhost-net-rs on its node.
	rmmod vhost_net 2>/dev/null
	if [ -c /dev/vhost-net ] || ! reload_rs drop_in=1; then
		vnr_fail "${label}_dropin_loads" "$(dmesg | tail -n 3)"
	else
		form_case "$label" dropin /dev/vhost-net
		if reload_rs; then vnr_pass "${label}_dropin_module_unloads_after"; else vnr_fail "${label}_dropin_module_unloads_after" "rmmod failed"; fi
	fi
	if selftests/load-c-vhost >/dev/null 2>&1; then
		form_case "$label" c /dev/vhost-net
	else
		vnr_skip "${label}_c" "the C vhost_net did not load"
	fi
	pkill -x libvirtd
	wait "$LIBVIRTD_REAPER" 2>/dev/null
done
vnr_ktap_finish
