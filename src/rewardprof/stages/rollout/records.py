"""A shard's rollout records: assembled from a request and what came back (a sample and its
verdict, an episode, or a failure with its kind), then journaled before anything else happens
to them (the job's counts, the work's plan)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from rewardprof.core.kinds import OK
from rewardprof.engine.reply import Choice
from rewardprof.engine.session import Endpoint
from rewardprof.environments import Verdict
from rewardprof.store.journal import JournalWriter
from rewardprof.store.record import journal_record


class RecordAssembly:
    """The records of a shard's rollouts: the task (by position in `tasks`), the generation
    (`gen_key`), the writer (`writer_id`) and what answered (`endpoint`), then per rollout its
    sample and verdict, its episode, or its failure."""

    def __init__(self, endpoint: Endpoint, gen_key: str, writer_id: str, tasks: pd.DataFrame):
        self._endpoint, self._gen_key, self._writer_id = endpoint, gen_key, writer_id
        # plain lists for the hot path (DataFrame.iloc costs ~100 us per call)
        self._task_index = tasks["task_index"].tolist()
        self._task_id = tasks["task_id"].tolist()
        self._label = tasks["label"].tolist()

    def request(
        self,
        pos: int,
        attempt: int,
        request_n: int,
        started_at: float,
        latency_s: float,
        **usage: Any,
    ) -> dict[str, Any]:
        """The fields a request's rollouts share (`usage`: a completion's prompt_tokens)."""
        return {
            "task_index": int(self._task_index[pos]),
            "task_id": self._task_id[pos],
            "label": self._label[pos],
            "attempt": attempt,
            "request_n": request_n,
            "gen_key": self._gen_key,
            "model": self._endpoint.model,
            "engine": self._endpoint.identity,
            "started_at": started_at,
            "latency_s": latency_s,
            **usage,
            "writer": self._writer_id,
        }

    @staticmethod
    def rollout(request: dict[str, Any], r: int, seed: int) -> dict[str, Any]:
        """Rollout `r` of a request, sampled with `seed`: what its record starts with."""
        return dict(request, rollout_index=r, seed=seed)

    @staticmethod
    def sampled(
        rollout: dict[str, Any], choice: Choice, verdict: Verdict, verify_s: float
    ) -> dict[str, Any]:
        """The record of a rollout the engine sampled and the verifier judged."""
        return {
            **rollout,
            "status": verdict.status,
            "reward": verdict.reward,
            "error": verdict.detail,
            "finish_reason": choice.finish_reason,
            "completion": choice.text,
            "completion_tokens": choice.completion_tokens,
            "completion_tokens_source": choice.tokens_source,
            "extras": json.dumps(verdict.extras, ensure_ascii=False, default=str),
            "verify_s": verify_s,
            "finished_at": time.time(),
        }

    @staticmethod
    def failed(rollout: dict[str, Any], kind: str, detail: str | None) -> dict[str, Any]:
        """The record of a rollout without a sample: a failure of `kind`."""
        return dict(rollout, status=kind, error=detail, finished_at=time.time())

    @staticmethod
    def episode(rollout: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """The record of a rollout that is an episode (episodes.episode_fields)."""
        return {**rollout, **fields}


class Returned(Protocol):
    """What hears of each journaled rollout: the shard's work (work.py), which may plan more."""

    def returned(self, pos: int, rollout_index: int, status: str, reward: float | None) -> None: ...


@dataclass
class UnitTally:
    """A request unit's figures for the progress line: failures by kind, completion tokens."""

    failures: Counter[str] = field(default_factory=Counter)
    tokens: int = 0


class Journaling:
    """A finished rollout's way: the journal first, then the job's counts (`counts` by status,
    `failed_here`: (task_index, rollout_index) of this job's failures) and the work."""

    def __init__(
        self,
        writer: JournalWriter,
        work: Returned,
        counts: Counter[str],
        failed_here: set[tuple[int, int]],
    ):
        self._writer, self._work = writer, work
        self._counts, self._failed_here = counts, failed_here

    def keep(self, rec: dict[str, Any], pos: int, tally: UnitTally) -> None:
        """One finished rollout of the task at `pos`: to the journal, then counted and returned."""
        tally.tokens += rec.get("completion_tokens") or 0
        rec = journal_record(rec)  # secrets masked; a field that does not fit: a failure
        if rec["status"] != OK:
            tally.failures[rec["status"]] += 1
            self._failed_here.add((rec["task_index"], rec["rollout_index"]))
        self._counts[rec["status"]] += 1
        self._writer.append(rec)  # journaled before the plan hears of it
        self._work.returned(pos, rec["rollout_index"], rec["status"], rec.get("reward"))
