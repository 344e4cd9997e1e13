"""What a rollout request carries: the task's prompt (its chat messages and the source row its
verifier reads), the seeds of its rollouts (seeds.task_seed), and the request body with the
run's sampling parameters, sent to the engine the shard's job opened."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rewardprof.core.config import Config
from rewardprof.engine.session import Endpoint
from rewardprof.stages.rollout.shard_tasks import TaskText
from rewardprof.store.seeds import task_seed, wants_token_ids


@dataclass(frozen=True)
class Prompt:
    """A task's prompt: `messages` to send, `row` for the verifier, and `seed0`, the seed of
    its rollout 0 (rollout r samples with seed0 + r)."""

    messages: list[dict[str, Any]]
    row: dict[str, Any]
    seed0: int

    def seed(self, rollout_index: int) -> int:
        return self.seed0 + rollout_index


class RequestBuilder:
    """The requests of a shard's tasks to `endpoint`: `text` holds the tasks' text (read
    before their units are queued), `task_ids` name the tasks by position (their seeds)."""

    def __init__(self, cfg: Config, endpoint: Endpoint, text: TaskText, task_ids: list[str]):
        self._cfg, self._endpoint, self._text, self._task_ids = cfg, endpoint, text, task_ids
        self._token_ids = wants_token_ids(cfg)

    def prompt(self, pos: int) -> Prompt:
        """The prompt of the task at `pos` (its text already read)."""
        messages, row = self._text[pos]
        seed0 = task_seed(self._cfg.sampling.seed, self._task_ids[pos])
        return Prompt(json.loads(messages), json.loads(row), seed0)

    def body(self, messages: list[dict[str, Any]], n: int, seed: int) -> dict[str, Any]:
        """A chat-completions request for `n` samples, the first with `seed`."""
        s = self._cfg.sampling
        body = {
            "model": self._endpoint.model,
            "messages": messages,
            "n": n,
            "seed": seed,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
        }
        if self._token_ids:
            body["return_token_ids"] = True  # exact per-sample counts, whatever n is
        body.update(self._cfg.engine.extra_body)
        return body
