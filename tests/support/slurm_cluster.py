"""A real Slurm cluster on this machine for tests/runtime/test_slurm.py: Debian's munged, slurmctld and
slurmd (22.05), started from a temporary folder and stopped at the end.

- One munge key and one slurm.conf in a temp folder (`SLURM_CONF` points at it): free ports,
  state and spool folders, logs, proctrack/linuxproc and task/none (no cgroups: this runs in a
  container), no accounting.
- Node `vm` is this machine's slurmd. Where root can make a network namespace, a second slurmd
  (`vm2`) runs inside one (`ip netns add`, a veth pair named `lkslurm0` on both sides:
  10.77.0.1 here, 10.77.0.2 there), so Slurm's two nodes have two network stacks: their own
  addresses, loopbacks and abstract Unix sockets (the node agents'). Both nodes share this
  machine's file system, processes and host name; that is what is not separate.
- Both node names resolve to 127.0.0.1 here, which a real cluster's names do not, so a
  TaskProlog (what sites use to set a job's environment) gives each task its node's address as
  torchrun's `--local-addr` (`PET_LOCAL_ADDR`); nothing else is added to the printed commands.

`Slurm.start()` waits until every node is idle; `stop()` cancels what is left, ends the
daemons (and the namespace), and checks that none of their processes remain.
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from labkit.runtime.ports import free_ports     # (below the ephemeral range: no port race)

NETNS, VETH = "lkslurm", "lkslurm0"
HOST_ADDR, NODE2_ADDR = "10.77.0.1", "10.77.0.2"
TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol")


def why_not() -> str:
    """Why a real Slurm cannot be started here, or ''."""
    if os.geteuid() != 0:
        return "needs root to start munged, slurmctld and slurmd (CI runs as root)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return (f"Debian's Slurm is not installed ({', '.join(missing)} missing; .ci/run installs "
                "slurmctld slurmd slurm-client munge as root)")
    return ""


def _die_with_parent() -> None:
    """In the daemon before exec: SIGTERM when the test process ends, even killed (a pytest
    timeout), so that no daemon outlives a test run that could not reach stop()."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG


def _run(*cmd, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=20)


class Slurm:
    def __init__(self):
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="labkit-slurm-"))
        self.folder.chmod(0o755)                  # munged wants its socket's folder searchable
        self.conf = self.folder / "slurm.conf"
        self.procs, self.two_nodes = [], False
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    # -- the network namespace of the second node ---------------------------------------------
    def _netns(self) -> bool:
        if shutil.which("ip") is None or shutil.which("nsenter") is None:
            return False
        _run("ip", "netns", "del", NETNS, check=False)       # one a killed run left behind
        _run("ip", "link", "del", VETH, check=False)
        steps = [("ip", "netns", "add", NETNS),
                 ("ip", "link", "add", VETH, "type", "veth", "peer", "name", "lkslurm1"),
                 ("ip", "link", "set", "lkslurm1", "netns", NETNS),
                 ("ip", "addr", "add", f"{HOST_ADDR}/24", "dev", VETH),
                 ("ip", "link", "set", VETH, "up"),
                 ("ip", "netns", "exec", NETNS, "ip", "link", "set", "lkslurm1", "name", VETH),
                 ("ip", "netns", "exec", NETNS, "ip", "addr", "add", f"{NODE2_ADDR}/24", "dev", VETH),
                 ("ip", "netns", "exec", NETNS, "ip", "link", "set", VETH, "up"),
                 ("ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up")]
        for step in steps:
            if _run(*step, check=False).returncode:
                _run("ip", "netns", "del", NETNS, check=False)
                return False
        return True

    # -- configuration -------------------------------------------------------------------------
    def _write(self) -> None:
        f = self.folder
        for d in ("munge", "state", "spool", "spool/vm", "spool/vm2", "log"):
            (f / d).mkdir()
        (f / "munge").chmod(0o755)
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        prolog = f / "task_prolog.sh"
        prolog.write_text("#!/bin/sh\n# the node's address for torchrun's --local-addr (see tests/support/slurm_cluster.py)\n"
                          f"a=$(ip -4 -o addr show dev {VETH} 2>/dev/null | awk '{{print $4}}' | cut -d/ -f1)\n"
                          '[ -n "$a" ] && echo "export PET_LOCAL_ADDR=$a"\nexit 0\n')
        prolog.chmod(0o755)
        ctld = HOST_ADDR if self.two_nodes else "127.0.0.1"
        ports = free_ports(2, host="")             # (slurmctld and slurmd listen on every address)
        nodes = [f"NodeName=vm NodeAddr={ctld} CPUs=2 State=UNKNOWN"]
        if self.two_nodes:
            nodes.append(f"NodeName=vm2 NodeAddr={NODE2_ADDR} CPUs=2 State=UNKNOWN")
        self.conf.write_text("\n".join([
            "ClusterName=labkit", f"SlurmctldHost={socket.gethostname()}({ctld})",
            f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={f}/munge/sock",
            "SlurmUser=root", "SlurmdUser=root", "MailProg=/bin/true",
            f"StateSaveLocation={f}/state", f"SlurmdSpoolDir={f}/spool/%n",
            f"SlurmctldPidFile={f}/slurmctld.pid", f"SlurmdPidFile={f}/slurmd-%n.pid",
            f"SlurmctldLogFile={f}/log/slurmctld.log", f"SlurmdLogFile={f}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", f"TaskProlog={prolog}",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "MpiDefault=none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "SchedulerType=sched/builtin", "ReturnToService=2",
            "KillWait=5", "MinJobAge=300", "InactiveLimit=0", *nodes,
            f"PartitionName=lab Nodes={','.join(n.split()[0][9:] for n in nodes)} Default=YES "
            "MaxTime=INFINITE State=UP OverSubscribe=YES", ""]))

    def _daemon(self, name: str, *cmd) -> None:
        log = open(self.folder / "log" / f"{name}.out", "w")
        self.procs.append((name, subprocess.Popen(list(cmd), env=self.env, stdout=log,
                                                  stderr=subprocess.STDOUT, start_new_session=True,
                                                  preexec_fn=_die_with_parent)))

    def start(self, timeout: float = 30.0) -> "Slurm":
        """Start it, and point this process's SLURM_CONF at it (as on a login node) until stop()."""
        self.saved_conf = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(self.conf)
        self.two_nodes = self._netns()
        self._write()
        f = self.folder
        self._daemon("munged", "munged", "-F", f"--key-file={f}/munge/munge.key",
                     f"--socket={f}/munge/sock", f"--pid-file={f}/munge/pid",
                     f"--log-file={f}/munge/log", f"--seed-file={f}/munge/seed")
        deadline = time.monotonic() + timeout
        while not (f / "munge" / "sock").exists():
            self._check(deadline, "munged did not create its socket")
        self._daemon("slurmctld", "slurmctld", "-D", "-i", "-f", str(self.conf))
        self._daemon("slurmd", "slurmd", "-D", "-N", "vm", "-f", str(self.conf))
        if self.two_nodes:
            self._daemon("slurmd-vm2", "nsenter", f"--net=/run/netns/{NETNS}", "slurmd", "-D",
                         "-N", "vm2", "-f", str(self.conf))   # only the network: `ip netns exec`
                                                              # would remount /sys, without cgroups
        want = 2 if self.two_nodes else 1
        while True:
            out = _run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split("\n")
            if sum(line.endswith(" idle") for line in out) == want:
                return self
            self._check(deadline, f"Slurm's nodes did not become idle: {out}")

    def _check(self, deadline: float, what: str) -> None:
        for name, p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}: "
                                   + (self.folder / "log" / f"{name}.out").read_text()[-2000:])
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.2)

    # -- use -----------------------------------------------------------------------------------
    def jobs(self) -> list:
        """[(job id, name, state)] as squeue lists them (COMPLETING included)."""
        out = _run("squeue", "-h", "-o", "%i %j %T", check=False)
        return [tuple(line.split()) for line in out.stdout.splitlines() if line.strip()]

    def stop(self) -> list:
        """Cancel what is left, end the daemons and the namespace; returns the processes of
        this Slurm that are still running (none, when all went well)."""
        _run("scancel", "--user", "root", check=False)
        deadline = time.monotonic() + 15
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.25)
        for _, p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for _, p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self.two_nodes:
            _run("ip", "netns", "del", NETNS, check=False)
        left = [pid for pid in os.listdir("/proc")
                if pid.isdigit() and int(pid) != os.getpid() and self._ours(pid)]
        shutil.rmtree(self.folder, ignore_errors=True)
        os.environ.pop("SLURM_CONF")
        if self.saved_conf is not None:
            os.environ["SLURM_CONF"] = self.saved_conf
        return left

    def _ours(self, pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            return False
        return str(self.folder) in cmd or f"SLURM_CONF={self.conf}".encode() in env
