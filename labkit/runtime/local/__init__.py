"""Ranks on this machine: the pool of spare workers (pool.py), their processes, output pipes,
stack folders and the rendezvous store (procs.py), the authenticated control socket
(control.py), and the zygote that forks ready workers (zygote.py, zygote_main.py). The rank
side of a worker is ../worker.py, shared with ranks that torchrun starts."""
