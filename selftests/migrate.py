#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""migrate.py: the host side of selftests/migrate.sh.

  migrate.py qmp SOCK COMMAND [JSON-ARGS]
      Runs one QMP command on the QEMU whose QMP socket is SOCK and prints
      its "return" value as JSON. Exit 1 with QEMU's error on failure.
  migrate.py migrate SOCK URI TIMEOUT [MAX_BANDWIDTH]
      Starts a migration of the QEMU at SOCK to URI (at most MAX_BANDWIDTH
      bytes/s if given) and waits for it to end.
      Prints "total_ms downtime_ms setup_ms transferred_bytes" once it has
      completed; exit 1 with the status if it failed or timed out.
  migrate.py wait-status SOCK STATUS TIMEOUT
      Waits until the QEMU at SOCK reports run state STATUS ("running").
  migrate.py pagediff FILE_A FILE_B
      Compares two guest RAM dumps (pmemsave from guest-physical 0) page by
      page, 4 KiB pages, skipping the legacy VGA and ROM hole
      (0xa0000-0xfffff). Prints "N pages differ" and the first pages that
      do, each with its first differing offset and the bytes there.
  migrate.py stream HOST PORT RATE STOPFILE
      Connects to HOST:PORT and sends a deterministic byte stream at about
      RATE bytes per second until STOPFILE exists, then closes. Prints
      "bytes md5" of what it sent.
"""
import hashlib
import json
import os
import socket
import sys
import time


class Qmp:
    """A QMP connection: the greeting read, capabilities negotiated."""

    def __init__(self, path, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.file = self.sock.makefile("rw")
        self.read()
        self.run("qmp_capabilities")

    def read(self):
        line = self.file.readline()
        if not line:
            raise OSError("QMP connection closed")
        return json.loads(line)

    def run(self, command, arguments=None):
        msg = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self.file.write(json.dumps(msg) + "\n")
        self.file.flush()
        while True:
            reply = self.read()
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise RuntimeError(f"{command}: {reply['error'].get('desc', reply['error'])}")
            # An asynchronous event: skip it.


def migrate(path, uri, timeout, bandwidth):
    qmp = Qmp(path)
    if bandwidth:
        qmp.run("migrate-set-parameters", {"max-bandwidth": bandwidth})
    qmp.run("migrate", {"uri": uri})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = qmp.run("query-migrate")
        status = info.get("status")
        if status == "completed":
            ram = info.get("ram", {})
            print(info.get("total-time", 0), info.get("downtime", 0), info.get("setup-time", 0),
                  ram.get("transferred", 0))
            return 0
        if status in ("failed", "cancelled"):
            print(f"migration {status}: {info.get('error-desc', '')}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    print(f"migration did not end in {timeout}s: {qmp.run('query-migrate')}", file=sys.stderr)
    return 1


def wait_status(path, status, timeout):
    qmp = Qmp(path, timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = qmp.run("query-status").get("status")
        if now == status:
            return 0
        time.sleep(0.2)
    print(f"run state is {now}, not {status}, after {timeout}s", file=sys.stderr)
    return 1


def stream(host, port, rate, stopfile):
    """Sends blocks of SHA-256 output (block n is the digest chain from n):
    reproducible, not compressible, and different on every page."""
    # The guest's reader is stopped for a while: the window may stay shut
    # for as long as the migration takes.
    sock = socket.create_connection((host, port), timeout=300)
    md5 = hashlib.md5()
    sent = 0
    chunk = 16384
    seed = hashlib.sha256(b"vhost-net-rs migration stream").digest()
    start = time.monotonic()
    while not os.path.exists(stopfile):
        block = bytearray()
        while len(block) < chunk:
            seed = hashlib.sha256(seed).digest()
            block += seed
        sock.sendall(block)
        md5.update(block)
        sent += len(block)
        ahead = sent / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    # A FIN after the data: the receiver sees all of it, then the end.
    sock.shutdown(socket.SHUT_WR)
    sock.close()
    print(sent, md5.hexdigest())
    return 0


def pagediff(path_a, path_b):
    page = 4096
    differ = []
    with open(path_a, "rb") as file_a, open(path_b, "rb") as file_b:
        gpa = 0
        while True:
            chunk_a, chunk_b = file_a.read(page), file_b.read(page)
            if not chunk_a and not chunk_b:
                break
            if chunk_a != chunk_b and not 0xA0000 <= gpa < 0x100000:
                off = next((i for i in range(min(len(chunk_a), len(chunk_b)))
                            if chunk_a[i] != chunk_b[i]), min(len(chunk_a), len(chunk_b)))
                nbytes = sum(1 for x, y in zip(chunk_a, chunk_b) if x != y)
                differ.append(f"{gpa:#x}+{off:#x} ({nbytes} B): "
                              f"{chunk_a[off:off + 16].hex()} vs {chunk_b[off:off + 16].hex()}")
            gpa += page
    print(f"{len(differ)} pages differ")
    for line in differ[:40]:
        print(line)
    return 0


def main(argv):
    try:
        if len(argv) >= 3 and argv[1] == "qmp":
            args = json.loads(argv[4]) if len(argv) > 4 else None
            print(json.dumps(Qmp(argv[2]).run(argv[3], args)))
            return 0
        if len(argv) in (5, 6) and argv[1] == "migrate":
            return migrate(argv[2], argv[3], float(argv[4]), int(argv[5]) if len(argv) == 6 else 0)
        if len(argv) == 5 and argv[1] == "wait-status":
            return wait_status(argv[2], argv[3], float(argv[4]))
        if len(argv) == 4 and argv[1] == "pagediff":
            return pagediff(argv[2], argv[3])
        if len(argv) == 6 and argv[1] == "stream":
            return stream(argv[2], int(argv[3]), float(argv[4]), argv[5])
    except (OSError, RuntimeError, ValueError) as err:
        print(f"migrate.py {argv[1]}: {err}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
