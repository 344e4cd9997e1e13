"""GRPO advantages and the grpo-step batch, in process (no torch): what the step trains on."""

import math

import pytest

from rewardprof.train.advantages import group_advantages
from rewardprof.train.step import TrainError, plan, read_batch


def test_two_rows_one_accepted_one_rejected_are_signed_and_symmetric():
    [[a, b]] = group_advantages([[1.0, 0.0]], [True])
    assert a > 0 > b
    assert a == -b
    assert math.isclose(a, 0.5 / (math.sqrt(0.5) + 1e-4))  # unbiased std of (1, 0) is sqrt(.5)


def test_flat_and_dropped_groups_are_exactly_zero_in_both_variants():
    groups = [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0]]
    for variant in ("grpo", "reinforce_pp"):
        flat, kept, dropped = group_advantages(groups, [True, True, False], variant)
        assert flat == [0.0, 0.0, 0.0]
        assert dropped == [0.0, 0.0]
        assert all(a != 0 for a in kept) and kept[1] > 0 > kept[0]


def test_reinforce_pp_scales_by_the_batch_not_the_group():
    groups = [[1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    grpo = group_advantages(groups, [True, True], "grpo")
    rpp = group_advantages(groups, [True, True], "reinforce_pp")
    centred = [0.5, -0.5, 0.75, -0.25, -0.25, -0.25]
    m = sum(centred) / 6
    scale = math.sqrt(sum((c - m) ** 2 for c in centred) / 5) + 1e-4
    assert rpp[1][0] == pytest.approx(0.75 / scale)
    assert rpp[0][0] == pytest.approx(0.5 / scale)
    assert grpo[0][0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4))


def test_plan_groups_rows_by_task_and_keeps_row_order(tmp_path):
    batch = tmp_path / "b.jsonl"
    rows = [
        {"task_index": 3, "kept": False, "prompt": "p", "completion": "x", "reward": 1},
        {"task_index": 1, "kept": True, "prompt": "q", "completion": "y", "reward": 0},
        {"task_index": 3, "kept": False, "prompt": "p", "completion": "z", "reward": 0},
        {"task_index": 1, "kept": True, "prompt": "q", "completion": "w", "reward": 1},
    ]
    batch.write_text("\n".join(__import__("json").dumps(r) for r in rows) + "\n")
    tasks, per_row = plan(read_batch(batch), "grpo")
    assert [t["task_index"] for t in tasks] == [1, 3]
    assert tasks[1]["advantages"] == [0.0, 0.0]
    assert per_row[0] == per_row[2] == 0.0 and per_row[1] < 0 < per_row[3]


def test_a_bad_row_names_the_file_line_and_key(tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text(
        '{"task_index": 0, "kept": true, "prompt": "p", "completion": "c", "reward": 1}\n'
        '{"task_index": 0, "kept": "yes", "prompt": "p", "completion": "c", "reward": 0}\n'
    )
    with pytest.raises(TrainError, match=r"b\.jsonl:2: key 'kept' must be a bool"):
        read_batch(batch)
