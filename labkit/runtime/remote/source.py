"""Ranks on other machines, as a source of ranks for the Cluster (see ../source.py): a notebook
drives ranks that torchrun (or srun) started elsewhere.

    cluster = labkit.Cluster.remote("0.0.0.0:29500", nnodes=2, nproc_per_node=4)
    # prints the torchrun command (and the srun line) to run on every node, and the key file
    cluster.run(fn)        # the same run, %%ranks, push/pull, errors, hang stacks and timeouts

torchrun's own rendezvous (c10d) forms the job: it gives every rank RANK, WORLD_SIZE and the
store at MASTER_ADDR:MASTER_PORT through which the process group is joined. By default the
notebook hosts that rendezvous store itself (`rdzv_endpoint=None`), so no node must be first.
Each node's agent (agent.py) connects back over TLS (tls.py) and carries its ranks' control
bytes and output (link.py); each rank is a handle.RemoteRank to the run loop. After a hang, a death or an interrupt the ranks are killed
and torchrun restarts them (`--max-restarts`): the next run waits for them. docs/remote.md
has the commands and the security model.
"""
import os
import secrets
import shlex

from labkit.runtime.remote import slurm, tls
from labkit.runtime.remote.link import Hub
from labkit.runtime.remote.pool import RemotePool


def _address(text: str) -> tuple:
    host, _, port = str(text).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listen= takes 'HOST:PORT' (e.g. '0.0.0.0:29500'), got {text!r}")
    return host, int(port)


class RemoteRanks:
    """Ranks that torchrun starts on other machines (`Cluster.remote(...)`; see the module
    docstring); the Cluster's `source` (`cluster.source.commands`, `cluster.source.nodes`, ...).

    listen: 'HOST:PORT' the notebook listens on ('0.0.0.0:29500'; port 0: any free port).
    advertise: the host name the nodes use to reach the notebook (default: this machine's).
    rdzv_endpoint: torchrun's rendezvous 'HOST:PORT'; default: hosted by the notebook on the
        next port (listen port + 1, or a free one).
    join_file: where the key file goes (default ~/.labkit/join-<name>.json, mode 0600).
    tls: True (always, unless listen is loopback and you pass False).
    max_restarts: failures (hangs, deaths, interrupts) torchrun recovers from before its
        command must be run again. heartbeat_timeout: seconds of silence before a node is lost.
    (How long the first run waits for every rank, and a later one for torchrun's restarts, are
    the Cluster's start_timeout and restart_timeout.)"""
    local = False                  # tensors cannot cross machines through shared memory

    def __init__(self, listen: str, nnodes: int, nproc_per_node: int, *, advertise: str = None,
                 rdzv_endpoint: str = None, join_file: str = None, tls: bool = True,
                 max_restarts: int = 100, heartbeat_timeout: float = 5.0):
        self.listen, self.nnodes, self.nproc_per_node = _address(listen), int(nnodes), int(nproc_per_node)
        self.advertise, self.rdzv_endpoint, self.join_file = advertise, rdzv_endpoint, join_file
        self.tls, self.max_restarts, self.heartbeat_timeout = tls, int(max_restarts), heartbeat_timeout
        self.name = f"labkit-{secrets.token_hex(4)}"
        self.backend, self.threads_per_rank = "?", None
        self.store, self._hub, self._server, self._folder = [], None, None, None
        self._told = set()                        # Slurm jobs whose end a run has reported

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    # -- start: listen, write the key file, print the commands ---------------------------------
    def start(self, world_size: int, backend: str, env: dict, start_timeout: float) -> None:
        import torch.distributed as dist
        host, port = self.listen
        if not self.tls and not tls.is_loopback(host):
            raise ValueError(f"refusing to listen on {host} without TLS: anyone who can reach that "
                             "address could try to run code in your ranks. Keep tls=True.")
        self.backend_wanted, self.env = backend, env
        self._folder = tls.private_dir("labkit-remote-")
        ctx = None
        if self.tls:
            cert, key, self.certificate_tool = tls.make_certificate(self._folder, self.name)
            ctx = tls.server_context(cert, key)
        self.pool = RemotePool(self.missing_message, lambda: slurm.ended_message(
            self._hub, self.commands["srun"], self._told))
        self._hub = Hub(self.pool.add, self.heartbeat_timeout)
        self._server = tls.TLSServer(self._on_agent, host, port, ctx)
        self.join_file = os.path.abspath(os.path.expanduser(
            self.join_file or os.path.join("~", ".labkit", f"join-{self.name}.json")))
        self.address = (self.advertise or (host if host not in ("0.0.0.0", "::", "") else
                                           _this_host()), self._server.address[1])
        tls.write_join_file(self.join_file, {
            "name": self.name, "key": self._server.authkey.hex(), "tls": bool(self.tls),
             "cert": open(os.path.join(self._folder, "cert.pem")).read() if self.tls else ""})
        if self.rdzv_endpoint is None:            # the notebook hosts torchrun's rendezvous
            import datetime
            sock = _listen(host, port + 1 if port else 0)
            self.store.append(dist.TCPStore(host, sock.getsockname()[1], None, True,
                                            timeout=datetime.timedelta(seconds=start_timeout),
                                            wait_for_workers=False, master_listen_fd=sock.detach(),
                                            use_libuv=True))   # closed with the list
            self.rdzv_endpoint = f"{self.address[0]}:{self.store[0].port}"
            self._hosted_rdzv = True
        else:
            self._hosted_rdzv = False
        self.commands = self._commands()
        print(self.instructions(), flush=True)

    def _on_agent(self, sock, info: dict) -> None:
        """A node agent connected (or a rank that must tell why its node cannot start)."""
        if "refused" in info:
            sock.close()
            self.pool.refuse(str(info["refused"])[:2000])
        else:
            self._hub.add(sock, info)

    def _commands(self) -> dict:
        env = ("env " + " ".join(f"{shlex.quote(k)}={shlex.quote(v)}" for k, v in self.env.items())
               + " ") if self.env else ""
        conf = " --rdzv-conf is_host=false" if self._hosted_rdzv else ""
        run = (f"torchrun --nnodes {self.nnodes} --nproc-per-node {self.nproc_per_node} "
               f"--rdzv-backend c10d --rdzv-endpoint {self.rdzv_endpoint} --rdzv-id {self.name}"
               f"{conf} --max-restarts {self.max_restarts} -m labkit.runtime.remote.rank "
               f"--connect {self.address[0]}:{self.address[1]} --join {shlex.quote(self.join_file)}")
        return {"torchrun": env + run, **slurm.commands(self.name, self.nnodes, env + run,
                                                         os.path.dirname(self.join_file))}

    def instructions(self) -> str:
        return (f"labkit: a cluster of {self.nnodes} node(s) x {self.nproc_per_node} rank(s) waits "
                f"at {self.address[0]}:{self.address[1]} ({'TLS' if self.tls else 'no TLS: loopback'}"
                f"{', certificate made with ' + self.certificate_tool if self.tls else ''}).\n"
                f"Its key file (readable by you only): {self.join_file}\n"
                "Every node needs it at that path: a shared home folder has it already, else copy "
                "it (scp -p keeps it private).\n"
                "On each node, in a Python environment with labkit, run:\n"
                f"  {self.commands['torchrun']}\n"
                f"or under Slurm, once (srun: from a terminal or an allocation; sbatch: a job that "
                f"outlives this cell):\n  {self.commands['srun']}\n  {self.commands['sbatch']}")

    # -- ranks --------------------------------------------------------------------------------
    def take(self, n: int, deadline: float) -> list:
        """The ranks torchrun started (or restarted), by the rank torchrun gave each (waiting
        for them until `deadline`); `backend` and `threads_per_rank` are theirs from now."""
        ranks = self.pool.take(n, deadline)
        enough = all(w.ready["gpus"] >= int(w.info["local_world_size"]) for w in ranks)
        if self.backend_wanted == "nccl" and not enough:
            raise ValueError("backend='nccl' needs one GPU per rank on every node")
        if self.backend_wanted in ("nccl", "gloo"):
            self.backend = self.backend_wanted
        else:
            self.backend = "nccl" if enough else "gloo"
        self.threads_per_rank = ranks[0].ready["threads"] if ranks else None
        return ranks

    def init_options(self, w, rank: int, gen: int) -> dict:
        """Rank `rank` joins through torchrun's store, as torchrun numbered it."""
        return {"store_host": w.info["master_addr"], "store_port": int(w.info["master_port"]),
                "prefix": f"{self.name}/{gen}/", "threads": w.ready["threads"],
                "local_rank": int(w.info["local_rank"])}

    def rejoin_options(self, gen: int) -> dict:
        return {}                                 # torchrun's TCP store: the prefix is enough

    def forget(self, w) -> None:
        self.pool.forget(w)

    def top_up(self) -> None:
        pass                                      # torchrun restarts ranks, not labkit

    def wait_for_spares(self, timeout: float) -> bool:
        return True

    def process_count(self) -> int:
        return len(self.pool.workers) if getattr(self, "pool", None) else 0

    def dump_stacks(self, ranks: list, which: list) -> dict:
        """Where each of these ranks is: asked of their node agents."""
        return self._hub.dump_stacks(ranks, which)

    def missing_message(self, missing: list) -> str:
        nodes = list(self._hub.links)
        back = {(n.info["host"], n.info["torchrun"]) for n in nodes}
        gone = [f"{n.name} was lost: {n.gone}" for n in self._hub.lost
                if (n.info["host"], n.info["torchrun"]) not in back][-self.nnodes:]
        return (f"ranks {missing} have not reached the notebook ({len(nodes)} of {self.nnodes} "
                "node agents connected" + (f"; {'; '.join(gone)}" if gone else "") + "). If "
                "torchrun has stopped on a node (it restarts the ranks at most --max-restarts "
                f"times), run there again:\n  {self.commands['torchrun']}\nor start a new cluster.")

    @property
    def nodes(self) -> list:
        """The node agents connected now: [{'name', 'host', 'agent_pid', 'torchrun_pid',
        'slurm_job', 'ranks'}]."""
        return [{"name": n.name, "host": n.info["host"], "agent_pid": n.info["pid"],
                 "torchrun_pid": n.info["torchrun"], "slurm_job": n.info.get("slurm_job"),
                 "ranks": sorted(int(w.info["rank"]) for w in n.workers.values() if w.alive())}
                for n in list(self._hub.links)]

    def describe(self) -> str:
        where = f"{self.address[0]}:{self.address[1]}" if hasattr(self, "address") else "not listening"
        return f"{self.nnodes} node(s) x {self.nproc_per_node} at {where}"

    def close(self) -> None:
        """The agents are told, so their ranks exit with code 0 and torchrun ends on every node;
        the key file and certificate are removed (also at exit). Slurm jobs that held ranks
        are waited for until squeue no longer lists them (30 s at most)."""
        nodes = [n.info for n in (self._hub.links + self._hub.lost if self._hub else [])]
        _shutdown(self._hub, self._server, self.store, self._folder,
                  self.join_file if self._server is not None else None)
        slurm.wait_closed(nodes)


def _shutdown(hub, server, store, folder, join_file) -> None:
    """Close a remote cluster (also at exit): the agents are told, so their ranks exit with
    code 0 and torchrun ends on every node; the key file and certificate are removed."""
    import shutil
    if hub is not None:
        hub.close()
    if server is not None:
        server.close()
    store.clear()
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    try:
        if join_file:
            os.unlink(os.path.expanduser(join_file))
    except OSError:
        pass


def _this_host() -> str:
    import socket
    return socket.getfqdn()


def _listen(host: str, port: int):
    import fcntl
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(128)
    fcntl.fcntl(s.fileno(), fcntl.F_SETFD, fcntl.fcntl(s.fileno(), fcntl.F_GETFD) | fcntl.FD_CLOEXEC)
    return s
