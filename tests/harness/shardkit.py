"""A tiny math run for fault and kill tests: tasks table, a self-checking fake answer, checks.

Every task asks "What is A + B?". The fake server's answer names the question it was given and
the seed it sampled with, and is right unless `seed % 3 == 0`:

    [What is 3 + 4?] seed=1234 \\boxed{7}

so a record can be checked against its task without trusting any bookkeeping: its completion
must name its task's question, its seed must be task_seed(task) + rollout_index, and its reward
must be what that seed's answer deserves.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.config import Config
from rewardprof.engine.session import Endpoint
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, materialize
from rewardprof.stages.rollout.shard_job import EngineOpener
from rewardprof.store.seeds import gen_key, task_seed

MODEL = "fake-model"
_Q = re.compile(r"What is (\d+) \+ (\d+)\?")


def question(i: int) -> str:
    return f"What is {i} + {2 * i + 1}?"


def expected_reward(seed: int) -> float:
    return 0.0 if seed % 3 == 0 else 1.0


def answer(prompt: str, seed: int | None) -> str:
    """The fake policy: quotes the question and its seed; wrong when seed % 3 == 0."""
    m = _Q.search(prompt)
    if m is None:
        return "I cannot read the question."
    a, b = int(m.group(1)), int(m.group(2))
    seed = 0 if seed is None else seed
    total = a + b + (1 if seed % 3 == 0 else 0)
    return f"[{m.group(0)}] seed={seed} \\boxed{{{total}}}"


def write_source(path: Path, num_tasks: int, start: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {"question": question(i), "expected_answer": str(3 * i + 1)}
        for i in range(start, start + num_tasks)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_config(
    base_url: str,
    num_repeats: int = 4,
    rollout: dict | None = None,
    engine: dict | None = None,
    **top: Any,
) -> Config:
    data = {
        "run": "t",
        "num_shards": 1,
        "entries": [
            {
                "label": "m",
                "environment": "math",
                "source": "data/m.jsonl",
                "num_repeats": num_repeats,
            }
        ],
        "engine": {"mode": "endpoint", "base_url": base_url, "model": MODEL, **(engine or {})},
        "rollout": {
            "concurrency": 4,
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.02,
            "verify_workers": 1,
            "request_timeout_s": 5,
            "progress_interval_s": 3600,
            **(rollout or {}),
        },
        **top,
    }
    return validate_config(data, origin="test")


def make_tasks(workdir: Path, cfg: Config, num_tasks: int) -> Path:
    """Source + materialized tasks table under workdir; returns the tasks path."""
    write_source(workdir / "data" / "m.jsonl", num_tasks)
    tasks = workdir / "tasks.parquet"
    materialize.run(
        cfg, MaterializePaths(tasks=tasks, report=workdir / "report.json", base_dir=workdir)
    )
    return tasks


def endpoint(cfg: Config, api_key: str | None = None) -> Endpoint:
    assert cfg.engine.base_url is not None
    return Endpoint(cfg.engine.base_url, cfg.model_name, api_key, identity="endpoint:fake")


def engine(cfg: Config, api_key: str | None = None) -> EngineOpener:
    """run_shard's engine: the fake server's endpoint, already running."""
    return EngineOpener.running(endpoint(cfg, api_key))


def rollout_command(cfg: Config, tasks: Path, journal: Path, out: Path) -> list[str]:
    """The real `rewardprof rollout` command of shard 0 of 1 (this interpreter's install)."""
    return [
        str(Path(sys.executable).parent / "rewardprof"),
        "rollout",
        "--config-json",
        json.dumps(cfg.model_dump(mode="json")),
        "--tasks",
        str(tasks),
        "--journal",
        str(journal),
        "--out",
        str(out),
        "--shard",
        "0",
        "--num-shards",
        "1",
    ]


def load_tasks(tasks_path: Path) -> pd.DataFrame:
    return pq.read_table(
        tasks_path, columns=["task_index", "task_id", "num_repeats", "row"]
    ).to_pandas()


def check_records(records: pd.DataFrame, tasks: pd.DataFrame, cfg: Config) -> list[str]:
    """Problems with shard records against their tasks (empty list: all good). Checks each
    record's task_id, seed, completion (names its task's question) and reward."""
    problems: list[str] = []
    by_index = tasks.set_index("task_index")
    key = gen_key(cfg, cfg.model_name)
    for rec in records.itertuples(index=False):
        where = f"(task_index={rec.task_index}, rollout_index={rec.rollout_index})"
        if rec.task_index not in by_index.index:
            problems.append(f"{where}: no such task")
            continue
        task = by_index.loc[rec.task_index]
        if rec.task_id != task.task_id:
            problems.append(f"{where}: task_id {rec.task_id} is not its task's {task.task_id}")
        if rec.gen_key != key:
            problems.append(f"{where}: gen_key {rec.gen_key} != {key}")
        seed = task_seed(cfg.sampling.seed, task.task_id) + int(rec.rollout_index)
        if rec.seed != seed:
            problems.append(f"{where}: seed {rec.seed} != {seed}")
        if rec.status != "ok":
            continue
        q = json.loads(task.row)["question"]
        if not str(rec.completion).startswith(f"[{q}] seed={seed} "):
            problems.append(f"{where}: completion {rec.completion!r} is not its task's")
        if rec.reward != expected_reward(seed):
            problems.append(f"{where}: reward {rec.reward} != {expected_reward(seed)}")
    return problems


def request_pairs(requests: list[dict]) -> list[tuple[str, int]]:
    """(question, seed) of every sample asked for (a request for n asks seed .. seed+n-1)."""
    out = []
    for body in requests:
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        m = _Q.search(prompt)
        q = m.group(0) if m else prompt
        out.extend((q, body["seed"] + j) for j in range(int(body.get("n", 1))))
    return out


def record_pairs(records: pd.DataFrame, tasks: pd.DataFrame) -> set[tuple[str, int]]:
    """(question, seed) of each record, via its task_index."""
    q = tasks.set_index("task_index")["row"].map(lambda r: json.loads(r)["question"])
    return set(zip(records["task_index"].map(q), records["seed"].astype(int), strict=True))
