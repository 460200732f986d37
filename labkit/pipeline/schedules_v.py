"""Two chunks per rank in a V: ZB-V and DualPipeV as data (layer 1: pure, no torch).

The model is cut into 2p parts. Rank r holds part r (chunk 0) and part 2p-1-r (chunk 1), so a
micro-batch goes down the ranks and comes back up: rank 0 runs both the first and the last part,
and rank p-1 passes part p-1's output to its own part p without a send.

    zb_v(4, 8)          # Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), sec. 6
    dualpipe_v(4, 8)    # DeepSeek's DualPipe cut in half (github.com/deepseek-ai/DualPipe)

Both follow the order torch builds (torch.distributed.pipelining.schedules:
ScheduleZBVZeroBubble and ScheduleDualPipeV), written again here as plain lists so that
validate() and simulate() can read them and the executor can run them.

DeepSeek-V3's DualPipe itself (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", sec. 3.2.1)
feeds micro-batches into a p-stage model from both ends at once: rank r holds stages r and
p-1-r, so every stage sits on two ranks (twice 1F1B's parameters). DualPipeV, in the DualPipe
repository, cuts that picture in half: the V layout on half as many ranks, with one copy of the
parameters. Both pair one micro-batch's forward with another's backward on a rank (F&B) so
that one chunk's communication, the expert-parallel all-to-all dispatch and combine (module 13,
`labkit.moe`) and the pipeline's sends, runs while the other chunk computes (DeepSeek-V3 report
sec. 3.2.1: each chunk split into attention, dispatch, MLP and combine, their order rearranged
and the GPU's SMs divided between communication and computation). It overlaps communication
with computation, not two computations on two streams; it exists for MoE training, where
cross-node expert parallelism makes communication about as long as computation (1:1, ibid.).
A rank here runs the two one after the other, F then B: the schedules' idle times are the same.
"""
from labkit.pipeline.actions import Action, B, F, I, Schedule, W, _args

__all__ = ["zb_v", "dualpipe_v", "dualpipe"]


def zb_v(stages: int, microbatches: int) -> Schedule:
    """ZB-V (Qi et al. 2024, arXiv 2401.10241 sec. 6): each backward split into I (input
    gradient) and W (weight gradient); warm-up 2(p-r)-1 chunk-0 forwards on rank r, then the
    V's two chunks alternate; W's fill the gaps at the end.

    The paper's claims, both checked in tests/pipeline/test_pipeline_v.py: with equal chunk times
    (F = I = W) no rank is idle between its first and its last action, so the bubble in the
    paper's convention, 1 - m(F+I+W) / (the longest rank's span), is 0; and every rank holds at
    most 2p chunk activation sets of 1/(2p) of the model each: p micro-batches' worth, 1F1B's
    first-stage peak."""
    _args(stages, microbatches)
    p, m = stages, microbatches
    n = max(2 * p - 1, m)          # torch's order assumes >= 2p-1 micro-batches; extra ones dropped
    acts = []
    for r in range(p):
        a = []
        f0 = f1 = b0 = b1 = 0
        for _ in range(2 * (p - r) - 1):
            a.append(F(f0, 0))
            f0 += 1
        for _ in range(r):
            a += [F(f1, 1), F(f0, 0)]
            f0, f1 = f0 + 1, f1 + 1
        for _ in range(p - r):
            a += [F(f1, 1), I(b1, 1), W(b1, 1)]
            f1, b1 = f1 + 1, b1 + 1
        while f1 < f0 or f0 < n:                             # steady state
            if f0 < n:
                a.append(F(f0, 0))
                f0 += 1
            a += [I(b0, 0), W(b0, 0), F(f1, 1), I(b1, 1), W(b1, 1)]
            b0, f1, b1 = b0 + 1, f1 + 1, b1 + 1
        w0, w1 = b0, b1
        for _ in range(r):                                    # cool-down: I's first, W's fill in
            a += [I(b0, 0), I(b1, 1)]
            b0, b1 = b0 + 1, b1 + 1
        for _ in range(p - r):
            a += [I(b0, 0), W(w0, 0)]
            b0, w0 = b0 + 1, w0 + 1
        a += [W(i, 1) for i in range(w1, b1)] + [W(i, 0) for i in range(w0, b0)]
        acts.append([x for x in a if x.mb < m])
    return Schedule("ZB-V", p, m, 2, acts, layout="v")


def dualpipe_v(stages: int, microbatches: int) -> Schedule:
    """DualPipeV (DeepSeek's DualPipe repository, dualpipev.py; torch's ScheduleDualPipeV): eight
    phases per rank, the middle one pairing a forward of one chunk with a full backward of the
    other (F&B: on GPUs one's communication hides behind the other's computation; run here one
    after the other). Full backwards (B) in the middle, split ones
    (I, then W later) at the start and the end, where W's fill the gaps. Needs m >= 2p.

    DeepSeek-V3 Technical Report (2024), Table 2, for DualPipe on PP ranks: bubble
    (PP/2 - 1)(F&B + B - 3W) per rank, parameters 2x, activations PP + 1 (chunk sets), where F,
    B, W are one chunk's forward, full backward and weight-gradient times. Cut in half onto
    p = PP/2 ranks that reads (p - 1)(F&B + B - 3W), one copy of the parameters, and 2p + 1
    chunk sets of 1/(2p) of the model each: p + 1/2 micro-batches' worth."""
    _args(stages, microbatches)
    p, m = stages, microbatches
    if m < 2 * p:
        raise ValueError(f"DualPipeV needs at least 2 x stages micro-batches (its warm-up fills both "
                         f"chunks of every rank): microbatches={m} < 2 x {p}")
    acts = [_dualpipe_v_rank(p, m, r) for r in range(p)]
    return Schedule("DualPipeV", p, m, 2, acts, layout="v")


def dualpipe(stages: int, microbatches: int) -> Schedule:
    """DualPipe (DeepSeek-V3 Technical Report 2024, sec. 3.2.1; deepseek-ai/DualPipe, dualpipe.py):
    m micro-batches, m/2 fed at rank 0 (chunk 0, stage r on rank r) and m/2 at rank p-1 (chunk 1,
    stage p-1-r on rank r), so every stage is on two ranks. Rank r runs DualPipeV's order for
    rank min(r, p-1-r) of p/2 with m/2 micro-batches, its chunks swapped on the second half of
    the ranks (the repository's step() is written that way). Needs p even and m/2 >= p; the
    Schedule counts m/2 micro-batches per chunk.

    DeepSeek-V3 Table 2: bubble (PP/2 - 1)(F&B + B - 3W), parameters 2x, activations PP + 1
    stage sets (F, B, W: one stage's forward, full backward and weight-gradient times). Data,
    validation and simulation only: the executor does not sum the two copies' gradients."""
    _args(stages, microbatches)
    p, m = stages, microbatches
    if p % 2 or m % 2 or m // 2 < p:
        raise ValueError(f"DualPipe needs an even number of stages and of micro-batches, half of them at least "
                         f"the stages: stages={p}, microbatches={m}")
    acts = []
    for r in range(p):
        swap = int(r >= p // 2)
        acts.append([Action(a.kind, a.mb, a.chunk ^ swap) for a in _dualpipe_v_rank(p // 2, m // 2, min(r, p - 1 - r))])
    return Schedule("DualPipe", p, m // 2, 2, acts, layout="dual")


def _dualpipe_v_rank(p: int, m: int, r: int) -> list:
    a, nxt, queue = [], {}, []       # nxt[(chunk, kind)]: the next micro-batch; queue: W's owed

    def add(kind, c):
        key = (c, "F" if kind == "F" else "I")
        i = nxt.get(key, 0)
        nxt[key] = i + 1
        a.append({"F": F, "B": B, "I": I}[kind](i, c))
        if kind == "I":
            queue.append((i, c))

    def weight():
        if queue:
            i, c = queue.pop(0)
            a.append(W(i, c))

    for _ in range(2 * (p - r - 1)):                  # 1: chunk-0 forwards
        add("F", 0)
    for _ in range(r + 1):                            # 2: F0 F1
        add("F", 0)
        add("F", 1)
    for _ in range(p - r - 1):                        # 3: I1 W1 F1
        add("I", 1)
        weight()
        add("F", 1)
    for k in range(m - 2 * p + r + 1):                # 4: the main phase, F0&B1 then F1&B0
        add("F", 0)
        add("B", 1)
        add("F", 1)
        add("B", 0)
    for _ in range(p - r - 1):                        # 5: B1, F1&B0
        add("B", 1)
        add("F", 1)
        add("B", 0)
    split = False
    for k in range(r + 1):                            # 6: B1 B0, the second half split
        if k == (r + 1) // 2 and r % 2 == 1:
            split = True
        add("I" if split else "B", 1)
        if k == (r + 1) // 2 and r % 2 == 0:
            split = True
        add("I" if split else "B", 0)
    for _ in range(p - r - 1):                        # 7: W, B0
        weight()
        add("I" if split else "B", 0)
    for _ in range(r + 1):                            # 8: the W's left
        weight()
    return a
