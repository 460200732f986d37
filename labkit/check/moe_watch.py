"""What notebook 13's checker (labkit.check.moe) puts around the learner's dispatch and combine
on each rank: every dist.all_to_all_single shows its splits to the other ranks of its group (the
store) before gloo sees them, so that a mismatch is a verdict and not a process aborted by gloo;
and what the code asked of torch (the whole world's size or rank during a case on a group, an
all-to-all called directly on rows that need a gradient).
"""
import json
import time

from labkit.i18n import tr


class SplitStop(Exception):
    """The ranks disagree on an all-to-all's splits, or another rank already gave up."""


class Splits:
    """Inside the block every dist.all_to_all_single first shows its splits to the other ranks
    of its group (the store), so rows sent and rows expected can be compared before gloo sees
    them; the checks that need no other rank come first (a split list per rank, equal splits of
    equal lengths, the case's group). It also records what the learner's code asked of torch:
    dist.get_world_size() or get_rank() of the whole world during a case on a group, and
    all-to-alls called directly on rows that need a gradient (torch's does not differentiate)."""

    def __init__(self, token, patience, group=None, ranks=None, key="call", experts=None):
        self.token, self.patience, self.i = token, patience, 0
        self.group, self.ranks, self.key, self.experts = group, ranks, key, experts
        self.ungrouped, self.direct_grad, self.counts = [], False, None

    def __enter__(self):
        import torch.distributed as dist
        self.real = dist.all_to_all_single
        self.real_size, self.real_rank = dist.get_world_size, dist.get_rank
        dist.all_to_all_single = self._call
        if self.group is not None:
            dist.get_world_size = self._watch(self.real_size, "get_world_size")
            dist.get_rank = self._watch(self.real_rank, "get_rank")
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist
        dist.all_to_all_single = self.real
        dist.get_world_size, dist.get_rank = self.real_size, self.real_rank
        return False

    def _watch(self, real, name):
        def call(group=None, *args, **kwargs):
            if group is None:
                self.ungrouped.append(name)
            return real(group, *args, **kwargs)
        return call

    def _stop(self, text):
        raise SplitStop(text)

    def _call(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None, **kw):
        import sys
        from labkit.check.guard import _store
        caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
        if "/labkit/" not in caller and getattr(input, "requires_grad", False):
            self.direct_grad = True
        n, rank = self.real_size(group), self.real_rank(group)
        self.i += 1
        if self.group is not None and group is not self.group:
            self._stop(tr("in all-to-all number {i} on rank {rank}: this case runs expert parallelism on a "
                          "group of {k} ranks, but your all-to-all ran on {where}: pass the function's "
                          "`group` to every collective (and to get_world_size and get_rank)",
                          i=self.i, rank=self.real_rank(), k=self.real_size(self.group),
                          where=tr("the whole world (group=None)") if group is None else tr("another group")))
        for name, splits in (("input_split_sizes", input_split_sizes), ("output_split_sizes", output_split_sizes)):
            if splits is not None and len(splits) != n:
                per_expert = self.experts is not None and len(splits) in (self.experts * n, self.experts)
                f = dict(i=self.i, rank=rank, count=len(splits), name=name, n=n)
                self._stop(tr("in all-to-all number {i} rank {rank} gave {count} {name} for {n} ranks: a split "
                              "list has one entry per rank (rows to or from each rank), not one per expert: "
                              "add up each rank's experts (per_expert.view(n, E // n).sum(1))", **f)
                           if per_expert else
                           tr("in all-to-all number {i} rank {rank} gave {count} {name} for {n} ranks: a split "
                              "list has one entry per rank (rows to or from each rank)", **f))
        outs = list(output_split_sizes or [output.shape[0] // n] * n)
        ins = list(input_split_sizes or [input.shape[0] // n] * n)
        for rows, splits, what in ((input.shape[0], input_split_sizes, "input"),
                                   (output.shape[0], output_split_sizes, "output")):
            if splits is not None and sum(int(v) for v in splits) != rows:
                self._stop(tr("in all-to-all number {i} rank {rank}'s {what} has {rows} rows but its {what} "
                              "splits add up to {total}: the splits must add up to the rows you pass: in the "
                              "combine, swap input and output splits (send back what you received)",
                              i=self.i, rank=rank, what=what, rows=rows, total=sum(int(v) for v in splits)))
        store = _store()
        base = f"labkit-check/{self.token[0]}/{self.key}/a2a/{self.i}"
        keys = [f"{base}/{j}" for j in range(n)]
        equal = input_split_sizes is None and output_split_sizes is None
        store.set(keys[rank], json.dumps([int(v) for v in ins] + [int(v) for v in outs]
                                         + [int(input.shape[0]), int(equal)]))
        ranks = self.ranks or list(range(n))
        deadline = time.monotonic() + self.patience
        while not store.check(keys):
            # gone: finished without having called this all-to-all. A rank that called it, then
            # stopped on what it saw, is not gone: its key is there (it may have come between
            # this loop's check of the keys and this line)
            gone = [j for j in range(n) if not store.check([keys[j]])
                    and store.check([f"labkit-check/{self.token[0]}/{self.key}/{ranks[j]}"])]
            if gone or time.monotonic() > deadline:
                self._stop(tr("rank {rank} waited in its all-to-all number {i} for rank {other}, "
                              "which never called it", rank=rank, i=self.i,
                              other=(gone or [j for j in range(n) if not store.check([keys[j]])])[0]))
            time.sleep(0.002)
        every = [json.loads(store.get(k)) for k in keys]
        lengths = [e[2 * n] for e in every]
        if all(e[2 * n + 1] for e in every) and (len(set(lengths)) > 1 or lengths[0] % n):
            short = min(range(n), key=lambda j: lengths[j])
            f = dict(i=self.i, n=n, a=short, la=lengths[short], b=max(range(n), key=lambda j: lengths[j]),
                     lb=max(lengths))
            self._stop(tr("all-to-all number {i} has no split sizes, so every rank must send the same number "
                          "of values, a multiple of {n}; rank {a} sends {la} and rank {b} {lb}: "
                          "torch.bincount(expert) stops at the largest expert present; count with "
                          "minlength=E", **f) if self.i == 1 else
                       tr("all-to-all number {i} has no split sizes, so every rank must send the same number "
                          "of values, a multiple of {n}; rank {a} sends {la} and rank {b} {lb}", **f))
        mismatch = any(every[src][dst] != every[dst][n + src] for dst in range(n) for src in range(n))
        if mismatch and self.counts is not None and self.counts.numel() % n == 0:
            table = self.counts.view(n, -1)
            by_rank, by_expert = [int(v) for v in table.sum(1)], [int(v) for v in table.sum(0)]
            if outs == by_expert != by_rank:
                self._stop(tr("in all-to-all number {i} rank {rank}'s output splits {outs} are the rows each "
                              "of its experts gets (the counts' column sums); the split list counts rows from "
                              "each source rank: the row sums, {by_rank}", i=self.i, rank=rank, outs=outs,
                              by_rank=by_rank))
        for dst in range(n):
            for src in range(n):
                sent, expected = every[src][dst], every[dst][n + src]
                if sent != expected:
                    self._stop(tr("in all-to-all number {i} rank {dst} expects {expected} rows from rank "
                                  "{src}, which sends {sent}: a rank only knows what it sends; exchange "
                                  "the split sizes first (an all-to-all of the counts), and in the combine "
                                  "swap input and output splits", i=self.i, dst=dst, expected=expected,
                                  src=src, sent=sent))
        done = self.real(output, input, output_split_sizes, input_split_sizes, group=group, **kw)
        if self.i == 1 and equal:
            self.counts = output.detach().clone().view(n, -1)           # the counts, when this was their exchange
        return done
