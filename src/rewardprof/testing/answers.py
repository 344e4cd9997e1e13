"""How the fake OpenAI server (testing/fake_server.py) answers: by prompt substring
(`scripted`), and wrong for about half the seeds (`by_seed`)."""

from __future__ import annotations

import zlib
from collections.abc import Callable

AnswerFn = Callable[[str, int | None], str]


def default_answer(prompt: str, seed: int | None) -> str:
    return "I am not sure."


def scripted(answers: dict[str, str], default: str = "I am not sure.") -> AnswerFn:
    """Answer by prompt substring: the first key found in the prompt picks the answer."""

    def answer(prompt: str, seed: int | None) -> str:
        for key, text in answers.items():
            if key in prompt:
                return text
        return default

    return answer


def by_seed(answer: AnswerFn, wrong: str = "I am not sure.") -> AnswerFn:
    """`answer`, or `wrong` for about half the seeds (fixed per (prompt, seed), the same in
    every process): rewards that differ between rollouts, so a rollout answered with another
    seed, or twice, shows."""

    def pick(prompt: str, seed: int | None) -> str:
        if seed is not None and zlib.crc32(f"{prompt}|{seed}".encode()) % 2:
            return wrong
        return answer(prompt, seed)

    return pick
