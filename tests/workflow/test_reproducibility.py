"""L3 (local): a run is reproducible. The same config run twice, and once with another
num_shards (2, then 1), gives byte-identical profile columns (everything but timings) and the
same status, reward and token counts per (task_index, rollout_index), against a scripted fake
engine, with all six environments in the blend (the llm_judge's judge is a second fake server:
the HTTP boundary).

The blend is the checked-in verifier fixtures (tests/data/environments/*.jsonl): each fixture
row is a task, and the engine answers it with one of its fixture completions picked by the
sample's seed, so rewards vary across a task's rollouts (0, 0.5 and 1, a judge_error). Two
instruction-following rows are langdetect-sensitive ('hello, world' in lowercase, 'HAVE A NICE
DAY' in capitals, which unseeded langdetect calls English in ~90% / ~45% of calls): without the
seed their rewards differ between rollouts and between runs.

Then run A is run again as it is (nothing is requested: its outputs are up to date), and
resharded in place (num_shards 2 -> 3) after the judge has been fixed: the engine is asked again
for exactly the rollouts that had failed (the judge_error ones), never for an ok one, and the
retried rollouts are now ok (README "Rerun one shard", docs/running.md
"Reshard").
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import REPO, endpoint_config, snakemake, write_config, write_jsonl

from rewardprof.environments import make_environment
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

FIXTURES = REPO / "tests" / "data" / "environments"
ENVS = ["math", "mcq", "reasoning_gym", "code", "instruction_following", "llm_judge"]
K = 4
K_IF = 8  # more rollouts of the langdetect-sensitive rows: each must agree with the others
LANGDETECT_ROWS = [
    (
        {
            "prompt": "Greet the world in lowercase letters only.",
            "instruction_id_list": ["change_case:english_lowercase"],
        },
        ["hello, world"],
    ),
    (
        {
            "prompt": "Wish the reader well in capital letters only.",
            "instruction_id_list": ["change_case:english_capital"],
        },
        ["HAVE A NICE DAY"],
    ),
]
TIMING = re.compile(r"(^|_)(latency|started|finished|verify_s|duration|elapsed|seconds)|_s$")
TARGET = "results/t/profile/tasks.parquet"


def _prompt_key(env_name: str, row: dict, options: dict) -> str:
    """The task's last user message as the environment builds it (what the engine sees)."""
    messages = make_environment(env_name, options).prompt(row)
    return [m["content"] for m in messages if m["role"] == "user"][-1]


class Blend:
    """Source rows per environment, the engine's answers by prompt, the judge's replies."""

    def __init__(self, judge_url: str):
        self.judge_options = {
            "base_url": judge_url,
            "model": "judge",
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
        }
        self.rows: dict[str, list[dict]] = {}
        self.answers: dict[str, list[str]] = {}
        self.judge_replies: dict[str, str] = {}
        for env in ENVS:
            options = self.judge_options if env == "llm_judge" else {}
            seen: dict[str, dict] = {}
            for line in (FIXTURES / f"{env}.jsonl").read_text().splitlines():
                case = json.loads(line)
                if "options" in case:  # per-case options (a 1 s program timeout): not a task
                    continue
                seen.setdefault(json.dumps(case["row"], sort_keys=True), case["row"])
                key = _prompt_key(env, case["row"], options)
                self.answers.setdefault(key, [])
                if case["completion"] not in self.answers[key]:
                    self.answers[key].append(case["completion"])
                if "judge_reply" in case:
                    self.judge_replies[case["completion"]] = case["judge_reply"]
            self.rows[env] = list(seen.values())
        for row, texts in LANGDETECT_ROWS:
            self.rows["instruction_following"].append(row)
            self.answers[_prompt_key("instruction_following", row, {})] = texts

    def answer(self, prompt: str, seed: int | None) -> str:
        keys = [k for k in self.answers if k in prompt]
        assert keys, f"no scripted answer for {prompt[:200]!r}"
        texts = self.answers[max(keys, key=len)]
        return texts[(seed or 0) % len(texts)]

    def judge(self, prompt: str, seed: int | None) -> str:
        response = prompt.split("Answer to grade:\n", 1)[1].split("\n\nDecide whether", 1)[0]
        return self.judge_replies[response]

    def config(self, workdir: Path, engine_url: str, num_shards: int) -> Path:
        entries = []
        for env in ENVS:
            write_jsonl(workdir / "data" / f"{env}.jsonl", self.rows[env])
            entry = {
                "label": env,
                "environment": env,
                "source": f"data/{env}.jsonl",
                "num_repeats": K_IF if env == "instruction_following" else K,
            }
            if env == "llm_judge":
                entry["options"] = self.judge_options
            if env == "code":
                # the blend's programs all end at once; the 5 s default also counts the
                # sandbox's start, which a loaded CI machine once took past it (a
                # verifier_error in one run and not the other: not what this test is about)
                entry["options"] = {"timeout_s": 60}
            entries.append(entry)
        # token ids as a vLLM endpoint returns them: exact per-sample counts (without them a
        # request's usage total is split over its n samples by text length, so a rollout
        # re-requested alone after a reshard would get another count)
        cfg = endpoint_config(
            engine_url,
            entries,
            num_shards=num_shards,
            sampling={"max_tokens": 400},
            engine={"extra_body": {"return_token_ids": True}},
            rollout={"max_failed_fraction": 1.0},
        )
        return write_config(workdir, cfg)


def _run(workdir: Path, config: Path, new_interpreters: bool = False) -> float:
    """`new_interpreters`: the jobs' commands each a new interpreter (its own hash seed), not
    forked from the stage server (one seed for all): run A is, B and C are not, so equal
    outputs also prove that nothing of a process's own makes a run differ."""
    t0 = time.monotonic()
    r = snakemake(workdir, TARGET, "--configfile", str(config), stage_server=not new_interpreters)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return time.monotonic() - t0


def _rollouts(workdir: Path) -> pd.DataFrame:
    df = pd.read_parquet(workdir / "results/t/rollouts.parquet")
    return df.set_index(["task_index", "rollout_index"]).sort_index()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs A and B (2 shards), C (1 shard), each in a fresh directory; then A again, and A
    resharded to 3 in place with a fixed judge. Returns the directories, A's rollouts before the
    reshard, and the engine requests of the rerun and of the reshard."""
    out: dict = {"seconds": {}}
    with FakeOpenAI(model="judge") as judge, FakeOpenAI() as engine:
        blend = Blend(judge.base_url)
        judge.answer, engine.answer = blend.judge, blend.answer
        for name, shards in (("a", 2), ("b", 2), ("c", 1)):
            wd = tmp_path_factory.mktemp(f"repro_{name}")
            out[name] = wd
            config = blend.config(wd, engine.base_url, shards)
            out["seconds"][name] = _run(wd, config, new_interpreters=name == "a")
        out["a_before"] = _rollouts(out["a"])
        out["a_profile_before"] = pq.read_table(out["a"] / TARGET)
        n = len(engine.requests)
        out["seconds"]["a_again"] = _run(out["a"], blend.config(out["a"], engine.base_url, 2))
        out["rerun_requests"] = engine.requests[n:]
        # the judge now grades the answer it could not grade before
        out["fixed"] = [c for c, reply in blend.judge_replies.items() if "VERDICT" not in reply]
        blend.judge_replies.update({c: "VERDICT: CORRECT" for c in out["fixed"]})
        n = len(engine.requests)
        out["seconds"]["a_reshard"] = _run(out["a"], blend.config(out["a"], engine.base_url, 3))
        out["reshard_requests"] = engine.requests[n:]
    print(f"\nreproducibility runs (s): {out['seconds']}")
    return out


def _column_bytes(table, name: str):
    col = table.column(name).to_numpy(zero_copy_only=False)
    if col.dtype.kind == "f":  # NaN where undefined: compare the bits, not the values
        return col.tobytes()
    return col.tolist()


def _assert_same_profile(left: Path | object, right: Path, what: str) -> None:
    a = left if not isinstance(left, Path) else pq.read_table(left / TARGET)
    b = pq.read_table(right / TARGET)
    assert a.column_names == b.column_names, what
    compared = [c for c in a.column_names if not TIMING.search(c)]
    assert "num_failed/judge_error" in compared and "grpo_signal" in compared
    differ = [c for c in compared if _column_bytes(a, c) != _column_bytes(b, c)]
    if differ:
        da, db = a.to_pandas(), b.to_pandas()
        detail = {
            c: [
                (i, x, y)
                for i, (x, y) in enumerate(zip(da[c], db[c], strict=True))
                if not (x == y or (pd.isna(x) and pd.isna(y)))
            ][:5]
            for c in differ
        }
        raise AssertionError(f"{what}: profile columns differ: {detail}")


def _assert_same_rollouts(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    assert a.index.equals(b.index), what
    for col in ("status", "reward", "seed", "completion_tokens", "prompt_tokens", "finish_reason"):
        x, y = a[col], b[col]
        same = (x == y) | (x.isna() & y.isna())
        assert same.all(), (
            f"{what}: {col} differs at {list(a.index[~same])[:10]}: "
            f"{list(zip(x[~same], y[~same], strict=True))[:10]}"
        )


def test_the_blend_covers_six_environments_and_langdetect(runs):
    rollouts = runs["a_before"]
    prof = runs["a_profile_before"].to_pandas()
    assert sorted(prof["environment"].unique()) == sorted(ENVS)
    assert (prof["missing_num_rollouts"] == 0).all()
    # rewards vary within tasks: there is something to reproduce
    assert {0.0, 0.5, 1.0} <= set(rollouts["reward"].dropna())
    assert (prof["grpo_signal"] > 0).sum() >= 5
    assert (rollouts["status"] == "judge_error").any()
    # the langdetect rows: one text per task, so one verdict for all K_IF rollouts of it
    texts = {t for _, ts in LANGDETECT_ROWS for t in ts}
    for text in texts:
        rewards = rollouts.loc[rollouts["completion"] == text, "reward"]
        assert len(rewards) == K_IF
        assert rewards.nunique() == 1, f"{text!r}: {rewards.tolist()}"


def test_same_config_twice_is_identical(runs):
    _assert_same_profile(runs["a_profile_before"], runs["b"], "run A vs run B")
    _assert_same_rollouts(runs["a_before"], _rollouts(runs["b"]), "run A vs run B")


def test_other_num_shards_is_identical(runs):
    assert len(list((runs["c"] / "results/t/rollouts").glob("*-of-1.parquet"))) == 1
    _assert_same_profile(runs["a_profile_before"], runs["c"], "2 shards vs 1 shard")
    _assert_same_rollouts(runs["a_before"], _rollouts(runs["c"]), "2 shards vs 1 shard")


def test_reshard_rerequests_failed_rollouts_only(runs):
    """README "Rerun one shard" / docs/running.md "Reshard": a reshard regenerates no ok
    rollout; the rollouts that had failed are requested again, once each. Rerunning the same
    layout requests nothing."""
    assert runs["rerun_requests"] == []
    before = runs["a_before"]
    asked = sorted(
        int(body["seed"]) + j
        for body in runs["reshard_requests"]
        for j in range(int(body.get("n", 1)))
    )
    failed = sorted(before.loc[before["status"] != "ok", "seed"].astype(int))
    assert failed, "the blend has no failed rollouts"
    assert asked == failed
    ok_seeds = set(before.loc[before["status"] == "ok", "seed"].astype(int))
    assert not ok_seeds & set(asked)
    after = _rollouts(runs["a"])
    assert len(list((runs["a"] / "results/t/rollouts").glob("*-of-3.parquet"))) == 3
    # ok rollouts are the very records of the first layout (same writer, same completion)
    ok = before["status"] == "ok"
    assert after.loc[ok[ok].index, "writer"].equals(before.loc[ok, "writer"])
    _assert_same_rollouts(after[ok], before[ok], "ok rollouts after the reshard")
    # the retried ones got the fixed judge's verdict: ok now, in the profile too
    retried = after[~ok]
    assert set(retried["completion"]) == set(runs["fixed"])
    assert (retried["status"] == "ok").all() and (retried["reward"] == 1.0).all()
    assert (retried["writer"] != before.loc[~ok, "writer"]).all()
    prof = pq.read_table(runs["a"] / TARGET).to_pandas()
    assert prof["num_failed"].sum() == 0
    assert (prof["num_rollouts"] == prof["expected_num_rollouts"]).all()
