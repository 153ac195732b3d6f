"""Two "hosts" on one machine for multi-host tests and benchmarks: network namespaces A and B
joined by a veth pair, each with its own address (10.213.N.1 / .2) and, for the processes
started through `Hosts.cmd`, its own host name (hostA / hostB, a UTS namespace), so cddp's
rendezvous sees two hosts and their traffic crosses the veth. Needs root, `ip` (iproute2) and
`unshare` (util-linux). Used by tests/test_multihost.py and bench/collectives.py.

    h = Hosts(); h.create()
    subprocess.Popen(h.cmd("A", ["python", "job.py"]))      # runs on hostA, 10.213.N.1
    ...; h.destroy()                                          # kills what runs there, removes it

kill_session(sid) kills every process of a session: mpirun puts each rank in a process group
of its own, so killing mpirun's group would leave the ranks behind.
"""
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time

_serial = itertools.count()


def kill_session(sid):
    """SIGKILL every process whose session id is sid (a child started with
    start_new_session=True has sid == its pid), whatever process group it moved to."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                os.kill(int(d), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            pass


def _sweep_stale():
    """Remove the namespaces of test runs that died before their finalizers (SIGKILL): named
    cd<pid>x<n>A/B after a pid that is gone."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    for line in r.stdout.splitlines():
        m = re.match(r"(cd(\d+)x\d+[AB])\b", line)
        if m and not os.path.exists(f"/proc/{m.group(2)}"):
            pids = subprocess.run(["ip", "netns", "pids", m.group(1)], capture_output=True,
                                  text=True, timeout=30).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", m.group(1)], capture_output=True, timeout=30)


def netns_unavailable():
    """None when two namespaces can be made here, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    for tool in ("ip", "unshare"):
        if not shutil.which(tool):
            return f"`{tool}` is not installed (apt-get install iproute2 util-linux)"
    probe = f"cddpp{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                       timeout=30)
    if r.returncode:
        return f"cannot create a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    _sweep_stale()
    return None


class Hosts:
    """Two namespaces A, B joined by a veth pair; host names hostA / hostB."""

    def __init__(self):
        n = next(_serial)
        self.tag = f"cd{os.getpid()}x{n}"        # <= 12 chars + a/b: within IFNAMSIZ
        self.ns = {"A": self.tag + "A", "B": self.tag + "B"}
        self.dev = {"A": self.tag + "a", "B": self.tag + "b"}
        net = 10 + (os.getpid() + n) % 200
        self.addr = {"A": f"10.213.{net}.1", "B": f"10.213.{net}.2"}
        self.cidr = f"10.213.{net}.0/24"
        self.up = False

    def sh(self, *argv):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if r.returncode:
            raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
        return r.stdout

    def create(self):
        self.up = True
        for h in "AB":
            self.sh("ip", "netns", "add", self.ns[h])
        self.sh("ip", "link", "add", self.dev["A"], "type", "veth", "peer", "name", self.dev["B"])
        for h in "AB":
            self.sh("ip", "link", "set", self.dev[h], "netns", self.ns[h])
            self.sh("ip", "-n", self.ns[h], "addr", "add", self.addr[h] + "/24", "dev",
                    self.dev[h])
            self.sh("ip", "-n", self.ns[h], "link", "set", self.dev[h], "up")
            self.sh("ip", "-n", self.ns[h], "link", "set", "lo", "up")

    def cmd(self, h, argv):
        """argv run on host h: inside its namespace, with its own host name."""
        return ["ip", "netns", "exec", self.ns[h], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', "host" + h, *argv]

    def mpirun_args(self, agent_path, nprocs):
        """mpirun options for nprocs ranks, half on each host: writes the "ssh" mpirun uses
        to start its daemon on hostB (a script that runs the command in that namespace under
        that host name) to agent_path; out-of-band and MPI traffic pinned to the veth."""
        with open(agent_path, "w") as f:
            f.write("#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n"
                    f"  hostA) ns={self.ns['A']} ;;\n  hostB) ns={self.ns['B']} ;;\n"
                    "  *) echo \"no host $host\" >&2; exit 1 ;;\nesac\n"
                    "exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $host; $*\"\n")
        os.chmod(agent_path, 0o755)
        half = nprocs // 2
        return ["-np", str(nprocs), "--host", f"hostA:{half},hostB:{nprocs - half}",
                "--mca", "plm_rsh_agent", str(agent_path), "--mca", "oob_tcp_if_include",
                self.cidr, "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include",
                self.cidr]

    def pids(self, h):
        r = subprocess.run(["ip", "netns", "pids", self.ns[h]], capture_output=True, text=True,
                           timeout=30)
        return [int(p) for p in r.stdout.split()]

    def kill_all(self, h):
        for pid in self.pids(h):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def tx_bytes(self, h):
        """Bytes host h sent over its end of the veth pair."""
        out = self.sh("ip", "-n", self.ns[h], "-s", "-j", "link", "show", self.dev[h])
        return json.loads(out)[0]["stats64"]["tx"]["bytes"]

    def destroy(self):
        if not self.up:
            return
        for h in "AB":
            self.kill_all(h)
        end = time.monotonic() + 5
        while any(self.pids(h) for h in "AB") and time.monotonic() < end:
            time.sleep(0.05)
        # a veth still in this namespace (create() failed half way) goes with its peer
        subprocess.run(["ip", "link", "del", self.dev["A"]], capture_output=True, timeout=30)
        for h in "AB":
            subprocess.run(["ip", "netns", "del", self.ns[h]], capture_output=True, timeout=30)
