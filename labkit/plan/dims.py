"""Which CP and EP degrees the planner tries, and its reasons for them (layer 1: pure arithmetic).

- CP is tried when every rank keeps at least CP_MIN_TOKENS tokens: 8192, the sequence Llama 3
  trained at without CP (arXiv 2407.21783, section 3.3.2, table 4); S must split into 2 CP
  chunks (the causal load-balanced layout, `labkit.cp.layout`).
- EP is tried for MoE models, at every divisor of the experts that divides CP x DP (EP re-cuts
  the data-parallel ranks, `labkit.nd.layout`).
"""
from labkit.i18n import tr
from labkit.memory import GB

CP_MIN_TOKENS = 8192      # CP is tried only when every rank keeps at least this many tokens


def cp_choices(model) -> list:
    """CP degrees tried: 1, and those leaving every rank >= CP_MIN_TOKENS tokens (S % 2 CP = 0)."""
    return [c for c in (1, 2, 4, 8, 16, 32, 64)
            if c == 1 or (model.seq // c >= CP_MIN_TOKENS and model.seq % (2 * c) == 0)]


def ep_choices(model, cp: int, dp: int) -> list:
    """EP degrees tried: the divisors of the experts that also divide CP x DP."""
    if not model.experts:
        return [1]
    return [e for e in range(1, model.experts + 1) if model.experts % e == 0 and (cp * dp) % e == 0]


def cp_ep_reasons(model, cands: list, best, _best) -> list:
    """The planner's branches 7 (CP) and 8 (EP), each with the best layout of the other side;
    `_best(cands, pred)` is the planner's pick among the candidates that fit."""
    out = []
    if len(cp_choices(model)) == 1:
        out.append((tr("7. CP for long sequences"), tr("not tried: a sequence of {seq:,} tokens over 2 "
                                                   "ranks would leave each under {least:,}",
                                                   seq=model.seq, least=CP_MIN_TOKENS)))
    else:
        no_cp = _best(cands, lambda c: c.cp == 1)
        if best.cp > 1:
            out.append((tr("7. CP for long sequences"), tr(
                "CP {cp}: each GPU holds {mine:,} of the {seq:,} tokens, activations {act:.1f} GB, K/V "
                "all-gathers {kv:.1f} GB/step; ", cp=best.cp, mine=model.seq // best.cp, seq=model.seq,
                act=best.activations / GB, kv=best.traffic.cp / GB) +
                (tr("without CP nothing fits") if no_cp is None
                 else tr("best without CP: {short}", short=no_cp.short()))))
        else:
            with_cp = _best(cands, lambda c: c.cp > 1)
            out.append((tr("7. CP for long sequences"), tr("not chosen") + (
                tr("; best with CP: {short}", short=with_cp.short()) if with_cp
                else tr(": nothing with CP fits"))))
    if model.experts:
        no_ep = _best(cands, lambda c: c.ep == 1)
        if best.ep > 1:
            out.append((tr("8. EP for experts"), tr(
                "EP {ep}: each GPU holds {mine} of {experts} experts per layer, all-to-alls {a2a:.1f} "
                "GB/step ({calls} calls); ", ep=best.ep, mine=model.experts // best.ep,
                experts=model.experts, a2a=best.traffic.ep / GB, calls=best.traffic.calls['ep']) +
                (tr("without EP nothing fits") if no_ep is None
                 else tr("best without EP: {short}", short=no_ep.short()))))
        else:
            with_ep = _best(cands, lambda c: c.ep > 1)
            out.append((tr("8. EP for experts"), tr("not chosen") + (
                tr("; best with EP: {short}", short=with_ep.short()) if with_ep
                else tr(": nothing with EP fits"))))
    return out
