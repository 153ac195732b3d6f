"""A real SLURM cluster for tests: munged, slurmctld and slurmd from Debian's packages (munge,
slurmctld, slurmd, slurm-client; .ci/run installs them), run as root in the foreground on free
ports, with every file under one directory. One node on this machine, or two: one slurmd in
each network namespace of a tests/netns_util.Hosts (the controller and srun on hostA).

    c = Cluster(tmp_path); c.start()              # or Cluster(tmp_path, hosts)
    c.srun(["-n2", "python", "job.py"])          # -> CompletedProcess, bounded by a timeout
    c.stop()                                      # the daemons and every task they started

Node names resolve as a cluster's do: the one node is `localhost` (slurmd -N); on two hosts,
each daemon runs in its host's network namespace (nsenter) and a mount namespace of its own
where a hosts file naming hostA and hostB is bound over /etc/hosts (not `ip netns exec`: it
remounts /sys, and slurmd needs the machine's cgroup mounts). Every process of the cluster,
tasks included, carries CDDP_SLURM_TEST=<directory> in its environment; stop() kills whatever
still has it. One munged serves both namespaces (its socket is a file).
"""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time

NEEDED = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def slurm_unavailable():
    """None when a cluster can be started here, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root (CI runs as root)"
    missing = [t for t in NEEDED if not shutil.which(t)]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} missing): apt-get install "
                f"munge slurmctld slurmd slurm-client")
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """\
ClusterName=cddptest
SlurmctldHost={host}({host_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=2
SlurmctldLogFile={d}/ctld.log
SlurmdLogFile={d}/slurmd-%n.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


class Cluster:
    """One node with this machine's CPUs, or one per host of `hosts`; srun overcommits them
    (more tasks than CPUs)."""

    def __init__(self, root, hosts=None):
        self.d = str(root)
        self.cpus = os.cpu_count() or 1
        self.hosts = hosts
        if hosts is None:       # (node name, address, argv prefix that runs a command there)
            self.nodes = [("localhost", "127.0.0.1", [])]
            self.controller = (socket.gethostname(), "127.0.0.1", [])
        else:
            names = os.path.join(self.d, "hosts")
            self.nodes = [(f"host{h}", hosts.addr[h], [
                "nsenter", f"--net=/run/netns/{hosts.ns[h]}", "unshare", "--mount", "--uts",
                "sh", "-c", 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && '
                'exec "$@"', "sh", names, f"host{h}"]) for h in "AB"]
            self.controller = self.nodes[0]
        self.conf = os.path.join(self.d, "slurm.conf")
        self.daemons = []
        self.env = dict(os.environ, SLURM_CONF=self.conf, CDDP_SLURM_TEST=self.d)
        for k in [k for k in self.env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del self.env[k]

    def start(self, timeout=60):
        for sub in ["state"] + [f"spool/{n}" for n, _, _ in self.nodes]:
            os.makedirs(os.path.join(self.d, sub), exist_ok=True)
        if self.hosts is not None:
            with open(os.path.join(self.d, "hosts"), "w") as f:
                f.write("127.0.0.1 localhost\n" +
                        "".join(f"{a} {n}\n" for n, a, _ in self.nodes))
        key = os.path.join(self.d, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(secrets.token_bytes(1024))
        with open(self.conf, "w") as f:
            f.write(CONF.format(
                host=self.controller[0], host_addr=self.controller[1], d=self.d,
                ctld_port=_free_port(), slurmd_port=_free_port(),
                nodes="".join(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} RealMemory=1000 "
                              f"State=UNKNOWN\n" for n, a, _ in self.nodes)))
        self._daemon(["munged", "-F", "--force", f"--socket={self.d}/munge.sock",
                      f"--key-file={key}", f"--pid-file={self.d}/munged.pid",
                      f"--log-file={self.d}/munged.log", f"--seed-file={self.d}/munge.seed"])
        self._until(lambda: os.path.exists(f"{self.d}/munge.sock"), timeout, "munged")
        self._daemon([*self.controller[2], "slurmctld", "-D", "-f", self.conf])
        for name, _, prefix in self.nodes:
            self._daemon([*prefix, "slurmd", "-D", "-f", self.conf, "-N", name])
        self._until(self._idle, timeout, "the nodes to register")

    def srun(self, args, timeout=120, cwd=None, env=None):
        """srun ARGS, bounded: on timeout the cluster's tasks are killed and it raises."""
        e = dict(self.env, **(env or {}))
        try:
            return subprocess.run([*self.controller[2], "srun", "--overcommit", f"--time={max(1, timeout // 60 + 1)}",
                                   *args],
                                  env=e, cwd=cwd, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as ex:
            self.kill_tasks()
            raise AssertionError(f"srun {' '.join(args)} timed out after {timeout}s\n"
                                 f"{ex.stdout}\n{ex.stderr}") from None

    def tasks(self, settle=5.0):
        """"pid name" of every process the cluster's jobs started (not the daemons nor their
        helpers: slurmscriptd, slurmstepd), after waiting up to `settle` seconds for them to
        end."""
        end = time.monotonic() + settle
        while True:
            left = [t for t in self._tasks() if not t.split()[1].startswith("slurm")]
            if not left or time.monotonic() > end:
                return left
            time.sleep(0.1)

    def _tasks(self):
        """"pid name" of every process with the cluster's marker, daemons' helpers included."""
        mine = {p.pid for p in self.daemons}
        marker = f"CDDP_SLURM_TEST={self.d}".encode()
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) in mine or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if marker not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{pid}/comm") as f:
                    out.append(f"{pid} {f.read().strip()}")
            except OSError:
                pass
        return out

    def kill_tasks(self):
        for task in self._tasks():
            try:
                os.kill(int(task.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        for p in reversed(self.daemons):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.daemons):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.kill_tasks()
        self.daemons = []

    def log(self):
        out = []
        for name in ["ctld.log", "munged.log"] + [f"slurmd-{n}.log" for n, _, _ in self.nodes]:
            try:
                with open(os.path.join(self.d, name)) as f:
                    out.append(f"--- {name}\n" + f.read()[-2000:])
            except OSError:
                pass
        return "\n".join(out)

    # ---- helpers --------------------------------------------------------------------------

    def _daemon(self, argv):
        self.daemons.append(subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL,
                                             start_new_session=True))

    def _idle(self):
        r = subprocess.run([*self.controller[2], "sinfo", "-h", "-o", "%T"], env=self.env,
                           capture_output=True, text=True, timeout=30)
        return r.returncode == 0 and r.stdout.split() == ["idle"]

    def _until(self, ready, timeout, what):
        end = time.monotonic() + timeout
        while not ready():
            dead = [p.args[0] for p in self.daemons if p.poll() is not None]
            if os.path.exists(f"{self.d}/ctld.log") and "state set to DRAIN" in open(
                    f"{self.d}/ctld.log").read():
                dead.append("slurmd (the controller drained the node)")
            if dead or time.monotonic() > end:
                raise RuntimeError(f"SLURM test cluster: waiting for {what} "
                                   f"({'exited: ' + ', '.join(dead) if dead else 'timed out'})"
                                   f"\n{self.log()}")
            time.sleep(0.2)
