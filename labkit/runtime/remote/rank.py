"""A rank that torchrun started on a node, driven by a notebook elsewhere (Cluster.remote).

    torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint HOST:PORT ... \\
        -m labkit.runtime.remote.rank --connect HOST:PORT --join KEYFILE

1. check the key file (mode 0600, ours) before anything else, so a mistake shows at once;
2. reach the node's agent (agent.py) on its Unix socket, starting it if this is the first rank
   of this torchrun, and hand it this rank's output (a pipe: fd 1 and 2 go there);
3. import torch, say hello to the notebook (through the agent), then serve tasks exactly as a
   local worker does (worker.serve); the process group is torchrun's: RANK, WORLD_SIZE and the
   store at MASTER_ADDR:MASTER_PORT that torchrun's rendezvous set up.
The rank exits with its agent: code 0 when the cluster was closed (torchrun ends), 1 if the
agent vanished (torchrun restarts the ranks, and the first of them a new agent).
"""
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time

from labkit.runtime.remote import agent
from labkit.runtime.remote import tls
from labkit.runtime.remote.agent_ranks import peer

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")


def _stop(code: int, message: str = None) -> None:
    """A mistake that a restart cannot fix: say it, stop this node's torchrun, exit."""
    if message:
        print(f"labkit: {message}", file=sys.stderr, flush=True)
    if code and "TORCHELASTIC_RUN_ID" in os.environ:
        print("labkit: stopping torchrun on this node.", file=sys.stderr, flush=True)
        try:
            os.kill(os.getppid(), signal.SIGTERM)
        except OSError:
            pass
    os._exit(code)


def squatted_message(name: bytes, pid: int, uid: int) -> str:
    """What a rank says when another user holds its agent's socket name."""
    try:
        import pwd
        who = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        who = f"uid {uid}"
    shown = "@" + name[1:].decode(errors="replace")      # abstract: shown as ss and /proc/net/unix do
    return (f"on {socket.gethostname()}, the Unix socket {shown} where this node's labkit agent "
            f"listens is held by another user: {who}, pid {pid}. labkit refuses to talk to it "
            "and has stopped torchrun on this node. The name comes from your cluster's key, so "
            "that user read it while your agent ran: start a new cluster (a new key gives a new "
            "name) and tell the machine's administrator which process holds it.")


def _report(args, message: str) -> None:
    """Tell the notebook why this node cannot start (as an agent would connect), so the cell
    says it at once instead of a start timeout."""
    from labkit.runtime import frames, protocol
    try:
        s = agent.connect(args.connect, tls.read_join_file(args.join), timeout=5.0)
        frames.Blocking(s).send(protocol.AgentHello({"refused": message,
                                                     "host": socket.gethostname()}))
        s.close()
    except Exception:                             # noqa: BLE001 - torchrun's log has it anyway
        pass


def _reach_agent(args, torchrun: int, deadline: float) -> socket.socket:
    """A connection to this torchrun's agent, started here if there is none yet."""
    spawned = None
    name = agent.socket_name(torchrun, bytes.fromhex(tls.read_join_file(args.join)["key"]))
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(name)
            pid, uid = peer(s)
            if uid != os.getuid():
                s.close()
                message = squatted_message(name, pid, uid)
                _report(args, message)
                _stop(2, message)
            return s
        except (ConnectionRefusedError, FileNotFoundError):
            s.close()
        if spawned is not None and spawned.poll() is not None:
            if spawned.returncode == 2:
                _stop(2)                          # the agent said why
            if spawned.returncode == 3:
                _stop(0, "the notebook is not listening any more; leaving.")
            spawned = None                        # another rank's agent won: connect to it
        if spawned is None:
            spawned = subprocess.Popen(
                [sys.executable, "-m", "labkit.runtime.remote.agent", "--connect", args.connect,
                 "--join", args.join, "--torchrun", str(torchrun)],
                stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        time.sleep(0.02)
    _stop(1, "could not reach this node's labkit agent in time.")


def _register(args, torchrun: int):
    """Hand the agent this rank's description and output pipe; returns (socket, stack path)."""
    deadline = time.monotonic() + 60.0
    info = {k.lower(): os.environ.get(k) for k in _ENV}
    info.update(host=socket.gethostname(), main_ident=threading.main_thread().ident)
    while True:
        s = _reach_agent(args, torchrun, deadline)
        out_r, out_w = os.pipe()
        try:
            socket.send_fds(s, [pickle.dumps(info)], [out_r])
            s.settimeout(max(1.0, deadline - time.monotonic()))
            reply = s.recv(1 << 16)
        except OSError:
            reply = b""
        os.close(out_r)
        if reply:
            s.settimeout(None)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.close(out_w)
            return s, pickle.loads(reply)[1]
        os.close(out_w)                           # that agent went away: try again
        s.close()
        if time.monotonic() > deadline:
            _stop(1, "this node's labkit agent did not answer.")
        time.sleep(0.1)


def main(argv=None) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m labkit.runtime.remote.rank")
    p.add_argument("--connect", required=True, help="the notebook's HOST:PORT")
    p.add_argument("--join", required=True, help="the cluster's key file (mode 0600)")
    args = p.parse_args(argv)
    try:
        tls.read_join_file(args.join)
    except tls.JoinFileError as exc:
        _stop(2, str(exc))
    from labkit.runtime import portable
    if not portable.NODE_AGENT:
        _stop(2, "a node of Cluster.remote needs Linux: its labkit agent watches the ranks "
                 f"through pidfds and /proc ({portable.why_not('the node agent')}). Run the ranks "
                 "on a Linux machine; the notebook itself may run anywhere.")
    if "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
        _stop(2, "run this module with torchrun (it reads RANK, WORLD_SIZE, MASTER_ADDR ...); "
                 "the notebook printed the command.")
    torchrun = os.getppid()
    from labkit.runtime import worker
    worker.die_with_parent()                      # torchrun gone (even SIGKILL): so are we
    sock, stack_path = _register(args, torchrun)
    worker.prepare(stack_path)
    os.environ["LABKIT_SHM"] = "0"                # tensors cannot cross machines through memfd
    import torch
    from labkit.runtime import frames, protocol, shm
    from labkit.runtime.channel import Channel
    shm.ENABLED = False
    conn = Channel(frames.Conn(sock.detach()))   # one write per message
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    conn.send(protocol.Hello(resources={"gpus": gpus, "threads": max(1, cores // local)}))
    leave = os.path.join(os.path.dirname(stack_path), "leave")   # the agent's word: the cluster closed

    def on_lost(eof: bool) -> None:               # the agent (or torchrun) is gone
        os._exit(0 if eof and os.path.exists(leave) else 1)
    worker.serve(conn, lambda: os.getppid() == torchrun, on_lost)


if __name__ == "__main__":
    main()
