"""GPUs shared by a class: the backend decision and the rank-to-GPU map as pure code.

No GPU is needed: the count of visible devices is an input. What a real GPU does with the same
path is checked by scripts/gpu_check.py where one is lent.
"""
import pytest

from labkit.runtime.gpus import choose_backend, rank_gpus, visible_devices


@pytest.mark.parametrize("cvd, physical, shown", [
    (None, 4, [0, 1, 2, 3]),                      # unset: every GPU of the node
    (None, 0, []),
    ("2,3", 8, [2, 3]),                           # a spawner gave this learner GPUs 2 and 3
    (" 5 , 6 ", 8, [5, 6]),
    ("", 8, []),                                  # a spawner gave none
    ("-1", 8, []),
    ("0,-1,2", 8, [0]),                           # CUDA stops at the first invalid entry
    ("1,9,2", 4, [1]),                            # 9 is past the node's 4 GPUs
    ("1,1", 4, []),                               # a repeated entry hides every device
    ("GPU-8c3f,GPU-11aa", None, ["GPU-8c3f", "GPU-11aa"]),
    ("MIG-ab12,x", None, ["MIG-ab12"]),
    ("6,7", None, [6, 7]),                        # the node's count unknown: indices taken as given
])
def test_visible_devices_follow_cuda_rules(cvd, physical, shown):
    assert visible_devices(cvd, physical) == shown


def test_auto_with_a_gpu_per_rank_is_nccl_and_says_nothing():
    assert choose_backend("auto", 4, 4, "4,5,6,7").backend == "nccl"
    assert choose_backend("auto", 2, 8, None).note == ""


def test_auto_on_a_laptop_is_gloo_without_a_line():
    c = choose_backend("auto", 4, 0, None)
    assert (c.backend, c.note) == ("gloo", "")


def test_auto_with_fewer_given_gpus_than_ranks_says_what_and_why():
    c = choose_backend("auto", 4, 2, "2,3")
    assert c.backend == "gloo"
    assert "\n" not in c.note and c.note.startswith("labkit: backend='auto' chose gloo on the CPU")
    for words in ("4 ranks", "only 2 GPU(s) visible", "CUDA_VISIBLE_DEVICES=2,3",
                  "NCCL needs one GPU per rank", "labkit.Cluster(2) would run NCCL"):
        assert words in c.note, (words, c.note)


def test_auto_when_the_spawner_gave_no_gpu_says_so():
    c = choose_backend("auto", 4, 0, "")
    assert c.backend == "gloo" and "no GPU is visible" in c.note and "(CUDA_VISIBLE_DEVICES='')" in c.note


def test_nccl_with_too_few_gpus_raises_naming_the_variable():
    with pytest.raises(ValueError, match=r"world_size=4 but 2 GPU\(s\) are visible here "
                                         r"\(CUDA_VISIBLE_DEVICES=0,1\).*world_size<=2"):
        choose_backend("nccl", 4, 2, "0,1")
    assert choose_backend("nccl", 2, 2, "0,1").backend == "nccl"
    assert choose_backend("gloo", 2, 8, None) == choose_backend("gloo", 2, 0, "")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="'auto', 'gloo' or 'nccl'"):
        choose_backend("mpi", 2, 0)


def test_each_rank_gets_a_given_gpu_and_never_another():
    # A node of 8 GPUs, two learners given 0,1,2,3 and 4,5,6,7: cuda:r of each rank is the r-th
    # given GPU, so the two clusters never share a device.
    a, b = rank_gpus(4, "0,1,2,3", 8), rank_gpus(4, "4,5,6,7", 8)
    assert a == [0, 1, 2, 3] and b == [4, 5, 6, 7] and not set(a) & set(b)
    assert rank_gpus(2, "6,7", 8) == [6, 7]
    assert rank_gpus(2, None, 8) == [0, 1]
    with pytest.raises(ValueError, match="4 ranks but 2 GPU"):
        rank_gpus(4, "6,7", 8)


def test_decide_backend_reads_the_ranks_cuda_visible_devices(monkeypatch):
    # On this CPU build of torch: whatever the variable says, no GPU, and a line when one was set.
    import torch
    from labkit.runtime.options import decide_backend
    if torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch: scripts/gpu_check.py checks this path on a GPU")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    c = decide_backend("auto", 2)
    assert c.backend == "gloo" and "no GPU is visible" in c.note
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert decide_backend("auto", 2).note == ""
    c = decide_backend("auto", 2, {"CUDA_VISIBLE_DEVICES": "3"})
    assert c.backend == "gloo" and "CUDA_VISIBLE_DEVICES=3" in c.note


def _doc_block(needle: str) -> str:
    """The ```python block of docs/teaching.md (the section on GPUs) that holds `needle`."""
    import pathlib
    text = pathlib.Path(__file__).resolve().parents[2].joinpath("docs", "teaching.md").read_text()
    blocks = [b.split("```")[0] for b in text.split("```python\n")[1:]]
    found = [b for b in blocks if needle in b]
    assert len(found) == 1, f"{len(found)} python blocks of docs/teaching.md hold {needle!r}"
    return found[0]


def test_the_documented_pre_spawn_hook_gives_each_learner_their_own_gpus():
    # The hook of docs/teaching.md, run on stand-ins for JupyterHub's config and spawners.
    import io
    import types
    names = ["ana", "bo", "cy", "di", "ed"]
    c = types.SimpleNamespace(Spawner=types.SimpleNamespace())
    ns = {"c": c, "open": lambda path: io.StringIO("\n".join(names) + "\n")}
    exec(_doc_block("def gpus_for("), ns)
    shared = {"OMP_NUM_THREADS": "4"}                  # config's dict, the same for every spawner
    given = {}
    for name in names:
        spawner = types.SimpleNamespace(user=types.SimpleNamespace(name=name), environment=shared)
        c.Spawner.pre_spawn_hook(spawner)
        given[name] = spawner.environment["CUDA_VISIBLE_DEVICES"]
        assert spawner.environment["OMP_NUM_THREADS"] == "4"
    assert shared == {"OMP_NUM_THREADS": "4"}          # the hook did not write into config's dict
    assert given == {"ana": "0,1", "bo": "2,3", "cy": "4,5", "di": "6,7", "ed": "0,1"}
    for name, cvd in given.items():                    # and labkit then runs NCCL on 2 ranks
        assert rank_gpus(2, cvd, 8) == [int(g) for g in cvd.split(",")]
        assert choose_backend("auto", 4, 2, cvd).backend == "gloo"
