"""The class figure of `python -m labkit.bench start` (issue 36): 8 kernels of 2 users start
`Cluster(4)` at the same moment.

Each kernel is a process of its own, run as its user (as JupyterHub's local spawner runs a
learner's kernel), that has imported torch and labkit and waits; all are told to go at once and
each times `Cluster(n)` and its first all_reduce. While their clusters are still open the bench
reads /proc (not labkit's bookkeeping): every rank's parent is a zygote process
(`labkit.runtime.local.userzygote_main`) running as the rank's user, one zygote per user, all the
clusters of one user forked by the same one. The figure: the slowest kernel's first result against
one cold start measured in the same run.

Other users need root (a uid change); without it, or without `--users`, the 8 kernels are this
user's (said in the line). `--python`: an interpreter the other users can run with torch and labkit
importable (the project's venv may sit in a home they cannot enter).
"""
import json
import os
import pwd
import subprocess
import time

CHILD = r"""
import json, os, sys, time
import torch
import labkit
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
def step():
    import torch, torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item(), os.getpid()
c = labkit.Cluster(int(sys.argv[1]), backend="gloo")
got = c.run(step)
took = time.perf_counter() - t0
print(json.dumps({"first": took, "ok": [g[0] for g in got] == [float(c.world_size)] * c.world_size,
                  "ranks": [g[1] for g in got], "uid": os.getuid()}), flush=True)
sys.stdin.readline()                              # held open while /proc is read
c.close()
"""


def _as(user: str, env: dict) -> dict:
    """Popen arguments that run a process as `user` (this process's own user: none)."""
    pw = pwd.getpwnam(user)
    if pw.pw_uid == os.getuid():
        return {"env": env}
    e = dict(env, HOME=pw.pw_dir, USER=user, LOGNAME=user)
    e.pop("XDG_RUNTIME_DIR", None)
    return {"env": e, "user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": pw.pw_dir}


def _stat(pid: int) -> tuple:
    """(parent pid, uid, command line) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    return ppid, os.stat(f"/proc/{pid}").st_uid, cmd


def forked_by(records: list) -> dict:
    """uid -> the set of zygote pids that forked that user's ranks (one, with the learner's
    zygote); raises when a rank's parent is not a zygote running as the rank's own user, or
    two users' ranks come from one zygote."""
    zygotes = {}
    for rec in records:
        for rank in rec["ranks"]:
            ppid, uid, _ = _stat(rank)
            _, zuid, zcmd = _stat(ppid)
            if uid != rec["uid"] or zuid != uid or "zygote_main" not in zcmd:
                raise RuntimeError(f"rank {rank} (uid {uid}) was forked by {ppid} (uid {zuid}): {zcmd}")
            zygotes.setdefault(uid, set()).add(ppid)
    every = [z for zs in zygotes.values() for z in zs]
    if len(set(every)) != len(every):
        raise RuntimeError(f"two users share a zygote: {zygotes}")
    return zygotes


def class_round(users: list, world_size: int, env: dict, python: str, timeout: float = 900):
    """(first result seconds of each kernel, uid -> the zygote pids that forked its ranks)."""
    python = os.path.abspath(python)              # (another user's kernel starts in their home)
    kernels = [subprocess.Popen([python, "-c", CHILD, str(world_size)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, **_as(u, env)) for u in users]
    try:
        for p in kernels:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a kernel did not start (exit {p.poll()})")
        for p in kernels:
            p.stdin.write("go\n")
            p.stdin.flush()
        deadline = time.monotonic() + timeout
        records = []
        for p in kernels:
            line = p.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"a kernel's cluster did not answer (exit {p.poll()})")
            records.append(json.loads(line))
        if not all(r["ok"] for r in records):
            raise RuntimeError(f"a cluster returned a wrong all_reduce: {records}")
        zygotes = forked_by(records)
        return [r["first"] for r in records], zygotes
    finally:
        for p in kernels:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in kernels:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def users_for(names: str) -> tuple:
    """(8 user names, interleaved, what to say): the given users where this process may switch
    to them (root), else this user for all 8."""
    me = pwd.getpwuid(os.getuid()).pw_name
    wanted = [n for n in (names or "").split(",") if n]
    if len(wanted) >= 2 and os.geteuid() == 0:
        return (wanted[:2] * 4), f"8 kernels of 2 users ({', '.join(wanted[:2])})"
    why = "not root" if wanted else "no --users"
    return [me] * 8, f"8 kernels of one user ({me}: {why})"


def stop_zygotes(pids) -> None:
    """SIGTERM the bench's own zygotes (made with a key of this run's): they exit at once."""
    import signal
    for pid in pids:
        try:
            if "userzygote_main" in _stat(pid)[2]:    # (not a process that reused the pid)
                os.kill(pid, signal.SIGTERM)
        except OSError:
            pass

