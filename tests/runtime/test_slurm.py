"""Slurm, started for real: a notebook's `Cluster.remote` driving ranks that `srun` and `sbatch`
started exactly as the cluster printed them, on a Slurm cluster of this machine (munged,
slurmctld, slurmd: tests/support/slurm_cluster.py; a second slurmd in a network namespace of its own
where root can make one).

What a learner does is what the tests do: copy `cluster.source.commands["srun"]` (or "sbatch") into a
terminal whose Python environment has labkit and torchrun (PATH, PYTHONPATH), and run it.
"""
import os
import pathlib
import shlex
import socket
import subprocess
import sys
import threading
import time

import pytest

import labkit
from labkit.runtime import errors
from labkit.runtime.remote import slurm as slurm_words

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.cluster]


@pytest.fixture(scope="module")
def slurm():
    from support.slurm_cluster import Slurm, why_not
    why = why_not()
    if why:
        pytest.skip(why)
    s = Slurm()
    try:
        yield s.start()
    finally:
        left = s.stop()
        assert not left, f"processes of the test's Slurm still run after stop(): {left}"


def _cluster(slurm, folder, nnodes: int, nproc: int):
    from support.slurm_cluster import HOST_ADDR, VETH
    host, nic = (HOST_ADDR, VETH) if slurm.two_nodes else ("127.0.0.1", "lo")
    return labkit.Cluster.remote(f"{host}:0", nnodes=nnodes, nproc_per_node=nproc,
                                 join_file=str(folder / "join.json"), env={"GLOO_SOCKET_IFNAME": nic},
                                 timeout=30, start_timeout=150, restart_timeout=30)


def _terminal(command: str, folder, log):
    """Run a printed command as a learner's terminal would: the environment's bin on PATH."""
    env = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    return subprocess.Popen(shlex.split(command), cwd=folder, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def total():
    import torch
    import torch.distributed as dist
    t = torch.ones(1) * (labkit.rank() + 1)
    dist.all_reduce(t)
    return t.item()


def test_the_printed_commands():
    cmds = slurm_words.commands("labkit-0a1b2c3d", 2, "env A=1 torchrun --nnodes 2 -m x --join '/h/a b/j.json'",
                                "/h/a b")
    assert cmds["srun"] == ("srun --job-name labkit-0a1b2c3d --nodes 2 --ntasks-per-node 1 env A=1 "
                            "torchrun --nnodes 2 -m x --join '/h/a b/j.json'")
    words = shlex.split(cmds["sbatch"])           # the shell gives sbatch one --wrap argument
    assert words[:7] == ["sbatch", "--job-name", "labkit-0a1b2c3d", "--nodes", "2",
                         "--ntasks-per-node", "1"]
    assert words[7:10] == ["--output", "/h/a b/labkit-0a1b2c3d-%j.out", "--wrap"]
    assert shlex.split(words[10]) == shlex.split(cmds["srun"])[:1] + shlex.split(cmds["srun"])[7:]


def test_how_a_job_ended_is_asked_of_scontrol(tmp_path, monkeypatch):
    """Without daemons: a stand-in scontrol that answers COMPLETING twice, then the state."""
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\nn=$(cat \"$0.count\" 2>/dev/null || echo 0); echo $((n+1)) > \"$0.count\"\n"
                    'if [ "$4" = 404 ]; then echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; fi\n'
                    '[ "$n" -lt 2 ] && s=COMPLETING || s=$(cat "$0.state")\n'
                    'echo "JobId=$4 JobName=x JobState=$s Reason=None"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "words.conf"))   # a cache of its own
    for job, state, words in [("11", "TIMEOUT", "job 11 reached its time limit (srun/sbatch --time; "
                                                "JobState=TIMEOUT)"),
                              ("12", "PREEMPTED", "job 12 was preempted ("), ("13", "FAILED", None),
                              ("14", "RUNNING", None)]:
        (tmp_path / "scontrol.state").write_text(state)
        (tmp_path / "scontrol.count").write_text("0")
        got = slurm_words.how_it_ended(job, settle=5)
        assert (got is None) if words is None else (got is not None and words in got), (state, got)
        assert (tmp_path / "scontrol.count").read_text().strip() == "3", "waited out COMPLETING"
    assert slurm_words.job_state("404") == "gone"


def test_srun_as_printed_a_failed_rank_and_scancel(slurm, tmp_path):
    c = _cluster(slurm, tmp_path, 1, 2)
    log = open(tmp_path / "srun.log", "w")
    srun = _terminal(c.source.commands["srun"], tmp_path, log)
    try:
        assert c.run(total) == [3.0, 3.0], (tmp_path / "srun.log").read_text()[-3000:]
        job = c.source.nodes[0]["slurm_job"]
        assert [(j, name) for j, name, _ in slurm.jobs()] == [(job, c.source.name)], "squeue: the job, by name"

        def fn():
            if labkit.rank() == 1:
                raise ValueError("bad shape on this rank")
            return 0
        with pytest.raises(labkit.RankError) as info:
            c.run(fn)
        assert (f"--- rank 1 on node 0 (host {socket.gethostname()}, Slurm job {job}): "
                "ValueError: bad shape on this rank") in str(info.value)

        threading.Timer(1.0, subprocess.run, (["scancel", job],)).start()
        with pytest.raises(labkit.RankError) as info:
            c.run(lambda: time.sleep(60))
        text = str(info.value)
        assert (f"was ended by Slurm: job {job} was cancelled (scancel, by you or an administrator; "
                "JobState=CANCELLED)") in text, text
        assert "agent closed the connection" not in text, "not a generic lost node"

        t0 = time.monotonic()                     # the next run says so at once, with what to run
        with pytest.raises(errors.StartError) as info:
            c.run(total)
        assert time.monotonic() - t0 < 10
        assert f"ran in Slurm job {job}, which was cancelled" in str(info.value)
        assert c.source.commands["srun"] in str(info.value)
    finally:
        c.close()
        srun.wait(30)
    assert slurm.jobs() == [], "close() leaves no job in squeue"


def test_sbatch_on_two_nodes_outlives_the_cell_and_close_ends_it(slurm, tmp_path):
    """The sbatch line, over both nodes where the second slurmd has its own network namespace
    (what that exercises and what not: docs/remote.md, "Tested, and not")."""
    nodes = 2 if slurm.two_nodes else 1
    c = _cluster(slurm, tmp_path, nodes, 1)
    try:
        out = subprocess.run(shlex.split(c.source.commands["sbatch"]), cwd=tmp_path, capture_output=True,
                             text=True, timeout=30, env=dict(
                                 os.environ, PYTHONPATH=str(ROOT),
                                 PATH=f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}"))
        assert out.returncode == 0 and out.stdout.startswith("Submitted batch job"), out
        job = out.stdout.split()[-1]              # sbatch has returned: the job lives on
        assert c.run(total) == ([3.0, 3.0] if nodes == 2 else [1.0])
        where = c.run(lambda: (os.environ["SLURM_JOB_ID"], os.environ["SLURMD_NODENAME"],
                               os.readlink("/proc/self/ns/net"), os.environ.get("PET_LOCAL_ADDR")))
        assert {w[0] for w in where} == {job} and {n["slurm_job"] for n in c.source.nodes} == {job}
        assert [(j, name) for j, name, _ in slurm.jobs()] == [(job, c.source.name)]
        if nodes == 2:
            assert sorted(w[1] for w in where) == ["vm", "vm2"], where
            assert where[0][2] != where[1][2], "each rank in its node's own network namespace"
            assert sorted(w[3] for w in where) == ["10.77.0.1", "10.77.0.2"], where
    finally:
        c.close()
    assert slurm.jobs() == [], "close() leaves no job in squeue"
    assert (tmp_path / f"{c.source.name}-{job}.out").exists(), "the job's output where the command says"
