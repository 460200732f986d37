"""Try Cluster.remote on one machine: two torchrun "nodes" on 127.0.0.1, driven over TLS.

    python examples/remote_on_one_machine.py [NPROC_PER_NODE]

Prints the time from starting torchrun to the first result, and the time to recover from a
hang (torchrun restarts the ranks); on real nodes you run the printed command there instead.
"""
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import labkit

ROOT = pathlib.Path(__file__).resolve().parents[1]


def total():
    import torch
    import torch.distributed as dist
    t = torch.ones(1) * (labkit.rank() + 1)
    dist.all_reduce(t)
    return t.item()


def stuck():
    import torch
    import torch.distributed as dist
    if labkit.rank() == labkit.world_size() - 1:
        dist.recv(torch.zeros(2), src=0)          # nobody sends: a hang, located on that rank


def main(nproc: int) -> None:
    folder = tempfile.mkdtemp(prefix="labkit-example-")
    c = labkit.Cluster.remote("127.0.0.1:0", nnodes=2, nproc_per_node=nproc, timeout=30,
                              join_file=os.path.join(folder, "join.json"),
                              env={"GLOO_SOCKET_IFNAME": "lo"})
    cmd = shlex.split(c.commands["torchrun"])
    i = cmd.index("torchrun")
    cmd[i] = str(pathlib.Path(sys.executable).with_name("torchrun"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    nodes = [subprocess.Popen(cmd[:i + 1] + ["--local-addr", "127.0.0.1"] + cmd[i + 1:], env=env,
                              start_new_session=True) for _ in range(2)]
    try:
        print("result", c.run(total), f"{time.perf_counter() - t0:.1f} s after starting torchrun")
        t1 = time.perf_counter()
        try:
            c.run(stuck, timeout=2)
        except labkit.RankTimeout as exc:
            print(str(exc).splitlines()[0])
        print("result", c.run(total), f"{time.perf_counter() - t1:.1f} s for the hang (2 s), "
              "torchrun's restart and the run")
    finally:
        c.close()
        for p in nodes:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        print("torchrun exit codes", [p.returncode for p in nodes])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
