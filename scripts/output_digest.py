"""Digest the outputs of two runs, so that a change meant to move code, not behaviour, can be
checked: the default config and an adaptive bayes config (60 math tasks, K = 16) run through
the Snakefile of the checkout this script is in, against a scripted engine (the fake server
answering each (prompt, seed) the same way every time: right for a per-task share of seeds).
Prints one line per output file: run, path under results/<run>/, digest. Left out of each
digest: timings, hosts, pids, ports, writer ids, and row order where rows land in the order
they finished (the outputs of the shards and the journal are sorted first).

    python scripts/output_digest.py OUTDIR > before.txt     # at one commit
    python scripts/output_digest.py OUTDIR2 > after.txt     # at the other, then diff
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
from rewardprof.testing.fake_server import FakeOpenAI  # noqa: E402

VOLATILE = re.compile(
    r"(time|_s$|_at$|elapsed|duration|started|finished|host|pid|rss|latency|wall|cpu|seconds|"
    r"per_s|rate$|throughput|^journal$|^path$|^dir$|written|tmp|_mb$|version|^engine$|^writer$|^window$|base_url|since)",
    re.I,
)


GOLD: dict[str, tuple[str, str]] = {}  # question text -> (format, answer)
for name, fmt in (("math", "boxed"), ("mcq", "boxed")):
    for line in (REPO / f"data/examples/{name}.jsonl").read_text().splitlines():
        row = json.loads(line)
        GOLD[row["responses_create_params"]["input"][-1]["content"]] = (fmt, row["expected_answer"])


def _gold(prompt: str):
    for q, g in GOLD.items():
        if q in prompt:
            return g
    calc = re.findall(r"Calculate (-?\d+ [-+*/] -?\d+)\.", prompt)
    if calc:
        a, op, b = calc[-1].split()
        value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}.get(
            op, int(a) / int(b) if int(b) else 0
        )
        return ("tag", str(int(value)) if float(value).is_integer() else str(value))
    return None


def answer(prompt: str, seed) -> str:
    h = hashlib.sha256(f"{prompt}|{seed}".encode()).digest()
    m = re.search(r"What is (\d+) \+ 1\?", prompt)
    if m:  # the adaptive run's tasks
        i = int(m.group(1))
        lucky = hashlib.sha256(str(seed).encode()).digest()[0] < 64
        right = i % 3 == 1 or (i % 3 == 2 and lucky)
        return f"It is \\boxed{{{i + 1 if right else i + 7}}}."
    task_p = hashlib.sha256(prompt.encode()).digest()[0]  # each task its own pass rate
    right = h[0] < task_p
    gold = _gold(prompt)
    if gold is None:  # instruction following: two kinds of answer
        if right:
            return "HELLO WORLD. This is a short answer, with a comma and no more than fifty words."
        return "hello world"
    fmt, value = gold
    value = value if right else value + "0"
    return f"<answer>{value}</answer>" if fmt == "tag" else f"So \\boxed{{{value}}}."


def clean(obj):
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items() if not VOLATILE.search(str(k))}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    if isinstance(obj, str) and obj.startswith(("/", str(OUT))):
        return "<path>"  # an absolute path: where the run happened to be
    return obj


def digest(path: Path) -> str:
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
        df = df[[c for c in df.columns if not VOLATILE.search(c)]].astype(str)
        df = df.sort_values(list(df.columns)).reset_index(drop=True)  # rows in finishing order
        data = df.to_json(orient="records", default_handler=str).encode()
    elif path.suffix == ".json":
        data = json.dumps(clean(json.loads(path.read_text())), sort_keys=True).encode()
    elif path.suffix == ".jsonl":
        data = "\n".join(
            json.dumps(clean(json.loads(line)), sort_keys=True)
            for line in path.read_text().splitlines()
        ).encode()
    else:
        data = path.read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def run(name: str, cfg: dict, files: dict[str, str]) -> None:
    work = OUT / name
    work.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    with FakeOpenAI(answer=answer) as s:
        cfg["engine"] = {"mode": "endpoint", "base_url": s.base_url, "model": "fake-model"}
        (work / "run.yaml").write_text(yaml.safe_dump(cfg))
        paths = (
            "--snakefile",
            REPO / "Snakefile",
            "--directory",
            work,
            "--configfile",
            work / "run.yaml",
        )
        cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *map(str, paths)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    (work / "snakemake.log").write_text(r.stdout + r.stderr)
    if r.returncode:
        sys.exit(f"{name}: snakemake failed, see {work}/snakemake.log")
    res = work / "results" / cfg["run"]
    journal: list[Path] = []
    for p in sorted(res.rglob("*")):
        rel = p.relative_to(res)
        if p.is_dir() or rel.parts[0] in ("logs", "benchmarks") or "heartbeat" in str(rel):
            continue
        if rel.parts[:2] == ("rollouts", "journal"):
            journal.append(p)
            continue
        if p.suffix in (".png", ".svg", ".html"):
            continue
        print(f"{name}\t{rel}\t{digest(p)}")
    records = pd.concat([pd.read_parquet(p) for p in journal if p.suffix == ".parquet"])
    records = records[[c for c in records.columns if not VOLATILE.search(c)]]
    records = records.astype(str)
    records = records.sort_values(list(records.columns)).reset_index(drop=True)
    data = records.to_json(orient="records", default_handler=str).encode()
    print(f"{name}\tjournal records ({len(records)})\t{hashlib.sha256(data).hexdigest()[:16]}")


if len(sys.argv) != 2:
    sys.exit("usage: python scripts/output_digest.py OUTDIR")
OUT = Path(sys.argv[1]).resolve()
default = yaml.safe_load((REPO / "config/config.yaml").read_text())
for e in default["entries"]:
    if isinstance(e["source"], str):
        e["source"] = str(REPO / e["source"])
default["rollout"] = {**default.get("rollout", {}), "concurrency": 4}
run("default", default, {})

rows = "\n".join(
    json.dumps(
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": f"What is {i} + 1?"}]
            },
            "expected_answer": str(i + 1),
        }
    )
    for i in range(60)
)
bayes = {
    "run": "b",
    "num_shards": 2,
    "entries": [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 16}],
    "rollout": {"concurrency": 4},
    "adaptive": {"mode": "bayes"},
}
run("bayes", bayes, {"data/m.jsonl": rows + "\n"})
