"""labkit exchanges small values between ranks as tensors of JSON bytes (labkit/comm/objects.py),
never with torch's object collectives, which unpickle what a peer sent (a peer that is not the
learner's rank would run code as the learner: docs/teaching.md, the threat model)."""
import pathlib
import re

import pytest

import labkit

ROOT = pathlib.Path(__file__).resolve().parents[2]
OBJECT_COLLECTIVES = re.compile(r"\b(all_gather_object|broadcast_object_list|gather_object|"
                                r"scatter_object_list|send_object_list|recv_object_list)\s*\(")


def test_no_labkit_code_calls_an_object_collective():
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "labkit").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if OBJECT_COLLECTIVES.search(line.split("#")[0])]
    assert not found, f"object collectives (they unpickle a peer's bytes): {found}"


def _exchange():
    import torch.distributed as dist
    from labkit.comm.objects import all_gather_json, broadcast_json
    r = dist.get_rank()
    mine = {"rank": r, "hash": -(2 ** 63) + r, "x": 0.1 * r, "name": "秩" * (r + 1),
            "list": list(range(r * 50))}                       # uneven lengths per rank
    every = all_gather_json(mine)
    told = broadcast_json({"from": r, "order": [3, 1, 2]} if r == 1 else None, src=1)
    return every, told


@pytest.mark.cluster
def test_json_collectives_give_what_the_object_ones_gave(cluster2):
    for every, told in cluster2.run(_exchange):
        assert [e["rank"] for e in every] == [0, 1]
        assert every[1] == {"rank": 1, "hash": -(2 ** 63) + 1, "x": 0.1, "name": "秩秩",
                            "list": list(range(50))}
        assert told == {"from": 1, "order": [3, 1, 2]}


def _pickle_from_a_peer(marker):
    """Rank 1 plays a peer that answers with a pickle that would create `marker` when loaded."""
    import os
    import pickle
    import torch
    import torch.distributed as dist
    from labkit.comm import objects

    class Payload:
        def __reduce__(self):
            return (os.mknod, (marker,))
    if dist.get_rank() == 1:                          # what all_gather_object would have sent
        objects._encode = lambda value, device: torch.frombuffer(
            bytearray(pickle.dumps(Payload())), dtype=torch.uint8)
    try:
        objects.all_gather_json({"ok": 1})
        return "decoded"
    except ValueError as exc:                         # json refuses it: no code ran
        return type(exc).__name__
    finally:
        import importlib
        importlib.reload(objects)


@pytest.mark.cluster
def test_a_peer_pickle_is_never_loaded(cluster2, tmp_path):
    marker = str(tmp_path / "ran")
    out = cluster2.run(_pickle_from_a_peer, marker)
    assert not pathlib.Path(marker).exists(), "the peer's pickle ran"
    assert out[0] in ("JSONDecodeError", "UnicodeDecodeError"), out
