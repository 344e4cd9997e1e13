"""Per-rollout completion_tokens must not depend on request batching
(engine.max_n). The client asks for token ids (return_token_ids, a vLLM extension) in serve
mode or when told; splitting a usage total by text length is a labeled fallback."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit

from rewardprof.engine.reply import parse_choices as _parse_choices
from rewardprof.stages.rollout.shard_job import ShardJob, run_shard
from rewardprof.store.seeds import gen_key, wants_token_ids
from rewardprof.testing.fake_server import FakeOpenAI


def _long_answer(prompt: str, seed: int | None) -> str:
    """Answers of different lengths and word shapes (chars per token vary by seed)."""
    words = 3 + (seed or 0) % 11
    return kit.answer(prompt, seed) + " " + " ".join(["w" * (1 + (seed or 0) % 7)] * words)


def _run(tmp_path, server, name: str, num_repeats: int = 8, **engine):
    cfg = kit.make_config(server.base_url, num_repeats, engine=engine)
    tasks = kit.make_tasks(tmp_path, cfg, 3)
    out = tmp_path / f"{name}.parquet"
    summary = run_shard(
        ShardJob(cfg, tasks, tmp_path / f"{name}-journal", out, "0-of-1"), kit.engine(cfg)
    )
    recs = pq.read_table(out).to_pandas().sort_values(["task_index", "rollout_index"])
    return summary, recs.reset_index(drop=True)


def test_token_counts_identical_under_max_n_8_and_1(tmp_path):
    with FakeOpenAI(_long_answer) as server:
        s8, grouped = _run(tmp_path, server, "g", max_n=8, return_token_ids=True)
        asked = list(server.requests)
        s1, single = _run(tmp_path, server, "s", max_n=1, return_token_ids=True)
    assert all(b["return_token_ids"] is True for b in asked)
    assert (grouped["request_n"] == 8).all() and (single["request_n"] == 1).all()
    assert grouped["completion"].tolist() == single["completion"].tolist()
    assert grouped["completion_tokens"].tolist() == single["completion_tokens"].tolist()
    # exact: the fake's tokens are the words of the answer
    assert grouped["completion_tokens"].tolist() == [len(c.split()) for c in grouped["completion"]]
    assert set(grouped["completion_tokens_source"]) == {"engine"}
    assert s8["completion_tokens_source"] == s1["completion_tokens_source"] == {"engine": 24}


def test_without_token_ids_counts_are_apportioned_labeled_and_logged(tmp_path, caplog):
    """Endpoint mode by default does not send the vLLM-only field: several samples per request
    share one usage total, split by text length. Each such record says so, and so does the
    log; one sample per request gets usage's own count."""
    with (
        FakeOpenAI(_long_answer) as server,
        caplog.at_level(logging.WARNING, logger="rewardprof.stages.rollout"),
    ):
        s8, grouped = _run(tmp_path, server, "g", max_n=8)
        _, single = _run(tmp_path, server, "s", max_n=1)
        assert not any("return_token_ids" in b for b in server.requests)
    assert set(grouped["completion_tokens_source"]) == {"apportioned"}
    assert s8["completion_tokens_source"] == {"apportioned": 24}
    assert any(
        "24 of 24 rollouts have completion_tokens apportioned" in r.getMessage()
        for r in caplog.records
    )
    assert set(single["completion_tokens_source"]) == {"usage"}
    exact = [len(c.split()) for c in single["completion"]]
    assert single["completion_tokens"].tolist() == exact
    # the estimate keeps each request's total but not each rollout's count
    assert grouped["completion_tokens"].sum() == sum(exact)
    assert grouped["completion_tokens"].tolist() != exact


@pytest.mark.parametrize(
    "mode, flag, want",
    [
        ("serve", None, True),
        ("endpoint", None, False),
        ("endpoint", True, True),
        ("serve", False, False),
    ],
)
def test_return_token_ids_default_by_mode(mode, flag, want):
    cfg = kit.make_config("http://127.0.0.1:1/v1", engine={"mode": mode, "return_token_ids": flag})
    assert wants_token_ids(cfg) is want


def test_return_token_ids_does_not_change_gen_key():
    base = kit.make_config("http://x")
    keys = {
        gen_key(kit.make_config("http://x", engine=e), kit.MODEL)
        for e in [
            {},
            {"return_token_ids": True},
            {"return_token_ids": False},
            {"extra_body": {"return_token_ids": True}},
            {"mode": "serve"},
        ]
    }
    assert keys == {gen_key(base, kit.MODEL)}
    other = kit.make_config("http://x", engine={"extra_body": {"min_p": 0.1}})
    assert gen_key(other, kit.MODEL) != gen_key(base, kit.MODEL)


def test_parse_choices_sources():
    def payload(*choices, total):
        return {
            "choices": [
                {"index": i, "message": {"content": t}, **extra}
                for i, (t, extra) in enumerate(choices)
            ],
            "usage": {"completion_tokens": total},
        }

    ids = payload(("ab", {"token_ids": [1, 2]}), ("abcd", {"token_ids": [1]}), total=3)
    assert [(c.completion_tokens, c.tokens_source) for c in _parse_choices(ids, 2)[0]] == [
        (2, "engine"),
        (1, "engine"),
    ]
    one = payload(("abc", {}), total=5)
    assert [(c.completion_tokens, c.tokens_source) for c in _parse_choices(one, 1)[0]] == [
        (5, "usage")
    ]
    rest = payload(("ab", {"token_ids": [1, 2]}), ("abcd", {}), total=9)
    assert [(c.completion_tokens, c.tokens_source) for c in _parse_choices(rest, 2)[0]] == [
        (2, "engine"),
        (7, "usage"),
    ]
    split = payload(("ab", {}), ("abcdef", {}), total=8)
    assert [(c.completion_tokens, c.tokens_source) for c in _parse_choices(split, 2)[0]] == [
        (2, "apportioned"),
        (6, "apportioned"),
    ]
    none = {"choices": [{"message": {"content": "x"}}]}
    assert [(c.completion_tokens, c.tokens_source) for c in _parse_choices(none, 1)[0]] == [
        (None, None)
    ]
