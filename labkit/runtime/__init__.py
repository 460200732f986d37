"""Layer 2, the runtime: the only code that knows about processes, ports, pipes and signals.

cluster.py   Cluster: start ranks, run work, recover after failures
collect.py   the wait loop of one run: results, output, events, failures, hangs
procs.py     worker processes: launching, process groups, output pipes, framed messages
control.py   the authenticated control socket and its defences
frames.py    reading a rank's messages without ever blocking
interrupts.py  Ctrl-C during a run, safe to press twice
options.py   checking a Cluster's arguments before anything starts
output.py    a rank's output on its way to the cell: live partial lines, \r, the output cap
worker.py    the rank side (forked by the zygote, or a fresh interpreter)
pool.py      spares and every worker process of one Cluster
zygote.py    one process with torch imported that forks ready workers in ~0.1 s (the notebook side;
             zygote_main.py is the process itself)
wire.py      sending functions and values by value (cloudpickle), with clear errors
shm.py       tensors through shared memory (anonymous, so a SIGKILL leaves nothing)
learner.py   the notebook's folder, sys.path and edited modules, carried by every task
errors.py    RankError / RankTimeout and how they are worded
context.py   rank(), world_size(), device(), emit() - inside a rank, under torchrun, or alone
magic.py     the %%ranks cell magic
"""
