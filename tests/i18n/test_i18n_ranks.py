"""The ranks print in the notebook's language: set_lang reaches them in their Init options
(the route remote ranks take too), even where their own environment says otherwise."""
import os

import pytest

import labkit

pytestmark = pytest.mark.cluster


def _what_the_rank_says():
    import labkit.i18n
    return os.environ.get("LABKIT_LANG"), labkit.i18n.tr("failed: {error}", error="x")


def test_ranks_follow_the_notebooks_language(monkeypatch):
    monkeypatch.setenv("LABKIT_LANG", "en")
    labkit.set_lang("zh", figures=False)
    with labkit.Cluster(2, env={"LABKIT_LANG": "en"}) as cluster:   # the ranks' own env: English
        assert cluster.run(_what_the_rank_says) == [("zh", "出错：x")] * 2
