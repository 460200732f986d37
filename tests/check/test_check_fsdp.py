"""labkit.check.fsdp_budget against plausible wrong choices (each with the diagnosis it must get)."""
import pytest

import labkit

RIGHT = [dict(wrap="block", strategy="full", precision="bf16", offload=True),
         dict(wrap="block", strategy="hybrid", precision="bf16", offload=True),
         dict(wrap="linear", strategy="full", precision="bf16", offload=True)]

# (choice, words the one line must hold)
WRONG = [
    (dict(wrap="model", strategy="full", precision="bf16", offload=True), ["over the", "cost the most: wrap='model'"]),
    (dict(wrap="block", strategy="full", precision="fp32", offload=True), ["over the", "cost the most: precision='fp32'"]),
    (dict(wrap="block", strategy="full", precision="bf16", offload=False), ["over the", "cost the most: offload=False"]),
    (dict(wrap="block", strategy="grad_op", precision="bf16", offload=False), ["over the", "cost the most: offload=False"]),
    # the device's peak over the step (activations and the bf16 copy in forward), not the device
    # part of the total's peak (taken in the optimizer step, when the activations are gone)
    (dict(wrap="block", strategy="no_shard", precision="bf16", offload=True), ["over the", "cost the most: strategy='no_shard'"]),
    (dict(wrap="layer", strategy="full", precision="bf16", offload=True), ["wrap='layer' is not one of"]),
    (dict(wrap="block", strategy="FULL_SHARD", precision="bf16", offload=True), ["FSDP1's name", "strategy='full'"]),
    (dict(wrap="block", strategy="full", precision="fp16", offload=True), ["not 'fp32' or 'bf16'", "loss scaler"]),
    (dict(wrap="block", strategy="full", precision="bf16", offload="yes"), ["offload must be True or False"]),
    (dict(wrap="block", strategy="full", precision="bf16"), ["missing ['offload']"]),
    (("block", "full", "bf16", True), ["must return a dict"]),
]


def _line(capsys, choice, cluster):
    ok = labkit.check.fsdp_budget(lambda: choice, cluster=cluster)
    return ok, capsys.readouterr().out.strip()


@pytest.mark.parametrize("choice", RIGHT, ids=lambda c: "-".join(map(str, c.values())))
def test_choices_that_fit_pass(cluster4, capsys, choice):
    ok, line = _line(capsys, choice, cluster4)
    assert ok and line.startswith("fsdp_budget: pass (") and "under the 0.600 MB budget" in line, line


@pytest.mark.parametrize("choice,words", WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_wrong_choices_get_their_diagnosis(cluster4, capsys, choice, words):
    ok, line = _line(capsys, choice, cluster4)
    assert not ok and line.startswith("fsdp_budget: FAIL (") and "\n" not in line, line
    for w in words:
        assert w in line, (w, line)


def test_a_stub_is_not_implemented_yet(cluster4, capsys):
    def choose():
        raise NotImplementedError
    assert not labkit.check.fsdp_budget(choose, cluster=cluster4)
    assert "not implemented yet" in capsys.readouterr().out


def test_the_line_is_deterministic(cluster4, capsys):
    from labkit.check import fsdp as F
    F._CACHE.clear()
    a = _line(capsys, WRONG[0][0], cluster4)[1]
    F._CACHE.clear()
    assert _line(capsys, WRONG[0][0], cluster4)[1] == a
