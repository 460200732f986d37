"""Ranks that Slurm started: the srun and sbatch commands a remote cluster prints, and how a
Slurm job that held ranks ended, asked of Slurm itself.

    srun --job-name labkit-1a2b3c4d --nodes 2 --ntasks-per-node 1 torchrun ...
    sbatch --job-name labkit-1a2b3c4d --nodes 2 --ntasks-per-node 1 --output DIR/labkit-1a2b3c4d-%j.out \\
        --wrap 'srun torchrun ...'

One torchrun per node (`--ntasks-per-node 1`): torchrun starts that node's ranks. Each node
agent reports the job it runs in (SLURM_JOB_ID, from its torchrun's environment: `job_info`),
so the notebook can name the job in errors, ask Slurm how it ended when its ranks vanish
(`scontrol show job`: cancelled with scancel, out of time, preempted, a node failed) and, on
`close()`, wait until the job has left `squeue`. Where the notebook's machine has no Slurm
commands, errors say only which job the ranks ran in.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time

SETTLE_S = 15.0          # how long an error waits for an ending job to leave COMPLETING
ENDED = {                # Slurm's final job states, in words: what happened, and how
    "CANCELLED": ("was cancelled", "scancel, by you or an administrator"),
    "TIMEOUT": ("reached its time limit", "srun/sbatch --time"),
    "PREEMPTED": ("was preempted", "a job of higher priority took its nodes"),
    "NODE_FAIL": ("lost one of its nodes", "the node failed or stopped answering Slurm"),
    "OUT_OF_MEMORY": ("ran out of memory", "on one of its nodes"),
    "DEADLINE": ("passed its deadline", "srun/sbatch --deadline"),
    "BOOT_FAIL": ("could not boot one of its nodes", "ask the administrators"),
}
BY_SLURM = set(ENDED)    # Slurm ended the job; the two below end by themselves
ENDED.update(FAILED=("failed", "its command exited with a non-zero code"),
             COMPLETED=("ended", "its command exited"))


def _words(state: str) -> str:
    what, how = ENDED[state]
    return f"{what} ({how}; JobState={state})"

_known = {}              # (SLURM_CONF, job id) -> its final state
_lock = threading.Lock()


def job_info(environ) -> dict:
    """What a node agent says of its Slurm job (empty outside Slurm)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    return {"slurm_job": job, "slurm_step": environ.get("SLURM_STEP_ID"),
            "slurm_node": environ.get("SLURMD_NODENAME")}


def commands(name: str, nnodes: int, node_command: str, output_dir: str) -> dict:
    """The srun line (from a terminal or inside an allocation) and the sbatch line (a job
    that outlives the notebook's cell), both running `node_command` once per node."""
    job = f"--job-name {name} --nodes {nnodes} --ntasks-per-node 1"
    out = shlex.quote(f"{output_dir}/{name}-%j.out")
    return {"srun": f"srun {job} {node_command}",
            "sbatch": f"sbatch {job} --output {out} --wrap {shlex.quote('srun ' + node_command)}"}


def _ask(job: str):
    """The job's JobState from scontrol, "gone" if Slurm no longer knows the job, or None
    when Slurm cannot be asked from here."""
    if shutil.which("scontrol") is None:
        return None
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True,
                           text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if "Invalid job id" in r.stderr:
        return "gone"
    state = re.search(r"\bJobState=(\S+)", r.stdout)
    return state.group(1) if state and not r.returncode else None


def job_state(job: str, settle: float = 0.0):
    """The job's state (None: Slurm cannot be asked), waiting up to `settle` seconds while it
    is COMPLETING (Slurm shows a cancelled job as COMPLETING until its processes are gone)."""
    key = (os.environ.get("SLURM_CONF"), job)    # job ids are per Slurm cluster
    with _lock:
        if key in _known:
            return _known[key]
    deadline = time.monotonic() + settle
    while True:
        got = _ask(job)
        if got != "COMPLETING" or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    if got in ENDED or got == "gone":
        with _lock:
            _known[key] = got
    return got


def how_it_ended(job: str, settle: float = 0.0):
    """'was ended by Slurm: job 7 was cancelled (...)' when Slurm ended the job, else None."""
    got = job_state(job, settle)
    if got not in BY_SLURM:
        return None
    return f"was ended by Slurm: job {job} {_words(got)}"


def listed(jobs) -> list:
    """Those of `jobs` that squeue still lists (COMPLETING included)."""
    if not jobs or shutil.which("squeue") is None:
        return []
    try:
        r = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(sorted(jobs))],
                           capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def wait_closed(nodes: list, timeout: float = 30.0) -> None:
    """After close(): wait until squeue no longer lists the Slurm jobs of these nodes (infos
    of node agents), or say which are left."""
    left = wait_gone({i["slurm_job"] for i in nodes if i.get("slurm_job")}, timeout)
    if left:
        print(f"labkit: Slurm still lists job(s) {', '.join(left)} {timeout:g} s after the cluster "
              f"closed (squeue); scancel {' '.join(left)} ends them.", file=sys.stderr)


def wait_gone(jobs, timeout: float = 30.0) -> list:
    """Wait until squeue no longer lists these jobs (the ranks exited, torchrun ended, so srun
    and the batch script end); returns those still listed after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    left = listed(jobs)
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = listed(left)
    return left


def ended_message(hub, srun: str, told: set):
    """Why missing ranks will never come: the Slurm job of a lost node has ended and no
    connected node runs in it (so no torchrun is left to restart them). None otherwise, and
    once a job's end was told (`told`), so that a run after the job was started again waits
    for the new one. hub: the remote cluster's link.Hub (its node links, connected and lost)."""
    alive = {n.info.get("slurm_job") for n in list(hub.links)} | told
    for job in dict.fromkeys(n.info["slurm_job"] for n in list(hub.lost) if n.info.get("slurm_job")):
        got = job_state(job) if job not in alive else None
        if got in ENDED or got == "gone":
            how = _words(got) if got in ENDED else "has ended (Slurm no longer lists it)"
            told.add(job)
            return (f"the ranks ran in Slurm job {job}, which {how}: no torchrun is left to start "
                    f"them again. Start the job again:\n  {srun}\nor start a new cluster.")
    return None
