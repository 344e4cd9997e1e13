"""What the repository says about itself holds: every CLI argument has help text; every fenced
block of README and docs/ names its language, and a command block is either run by
tests/workflow/test_doc_commands.py or marked with why it cannot run here; a documented
`--configfile` is never followed by a target (Snakemake would read the target as one more config
file). That no file names a file outside the repository is checked in
tests/functional/test_repo_files.py (it lists the files with git)."""

from __future__ import annotations

import argparse
import re

import pytest
from harness.doc_commands import (
    REASONS,
    REPO,
    blocks,
    doc_files,
    snakemake_commands,
    words_after_configfile,
)

from rewardprof.cli import build_parser


def _arguments_without_help(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _arguments_without_help(sub, f"{prefix} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"{prefix} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_cli_argument_has_help_text():
    assert _arguments_without_help(build_parser(), "rewardprof") == []


_ALL_BLOCKS = [b for path in doc_files() for b in blocks(path)]


def test_the_docs_have_command_blocks():
    assert len([b for b in _ALL_BLOCKS if b.is_shell]) >= 15


@pytest.mark.parametrize("block", _ALL_BLOCKS, ids=lambda b: b.where)
def test_every_fence_names_its_language_and_marks_are_known(block):
    assert block.info, f"{block.where}: label the fence (bash for commands, text for output)"
    if block.mark is not None:
        assert block.is_shell, f"{block.where}: only command blocks are marked"
        assert block.mark in REASONS, f"{block.where}: unknown reason {block.mark!r}"
    elif block.is_shell:
        # run verbatim by the workflow test: no placeholder a shell would mistake for a redirect
        for command in block.commands():
            assert not re.search(r"<\w+>", command), f"{block.where}: placeholder in {command!r}"


def test_no_documented_configfile_is_followed_by_a_target():
    bad = [
        (where, command)
        for path in doc_files()
        for where, command in snakemake_commands(path)
        if not all(w.endswith((".yaml", ".yml", ".json")) for w in words_after_configfile(command))
    ]
    assert bad == []
    shown = [c for path in doc_files() for _, c in snakemake_commands(path)]
    assert any("--configfile" in c for c in shown)  # the check saw the commands


def test_documented_targets_follow_a_one_word_configfile():
    # `--configfile FILE TARGET` parses TARGET as YAML before any rewardprof code runs: a
    # documented command naming a target writes the config as one word, --configfile=FILE
    with_target = [
        (where, command)
        for path in doc_files()
        for where, command in snakemake_commands(path)
        if "results/" in command.split("#")[0] and "--report" not in command
    ]
    assert with_target, "the README's rerun of one shard names a target"
    assert [(w, c) for w, c in with_target if "--configfile " in c] == []
    assert words_after_configfile("snakemake --configfile=a.yaml results/x.parquet") == ["a.yaml"]


def test_test_modules_have_unique_names():
    # the test folders are not packages: pytest imports each module by its file name, and a
    # second module of the same name stops the whole run at collection
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_run_blocks_run_in_threads_not_in_a_new_snakemake():
    """A `run:` rule's job is, by default, a whole new Snakemake process (parse and DAG again:
    ~1 s of CPU per job here, ~10 s where `scontrol` is slow); the workflow profile makes
    Snakemake run it in a thread. A rule that does real work belongs in `shell:` instead."""
    import yaml

    run_rules = [
        path.name
        for path in sorted((REPO / "rules").glob("*.smk"))
        if re.search(r"^    run:\s*$", path.read_text(), flags=re.M)
    ]
    assert run_rules == ["config.smk"]  # stage_config: a few lines of I/O
    profile = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert profile.get("force-use-threads") is True
