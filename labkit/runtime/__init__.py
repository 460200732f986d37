"""Layer 2, the runtime: the only code that knows about processes, ports, pipes and signals.

The protocol, above both sources of ranks:
protocol.py  every message between notebook, ranks, zygote and node agents, one typed record each
frames.py    the one framing: one write per message (no Nagle), reading without ever blocking;
             the same frames over a node agent's TLS link (Link, Blocking)
errors.py    RankError / RankTimeout / StartError, and every failure in words (raised, hung,
             died by a signal, out of memory, node lost, failed to start): how_it_ended
stacks.py    where a rank is: frames from a traceback or a faulthandler dump, in the learner's
             words; a process's state; the folders stack dumps go to
portable.py  the Linux-only pieces used here and their fallbacks (LABKIT_PORTABLE=1: none used)

The run loop, for local and remote ranks alike (one run: cluster -> wire -> group -> collect):
cluster.py   Cluster: one class; start ranks, run work, decide what follows a failure
kernel.py    the clusters open in this kernel: the newest (for %%ranks), close_all()
source.py    where ranks come from: the interface local/ and remote/ implement (RankSource)
group.py     the ranks of one generation as one (RankGroup): join, send a task, recover, kill all
handle.py    a rank as the run loop sees it (RankHandle): send, messages, output, how it ended
control.py   the authenticated control server ranks (and node agents, over TLS) connect to
collect.py   the wait loop of one task: results, output, events (capped), failures, hangs; Release
output.py    a rank's output on its way to the cell: live partial lines, \r, the output cap
interrupts.py  Ctrl-C during a run, safe to press twice
options.py   checking a Cluster's arguments before anything starts
wire.py      pickling only: functions and values by value (cloudpickle), errors that name the culprit
carry.py     what pickle cannot carry as it is: tensors of every dtype, numpy arrays and bytes
shm.py       tensors (and numpy arrays, bytes) through anonymous shared memory
learner.py   the notebook's folder, sys.path and edited modules, carried by every task
context.py   rank(), world_size(), device(), emit() - inside a rank, under torchrun, or alone
magic.py     the %%ranks cell magic

The rank side, for both sources:
channel.py   a rank's connection to the notebook: one lock per send, events capped, its results' memory
worker.py    the task loop of a rank (forked by the zygote, spawned, or under torchrun):
             die_with_parent(), prepare(stack_path), serve(conn, owner_alive, on_lost)
tasks.py     one task on a rank: run it in the namespace, its result on CPU, a failure's report

local/ - ranks on this machine:
  source.py    LocalRanks: the source of a Cluster(n) (pool, store, backend, threads)
  handle.py    LocalRank: a worker process (signals, /proc, its stack file); local stack dumps
  pool.py      spares and every worker process of one Cluster
  procs.py     starting workers: the launcher thread, environment, threads, the rendezvous file
  watchdog.py  without PR_SET_PDEATHSIG (macOS): kills the workers once the notebook is gone
  netns.py     the ranks' own network namespace (Linux): no other local user reaches their ports
  zygote.py    one process with torch imported that forks ready workers in ~0.1 s (the notebook
               side; zygote_main.py is the process itself)

remote/ - ranks that torchrun starts on other machines (docs/remote.md):
  source.py    RemoteRanks: the source of Cluster.remote (listening, the key file, the commands)
  pool.py      RemotePool: the ranks torchrun started that reached the notebook, taken by rank
  handle.py    RemoteRank: a rank reached through its node's agent
  link.py      the hub thread: every node agent's link, each remote rank as a socketpair
  rank.py      the module torchrun runs on each rank (then ../worker.py's task loop)
  agent.py, agent_ranks.py  one node agent per torchrun: signals, stacks, exit statuses, heartbeats
  tls.py       the per-cluster certificate (pinned), the 0600 key file, the TLS control server
"""
