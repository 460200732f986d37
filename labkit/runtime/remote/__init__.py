"""Ranks that torchrun starts on other machines (docs/remote.md).

In the notebook: cluster.py (`Cluster.remote`: the commands, the pool of remote ranks),
link.py (the hub thread over every node agent's TLS link), worker.py (the TLS control server;
a remote rank as the run loop sees it), tls.py (the pinned certificate and the 0600 key file).
On each node: rank.py (the module torchrun runs on every rank, then ../worker.py's task loop),
agent.py and agent_ranks.py (one agent per torchrun: signals, stacks, exit statuses, heartbeats).
"""
