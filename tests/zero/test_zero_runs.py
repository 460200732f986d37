"""labkit.zero measured on 4 gloo ranks: bytes held equal the formula plus named padding,
bytes sent equal 2(N-1)/N (DDP, ZeRO-1, ZeRO-2) and 3(N-1)/N (ZeRO-3) of the parameters."""
import torch

from labkit.zero.runs import reduce_scatter_bytes, step_report

GPT = dict(model="gpt", n_layer=1, n_embd=64, vocab=512, seq=16, freeze=("pos.weight",))


def _memory_and_traffic():
    out = {}
    for stage in (0, 1, 2, 3):
        for mixed in (False, True):
            out[(stage, mixed, "awkward")] = step_report(stage, mixed, steps=1)
            out[(stage, mixed, "gpt")] = step_report(stage, mixed, steps=1, **GPT)
    for stage in (0, 1, 2, 3):      # 3 micro-batches per step
        out[(stage, "accumulate")] = step_report(stage, steps=1, micro_batches=3, **GPT)
    out["fp32 reduction"] = step_report(2, True, steps=1, reduce_dtype=torch.float32, **GPT)
    out["collectives"] = reduce_scatter_bytes(1 << 16)
    return out


def _close(measured, expected, rel=0.02):
    """Wire bytes: the payload plus gloo's headers (~100 B a message), within 2 %."""
    return expected <= measured <= expected * (1 + rel) + 2048


def test_memory_and_traffic_match_the_formulas(cluster4):
    results = cluster4.run(_memory_and_traffic)
    for rank, res in enumerate(results):
        for key, r in res.items():
            if key in ("collectives",):
                continue
            exp = r["expected"]
            diff = r["memory"] - exp.total
            for c in ("params", "grads", "master", "momentum", "variance", "other"):
                assert getattr(diff, c) == 0, (rank, key, c, r["memory"], exp)
            if key[-1] == "gpt" or key in ("fp32 reduction",) or key[1] == "accumulate":
                assert _close(r["sent"], r["expected_sent"]), (rank, key, r["sent"], r["expected_sent"])
        # the ratios the course teaches, N = 4
        p = {s: res[(s, False, "gpt")] for s in range(4)}
        psi_bytes = p[0]["expected"].formula.params
        frozen = p[0]["expected"].frozen.params
        assert abs(p[0]["sent"] / psi_bytes - 1.5) < 0.02          # 2(N-1)/N
        assert abs(p[1]["sent"] / p[0]["sent"] - 1) < 0.01
        assert abs(p[2]["sent"] / p[0]["sent"] - 1) < 0.01
        # stage 3: 3(N-1)/N of the trainable bytes + the frozen ones gathered twice
        assert abs(p[3]["sent"] / (0.75 * (3 * psi_bytes + 2 * frozen)) - 1) < 0.02
        # accumulation: stage 2 reduce-scatters 3 times, stage 1 and DDP once
        a = {s: res[(s, "accumulate")]["sent"] for s in range(4)}
        assert abs(a[0] / p[0]["sent"] - 1) < 0.02 and abs(a[1] / p[1]["sent"] - 1) < 0.02
        assert abs(a[2] / p[2]["sent"] - 2) < 0.03          # (3 x RS + 1 x AG) / (RS + AG)
        # fp32 reduction of bfloat16 gradients: the reduce-scatter moves twice the bytes
        half = res[(2, True, "gpt")]["sent"]
        assert abs(res["fp32 reduction"]["sent"] / half - 1.5) < 0.03   # (2 + 1) / (1 + 1)
        col = res["collectives"]
        t = col["tensor bytes"]
        assert abs(col["labkit ring reduce-scatter"] / t - 0.75) < 0.01
        assert abs(col["torch all_gather_into_tensor"] / t - 0.75) < 0.01
        assert col["torch reduce_scatter_tensor"] / t > 1.4       # gloo reduces it all: 1.5x
