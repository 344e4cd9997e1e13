"""The simulated engine's model in process: continuous batching timing, bounded admission, and
completions that are functions of (prompt, seed)."""

from __future__ import annotations

import statistics

import pytest

from rewardprof.testing.sim_batching import BatchModel, LengthModel, pass_rate, solves
from rewardprof.testing.sim_engine import completion_text, right_answer


def finish_times(model: BatchModel, until: float = 1e9) -> dict:
    """Run the model to the end, returning key -> simulated finish time."""
    done = {}
    while (t := model.next_event()) is not None and t <= until:
        model.advance(t)
        for key in model.drain():
            done[key] = model.now
    return done


def test_one_sequence_takes_its_tokens_times_the_step_at_batch_one():
    m = BatchModel(max_num_seqs=4, step_base_s=0.01, step_per_seq_s=0.001)
    assert m.submit(0.0, [("a", 100)])
    done = finish_times(m)
    assert done["a"] == pytest.approx(100 * 0.011)
    assert m.busy_slot_s == pytest.approx(100 * 0.011)
    assert m.tokens == pytest.approx(100)
    assert m.last_idle_at == pytest.approx(1.1)


def test_a_full_batch_is_slower_per_step_and_faster_per_token():
    alone = BatchModel(max_num_seqs=64, step_base_s=0.015, step_per_seq_s=0.0003)
    alone.submit(0.0, [(0, 500)])
    t1 = finish_times(alone)[0]
    full = BatchModel(max_num_seqs=64, step_base_s=0.015, step_per_seq_s=0.0003)
    full.submit(0.0, [(i, 500) for i in range(64)])
    done = finish_times(full)
    t64 = max(done.values())
    assert t64 == pytest.approx(500 * (0.015 + 64 * 0.0003))
    assert t64 > t1  # each step is slower ...
    assert 64 * 500 / t64 > 25 * (500 / t1)  # ... but 64 sequences make > 25x the tokens/s
    assert full.busy_slot_s == pytest.approx(64 * t64)


def test_past_the_slots_sequences_wait_first_come_first_served():
    m = BatchModel(max_num_seqs=2, step_base_s=1.0, step_per_seq_s=0.0)
    m.submit(0.0, [("a", 10), ("b", 30)])
    m.submit(0.0, [("c", 5), ("d", 5)])  # both wait: the slots are taken
    assert (m.running, m.waiting) == (2, 2)
    done = finish_times(m)
    # a ends at 10, c takes its slot and ends at 15, d takes c's and ends at 20, b at 30
    assert done == pytest.approx({"a": 10.0, "c": 15.0, "d": 20.0, "b": 30.0})
    assert m.busy_slot_s == pytest.approx(10 + 30 + 5 + 5)  # always 2 busy until 20, then 1
    assert m.peak_waiting == 2


def test_the_batch_changes_speed_when_a_sequence_joins_mid_way():
    m = BatchModel(max_num_seqs=8, step_base_s=0.0, step_per_seq_s=1.0)
    m.submit(0.0, [("a", 10)])  # alone: 1 s per token
    m.submit(4.0, [("b", 3)])  # a has 6 tokens left; now 2 s per token for both
    done = finish_times(m)
    assert done["b"] == pytest.approx(4.0 + 3 * 2.0)
    assert done["a"] == pytest.approx(10.0 + 3 * 1.0)  # 3 more tokens alone after b
    assert m.busy_slot_s == pytest.approx(4 + 2 * 6 + 3)


def test_admission_past_max_waiting_refuses_the_whole_request_and_changes_nothing():
    m = BatchModel(max_num_seqs=1, step_base_s=1.0, step_per_seq_s=0.0, max_waiting=2)
    assert m.submit(0.0, [("a", 10)])  # runs
    assert m.submit(0.0, [("b", 1), ("c", 1)])  # queue holds 2
    assert not m.submit(0.0, [("d", 1)])  # would be the third waiting: refused
    assert (m.running, m.waiting) == (1, 2)
    assert set(finish_times(m)) == {"a", "b", "c"}
    assert m.submit(12.0, [("e", 1), ("f", 1), ("g", 1)])  # 1 runs, 2 wait: fits


def test_utilization_counts_idle_time_between_bursts():
    m = BatchModel(max_num_seqs=4, step_base_s=1.0, step_per_seq_s=0.0)
    m.submit(0.0, [(i, 10) for i in range(4)])  # 4 slots busy for 10 s
    finish_times(m)
    m.submit(30.0, [("late", 10)])  # 1 slot for 10 s after 20 idle seconds
    finish_times(m)
    assert m.now == pytest.approx(40.0)
    assert m.busy_slot_s / (4 * m.now) == pytest.approx((40 + 10) / 160)


def test_lengths_are_a_function_of_prompt_and_seed_with_a_long_tail():
    lengths = LengthModel(median=600, sigma=1.0, factors=(("LONG", 3.0),))
    assert lengths.length("q1", 7) == lengths.length("q1", 7)
    sample = [lengths.length(f"q{i}", i) for i in range(4000)]
    median = statistics.median(sample)
    assert 550 < median < 650
    tail = sorted(sample)[int(0.95 * len(sample))]
    assert 4.0 * median < tail < 6.5 * median  # p95 of a log-normal with sigma 1: 5.2x
    long = [lengths.length(f"LONG q{i}", i) for i in range(4000)]
    assert statistics.mean(long) / statistics.mean(
        [lengths.length(f"LONG q{i}", i) / 3 for i in range(4000)]
    ) == pytest.approx(3.0, rel=0.01)
    assert 1650 < statistics.median(long) < 1950


def test_outcomes_are_fixed_per_prompt_and_seed_at_the_prompts_pass_rate():
    prompts = [f"What is {i} + {2 * i}?" for i in range(3000)]
    rates = [pass_rate(p) for p in prompts]
    assert 0.36 < rates.count(0.0) / len(rates) < 0.44
    assert 0.17 < rates.count(1.0) / len(rates) < 0.23
    assert all(solves(p, s) is solves(p, s) for p in prompts[:50] for s in range(4))
    mid = [(p, r) for p, r in zip(prompts, rates, strict=True) if 0 < r < 1][:200]
    observed = [sum(solves(p, s) for s in range(200)) / 200 for p, _ in mid]
    errors = [abs(o - r) for o, (_, r) in zip(observed, mid, strict=True)]
    assert statistics.mean(errors) < 0.05


def test_a_completion_boxes_the_right_answer_exactly_when_the_sample_solves():
    prompt = "Compute 17 + 25. Put the answer in \\boxed{}."
    assert right_answer(prompt, {}) == "42"
    assert right_answer("no sum here", {"here": "x^2"}) == "x^2"
    seen = set()
    for seed in range(60):
        text = completion_text(prompt, seed, 100, {})
        boxed = text.rsplit("\\boxed{", 1)[1].rstrip("}.")
        assert boxed == ("42" if solves(prompt, seed) else "43")
        seen.add(boxed)
    if 0 < pass_rate(prompt) < 1:
        assert seen == {"42", "43"}


def test_an_aborted_request_leaves_the_queue_or_its_slot_and_running_ones_count_as_waste():
    m = BatchModel(max_num_seqs=2, step_base_s=0.01, step_per_seq_s=0.0)
    m.submit(0.0, [(("r0", 0), 100), (("r0", 1), 100), (("r1", 0), 100), (("r2", 0), 100)])
    assert (m.running, m.waiting) == (2, 2)
    assert m.abort(0.5, "r2") == 1  # waiting: nothing was spent on it
    assert (m.running, m.waiting, m.aborted_slot_s) == (2, 1, 0.0)
    assert m.abort(0.5, "r0") == 2  # running since 0: two slots for 0.5 s wasted
    assert m.aborted_slot_s == pytest.approx(1.0)
    assert (m.running, m.waiting) == (1, 0)  # r1 took a freed slot at once
    assert finish_times(m) == {("r1", 0): pytest.approx(0.5 + 100 * 0.01)}
    assert m.aborted_sequences == 3 and m.abort(2.0, "nobody") == 0


def test_a_batch_emptied_by_an_abort_is_idle_from_then():
    """The engine's last idle moment (where a fleet's window ends) when its last sequences are
    aborted, not finished: a client that cancels what it sampled ahead."""
    m = BatchModel(max_num_seqs=4, step_base_s=0.01, step_per_seq_s=0.001)
    m.submit(0.0, [(("r0", 0), 100)])
    assert m.last_idle_at is None
    assert m.abort(0.5, "r0") == 1
    assert m.running == 0 and m.last_idle_at == pytest.approx(0.5)
