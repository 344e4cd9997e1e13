from __future__ import annotations

import os

import pytest

from rewardprof.core.atomic import atomic_path


def test_a_failed_block_leaves_neither_output_nor_temp(tmp_path):
    final = tmp_path / "report.json"
    with pytest.raises(RuntimeError), atomic_path(final) as tmp:
        tmp.write_text("partial")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
