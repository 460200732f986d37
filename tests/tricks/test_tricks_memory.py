"""What notebook 09 prints about memory, on notebook 09's model in one process (memory per rank
does not depend on the ranks: data parallel keeps the same bytes on each, and the gradient
all-reduce works in place): mixed precision stores about half of fp32's activations, within 2 %
of the formula, and the single tricks' order by memory saved, from which the notebook's
conclusion is computed."""
import json
from pathlib import Path

import pytest

from labkit.tricks import Config, Shape, compare, predict, runs

# notebook 09's model (the test below checks that the notebook still uses it)
SHAPE = Shape(n_layer=2, n_embd=128, n_head=4, vocab_size=512, seq=128, batch=4)
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "09_memory_tricks.ipynb"
SINGLES = [Config(), Config(precision="mixed"), Config(checkpointing="full"), Config(micro=4),
           Config(optimizer="adam8bit")]


def test_the_notebook_uses_this_shape():
    src = "".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"])
    assert "Shape(n_layer=2, n_embd=128, n_head=4, vocab_size=512, seq=128, batch=4)" in src


@pytest.fixture(scope="module")
def singles():
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [compare.Result(c, [runs.run(c, SHAPE, timed=0)]) for c in SINGLES]
    finally:
        torch.set_num_threads(threads)


def test_mixed_precision_stores_about_half_of_fp32s_activations(singles):
    fp32, mixed = singles[0], singles[1]
    n = fp32.rows[0]["n_params"]
    f32, fmix = predict(fp32.config, n, SHAPE).activations, predict(mixed.config, n, SHAPE).activations
    for got, want in ((fp32.stored, f32), (mixed.stored, fmix)):
        assert abs(got - want) <= 0.02 * want, (got, want)                     # each within 2 %
    ratio, formula = mixed.stored / fp32.stored, fmix / f32
    assert abs(ratio - formula) <= 0.02 * formula, (ratio, formula)
    assert 0.5 <= ratio < 0.56, ratio                   # half, plus the loss's fp32 log-probabilities


def test_measured_order_of_the_tricks_and_the_conclusion_from_it(singles):
    order = compare.measured_order(singles)
    assert order == ["A", "C", "M", "8"], order         # exact bytes: the same every run
    saved = compare.single_savings(singles)
    assert all(saved[a][0] > saved[b][0] for a, b in zip(order, order[1:]))
    text = compare.conclusion(singles)
    assert text.startswith("Measured on this model, most memory saved per rank first: 1. gradient "
                           "accumulation"), text
    assert "The notes' order of these 4 is: mixed precision" in text, text
    assert text.endswith("full checkpointing and 8-bit Adam keep their place."), text
    # the sentence follows the measurement: the notes' own order gives the other sentence
    by_code = {r.code: r for r in singles}
    base = by_code["-"].device
    fake = [by_code["-"]] + [compare.Result(by_code[c].config, [dict(by_code[c].rows[0], peak=_smaller(by_code["-"], mb))])
                             for c, mb in (("M", 8), ("C", 6), ("A", 4), ("8", 2))]
    assert compare.measured_order(fake) == ["M", "C", "A", "8"]
    assert compare.conclusion(fake).endswith("That is the notes' order."), compare.conclusion(fake)
    assert base > 0


def _smaller(result, mb):
    from dataclasses import replace
    p = result.peak
    return replace(p, activations=p.activations - int(mb * 1e6))
