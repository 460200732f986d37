"""Ranks on this machine: the source of `Cluster(n)` (source.py), each worker as the run loop
sees it (handle.py), the pool of spare workers (pool.py), starting their processes and the
rendezvous file (procs.py), and the zygote that forks ready workers (zygote.py,
zygote_main.py). The rank side of a worker is ../worker.py, shared with ranks that torchrun
starts."""
