"""Synthetic data of realistic shape for the benchmarks: sources, tasks tables, rollouts.

Text is drawn from a fixed pool of Zipf-distributed pseudo-words (about the entropy of English
prose: zstd gets ~3x on it, not the 50x of a repeated string), so on-disk sizes and compression
times are honest. Rows look like the real thing: NeMo Gym math rows (`responses_create_params`,
`expected_answer`), code rows with unit tests, instruction-following rows with
`instruction_id_list` and the 24-key `kwargs` dicts, each with a shared per-environment
instruction header plus a 1-2 kB problem body. Completions are 0.5-8 kB (log-uniform), math
ones end in a `\\boxed{}` answer that is right about half the time.

Everything is deterministic in its seed. Library use: `python -c "import synth"` from this
directory, or `sys.path.insert(0, "benchmarks")`.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ENVIRONMENTS = ("math", "code", "instruction_following")
_POOL_BYTES = 8 << 20
_IF_KWARG_KEYS = [
    "num_highlights",
    "relation",
    "num_words",
    "num_placeholders",
    "prompt_to_repeat",
    "num_bullets",
    "section_spliter",
    "num_sections",
    "capital_relation",
    "capital_frequency",
    "keywords",
    "num_paragraphs",
    "language",
    "let_relation",
    "letter",
    "let_frequency",
    "end_phrase",
    "forbidden_words",
    "keyword",
    "frequency",
    "num_sentences",
    "postscript_marker",
    "first_word",
    "nth_paragraph",
]
_IF_CHOICES = [
    ("length_constraints:number_words", {"num_words": 300, "relation": "at least"}),
    ("punctuation:no_comma", {}),
    ("change_case:english_lowercase", {}),
    ("detectable_format:number_bullet_lists", {"num_bullets": 4}),
    ("keywords:existence", {"keywords": ["river", "lantern"]}),
]
_HEADERS = {
    "math": (
        "Solve the following math problem. Make sure to put the answer (and only the "
        "answer) inside \\boxed{}. Think step by step, show your reasoning, check every "
        "intermediate result, and simplify the final expression as far as possible.\n\n"
    ),
    "code": (
        "You are an expert competitive programmer. Read the problem statement below and "
        "write a complete Python 3 program that reads from standard input and writes to "
        "standard output. Put the whole program in one ```python code block. Avoid "
        "recursion deeper than 1000 and keep the solution within the time limit.\n\n"
    ),
    "instruction_following": (
        "Answer the request below and follow every formatting instruction exactly.\n\n"
    ),
}


class Text:
    """A pool of prose-like text; `take(rng, n)` is a random n-byte slice of it."""

    def __init__(self, seed: int = 0, pool_bytes: int = _POOL_BYTES):
        rng = np.random.default_rng(seed)
        letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
        freq = 1.0 / np.arange(1, 27) ** 0.9
        lengths = rng.integers(2, 11, 20000)
        chars = bytes(rng.choice(letters, size=int(lengths.sum()), p=freq / freq.sum()))
        ends = np.cumsum(lengths).tolist()
        words = [chars[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        zipf = 1.0 / np.arange(1, len(words) + 1) ** 1.05
        n_words = pool_bytes // 6
        picks = rng.choice(len(words), size=n_words, p=zipf / zipf.sum()).tolist()
        seps = [" ", " ", " ", " ", " ", " ", ", ", ". ", ".\n", " = ", " $x^2$ "]
        sep_picks = rng.integers(0, len(seps), n_words).tolist()
        self.pool = "".join([words[i] + seps[j] for i, j in zip(picks, sep_picks, strict=True)])

    def take(self, rng: random.Random, n: int) -> str:
        start = rng.randrange(0, len(self.pool) - n - 1)
        return self.pool[start : start + n]


def source_row(env: str, i: int, rng: random.Random, text: Text) -> dict[str, Any]:
    body = text.take(rng, rng.randrange(1000, 2000) - len(_HEADERS[env]) // 2)
    content = _HEADERS[env] + body
    if env == "math":
        answer = str(rng.randrange(0, 10000))
        if i % 3 == 0:
            answer = f"\\frac{{{answer}}}{{{rng.randrange(2, 97)}}}"
        return {
            "responses_create_params": {"input": [{"role": "user", "content": content}]},
            "expected_answer": answer,
            "problem_id": f"synth-math-{i}",
        }
    if env == "code":
        ins = [
            f"{rng.randrange(1, 100)}\n"
            + " ".join(str(rng.randrange(999)) for _ in range(8))
            + "\n"
            for _ in range(3)
        ]
        return {
            "responses_create_params": {"input": [{"role": "user", "content": content}]},
            "verifier_metadata": {
                "unit_tests": {"inputs": ins, "outputs": ["0\n"] * 3},
                "problem_id": f"synth-code-{i}",
            },
        }
    picks = [_IF_CHOICES[j] for j in sorted(rng.sample(range(len(_IF_CHOICES)), 2))]
    kwargs = [{k: args.get(k) for k in _IF_KWARG_KEYS} for _, args in picks]
    return {
        "responses_create_params": {"input": [{"role": "user", "content": content}]},
        "instruction_id_list": [iid for iid, _ in picks],
        "kwargs": kwargs,
        "prompt": content,
        "key": i,
    }


def write_sources(out_dir: Path, total_bytes: int, seed: int = 0) -> list[dict[str, Any]]:
    """One JSONL source per environment, together about `total_bytes`; returns manifest
    entries (label, environment, source)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text = Text(seed)
    entries = []
    per_env = total_bytes // len(ENVIRONMENTS)
    for k, env in enumerate(ENVIRONMENTS):
        rng = random.Random(f"{seed}:{k}")
        path = out_dir / f"{env}.jsonl"
        written = i = 0
        with path.open("w", encoding="utf-8") as f:
            while written < per_env:
                line = json.dumps(source_row(env, i, rng, text), ensure_ascii=False) + "\n"
                f.write(line)
                written += len(line.encode())
                i += 1
        entries.append(
            {"label": f"{env}_synth", "environment": env, "source": str(path), "num_repeats": 8}
        )
    return entries


def completion_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """0.5-8 kB, log-uniform (mean ~2.7 kB)."""
    return np.exp(rng.uniform(math.log(500), math.log(8000), n)).astype(np.int64)


def _string_array(text: Text, rng: np.random.Generator, lengths: np.ndarray) -> pa.Array:
    starts = rng.integers(0, len(text.pool) - 8001, len(lengths))
    pool = text.pool
    return pa.array(
        [pool[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)],
        pa.string(),
    )


def tasks_table(
    num_tasks: int,
    repeats: int = 8,
    seed: int = 0,
    with_rows: bool = True,
    environments: tuple[str, ...] = ENVIRONMENTS,
) -> tuple[pa.Table, dict[str, Any]]:
    """A tasks table (rewardprof's TASKS_SCHEMA) and its materialize report, entries in
    environment order; rows are synthetic but of realistic size when `with_rows`."""
    from rewardprof.store.schemas import TASKS_SCHEMA

    rng = random.Random(seed)
    text = Text(seed)
    bounds = np.linspace(0, num_tasks, len(environments) + 1).astype(int)
    labels, envs, rows, messages, entries = [], [], [], [], []
    for k, env in enumerate(environments):
        start, end = int(bounds[k]), int(bounds[k + 1])
        labels += [f"{env}_synth"] * (end - start)
        envs += [env] * (end - start)
        entries.append(
            {
                "label": f"{env}_synth",
                "environment": env,
                "start": start,
                "end": end,
                "num_repeats": repeats,
                "rows_read": end - start,
                "rows_selected": end - start,
            }
        )
    if with_rows:
        for i, env in enumerate(envs):
            row = source_row(env, i, rng, text)
            rows.append(json.dumps(row, sort_keys=True, separators=(",", ":")))
            messages.append(json.dumps(row["responses_create_params"]["input"]))
    else:
        rows = ['{"expected_answer":"1"}'] * num_tasks
        messages = ['[{"role":"user","content":"synthetic"}]'] * num_tasks
    task_ids = [f"{i:032x}" for i in range(num_tasks)]  # unique, 32 hex chars like the real
    table = pa.table(
        {
            "task_index": pa.array(np.arange(num_tasks), pa.int64()),
            "task_id": pa.array(task_ids, pa.string()),
            "label": pa.array(labels, pa.string()),
            "environment": pa.array(envs, pa.string()),
            "num_repeats": pa.array(np.full(num_tasks, repeats), pa.int32()),
            "source_line": pa.array(np.arange(num_tasks) + 1, pa.int64()),
            "messages": pa.array(messages, pa.string()),
            "row": pa.array(rows, pa.string()),
        },
        schema=TASKS_SCHEMA,
    )
    report = {
        "run": "bench",
        "entries": entries,
        "num_tasks": num_tasks,
        "num_rollouts_expected": num_tasks * repeats,
    }
    return table, report


def rollout_batch(
    task_index: np.ndarray,
    rollout_index: np.ndarray,
    task_ids: list[str],
    labels: list[str],
    gen_key: str,
    text: Text | None,
    rng: np.random.Generator,
    fail_every: int = 997,
) -> pa.RecordBatch:
    """Rollout records (ROLLOUT_SCHEMA) for the given keys; completions 0.5-8 kB when `text`
    is given, else a short stand-in (for journals whose text the measurement never reads)."""
    from rewardprof.store.schemas import ROLLOUT_SCHEMA

    n = len(task_index)
    lengths = completion_lengths(rng, n)
    if text is not None:
        completion = _string_array(text, rng, lengths)
    else:
        completion = pa.array(["x"] * n, pa.string())
    reward = (rng.random(n) < 0.4 + 0.5 * ((task_index % 7) / 7)).astype(np.float64)
    status = np.where(np.arange(n) % fail_every == 1, "timeout", "ok")
    reward_arr = pa.array(reward, mask=status != "ok")
    finish = np.where(lengths > 7600, "length", "stop")
    now = time.time()
    tokens = (lengths // 4).astype(np.int32)
    cols = {
        "task_index": pa.array(task_index, pa.int64()),
        "rollout_index": pa.array(rollout_index, pa.int32()),
        "task_id": pa.array(task_ids, pa.string()),
        "label": pa.array(labels, pa.string()),
        "status": pa.array(status, pa.string()),
        "reward": reward_arr,
        "finish_reason": pa.array(finish, pa.string()),
        "prompt_tokens": pa.array(np.full(n, 400), pa.int32()),
        "completion_tokens": pa.array(tokens, pa.int32()),
        "completion_tokens_source": pa.array(["engine"] * n, pa.string()),
        "completion": completion,
        "extras": pa.array(['{"extracted":"42"}'] * n, pa.string()),
        "error": pa.nulls(n, pa.string()),
        "attempt": pa.array(np.ones(n), pa.int32()),
        "request_n": pa.array(np.full(n, 8), pa.int32()),
        "seed": pa.array(np.arange(n), pa.int64()),
        "gen_key": pa.array([gen_key] * n, pa.string()),
        "model": pa.array(["synthetic-model"] * n, pa.string()),
        "engine": pa.array(["endpoint:synthetic"] * n, pa.string()),
        "started_at": pa.array(np.full(n, now), pa.float64()),
        "finished_at": pa.array(now + np.arange(n) * 1e-3, pa.float64()),
        "latency_s": pa.array(np.full(n, 1.5), pa.float64()),
        "verify_s": pa.array(np.full(n, 0.002), pa.float64()),
        "writer": pa.array(["synthetic-writer"] * n, pa.string()),
    }
    return pa.RecordBatch.from_pydict(cols, schema=ROLLOUT_SCHEMA)


# Runs argv[2:] as its child and writes the child's peak RSS (kB) and CPU seconds to argv[1].
_MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, use = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{use.ru_maxrss} {use.ru_utime + use.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(cmd: list[str], **popen: Any) -> tuple[int, float, float, float, str]:
    """Run `cmd`; return (exit code, wall s, peak RSS MB, CPU s, its stdout + stderr).

    Through a small launcher process: Linux starts a child's ru_maxrss at the RSS of the
    process that forked it, so measured straight from a benchmark that has generated GBs of
    data, every command would report at least the benchmark's own size."""
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".rss") as note:
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", _MEASURE, note.name, *cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **popen,
        )
        wall = time.monotonic() - t0
        fields = note.read().split()
    output = proc.stdout.decode(errors="replace")
    if len(fields) != 2:
        return proc.returncode or 1, wall, float("nan"), float("nan"), output
    return proc.returncode, wall, int(fields[0]) / 1024, float(fields[1]), output


def write_parquet(table_or_batches, path: Path, schema: pa.Schema | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(table_or_batches, pa.Table):
        pq.write_table(table_or_batches, path, compression="zstd")
        return
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for b in table_or_batches:
            w.write_batch(b)


def default_out(name: str) -> Path:
    """Scratch space for generated data: $REWARDPROF_BENCH_DIR or benchmarks/out/<name>."""
    base = os.environ.get("REWARDPROF_BENCH_DIR")
    root = Path(base) if base else Path(__file__).resolve().parent / "out"
    return root / name


def trivial_environment():
    """An environment whose verifier costs nothing (for the client-overhead benchmark);
    registered as `bench_trivial`."""
    from rewardprof import environments
    from rewardprof.environments import Environment, Verdict

    class TrivialEnvironment(Environment):
        name = "bench_trivial"

        async def verify(self, row, completion, ctx):
            return Verdict(1.0 if "boxed" in completion else 0.0)

    globals()["TrivialEnvironment"] = TrivialEnvironment
    environments.BUILTIN.setdefault("bench_trivial", "synth:TrivialEnvironment")
    return TrivialEnvironment
