"""Ranks that torchrun starts on other machines (docs/remote.md).

In the notebook: source.py (`Cluster.remote`'s source: the commands, the ranks torchrun
started), handle.py (a remote rank as the run loop sees it), link.py (the hub thread over every
node agent's TLS link), tls.py (the pinned certificate, the 0600 key file, the TLS control
server). On each node: rank.py (the module torchrun runs on every rank, then ../worker.py's
task loop), agent.py and agent_ranks.py (one agent per torchrun: signals, stacks, exit
statuses, heartbeats).
"""
