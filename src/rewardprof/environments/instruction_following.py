"""instruction_following: IFEval / IFBench instruction checks from the `if-verifiable` library.

Row format (NeMo Gym `instruction_following` rows, IFEval/IFBench rows): `instruction_id_list`
(e.g. ["keywords:existence", "punctuation:no_comma"]), `kwargs` (a list of dicts, one per
instruction, unused keys as null; may be omitted when no instruction takes arguments), the prompt
(`responses_create_params.input`, `messages` or `prompt`), and optionally `grading_mode`:
`binary` (default: 1 only if every instruction is followed) or `fraction` (share followed).

Checks are the library's own (IFEval ids from `if_verifiable.ifeval`, IFBench ids from
`if_verifiable.ifbench`), strict by default (`options.loose: true` for the loose variant). An
instruction id the library does not know fails the row at materialize (the library would skip
it silently and inflate the score). Some checks need NLTK data (`punkt_tab` for sentence counts,
`stopwords`, a POS tagger for a few IFBench ids); nothing is downloaded at run time: a missing
resource is a `verifier_error` naming it.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from rewardprof.core.schemas import FailureKind
from rewardprof.environments.base import (
    Environment,
    RowError,
    Verdict,
    VerifyContext,
    extract_messages,
)
from rewardprof.environments.extract import last_user_text
from rewardprof.environments.options import VerifyTimeout

GRADING_MODES = ("binary", "fraction")


# langdetect (IFEval's english_lowercase, english_capital, response_language) samples n-grams
# at random: unseeded, one text scores differently from call to call ('hello, world' passed
# english_lowercase in ~90 of 100 calls). With a seed every detect() reseeds its own RNG, so a
# text gets one verdict in every process and every run. Its language profiles load lazily and
# not thread-safely (a detect() racing the first load sees a partial profile set), so they are
# loaded here, once, under a lock, before any check runs.
LANGDETECT_SEED = 0
_LOAD_LOCK = threading.Lock()


def _seed_langdetect() -> None:
    from langdetect import DetectorFactory, detector_factory  # lazy: only where checks run

    DetectorFactory.seed = LANGDETECT_SEED
    detector_factory.init_factory()


def _registries() -> tuple[dict[str, Any], dict[str, Any]]:
    """Both instruction registries, with langdetect seeded and loaded. Called before any check
    runs, in each process that scores (pool workers, forked or spawned; inline library use)."""
    with _LOAD_LOCK:
        return _load_registries()


@cache
def _load_registries() -> tuple[dict[str, Any], dict[str, Any]]:
    _seed_langdetect()
    import nltk  # lazy: ~1 s, only where checks run

    # if_verifiable.ifbench calls nltk.download() at import; rewardprof never fetches at run time
    # (a check that needs absent data raises LookupError, reported as a verifier_error).
    download = nltk.download
    nltk.download = lambda *args, **kwargs: False
    try:
        from if_verifiable.ifbench.instructions_registry import (  # lazy: ~3 s to import
            INSTRUCTION_DICT as ifbench,
        )
        from if_verifiable.ifeval.instructions_registry import (  # lazy: ~3 s to import
            INSTRUCTION_DICT as ifeval,
        )
    finally:
        nltk.download = download
    return dict(ifeval), dict(ifbench)


def known_instruction(instruction_id: str) -> bool:
    ifeval, ifbench = _registries()
    return instruction_id in ifeval or instruction_id in ifbench


def check_instructions(
    response: str, ids: list[str], kwargs: list[dict[str, Any]], prompt: str
) -> list[dict[str, Any]]:
    """Runs in a worker process: per instruction {id, strict, loose} via if-verifiable."""
    from if_verifiable.common import evaluate_instructions  # lazy: ~3 s, in workers only

    ifeval, ifbench = _registries()
    out = []
    for i, (iid, kw) in enumerate(zip(ids, kwargs, strict=True)):
        registry = ifeval if iid in ifeval else ifbench
        try:
            results, _ = evaluate_instructions(response, [iid], [kw], prompt, registry)
        except LookupError as exc:  # NLTK data missing: say which resource
            missing = str(exc).split("Resource")[-1].split("not found")[0].strip(" '\n*")
            raise RuntimeError(
                f"instruction {i} ({iid}) needs NLTK resource {missing!r}, which is not installed"
            ) from None
        if results:
            out.append(
                {"id": iid, "strict": results[0].strict_pass, "loose": results[0].loose_pass}
            )
        else:  # the library scores an empty (or only-thinking) response as nothing followed
            out.append({"id": iid, "strict": False, "loose": False})
    return out


def _kwargs(row: dict[str, Any]) -> list[dict[str, Any]]:
    ids = row["instruction_id_list"]
    kwargs = row.get("kwargs")
    if kwargs is None:
        return [{} for _ in ids]
    if not (isinstance(kwargs, list) and len(kwargs) == len(ids)):
        raise RowError("kwargs: expected a list with one dict per instruction_id_list entry")
    return [dict(k or {}) for k in kwargs]


def _prompt_text(row: dict[str, Any]) -> str:
    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    return last_user_text(extract_messages(row))


class InstructionFollowingOptions(VerifyTimeout):
    loose: bool = False
    """IFEval's loose variant: also accept the response with its first / last line or markdown
    asterisks removed."""


class InstructionFollowingEnvironment(Environment[InstructionFollowingOptions]):
    name = "instruction_following"
    required_fields = ("instruction_id_list",)

    def warm(self) -> None:
        """Import if-verifiable now, e.g. before a fork-based pool starts (~3 s per worker)."""
        _registries()

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        ids = row["instruction_id_list"]
        if not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
            raise RowError("instruction_id_list: expected a non-empty list of strings")
        unknown = [i for i in ids if not known_instruction(i)]
        if unknown:
            raise RowError(f"instruction ids unknown to if-verifiable: {unknown}")
        _kwargs(row)
        mode = row.get("grading_mode", "binary")
        if mode not in GRADING_MODES:
            raise RowError(f"grading_mode: expected one of {GRADING_MODES}, got {mode!r}")
        extract_messages(row)

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        ids = list(row["instruction_id_list"])
        timeout = self.options.timeout_s or ctx.timeout_s
        try:
            results = await ctx.run_in_pool(
                check_instructions,
                completion,
                ids,
                _kwargs(row),
                _prompt_text(row),
                timeout_s=timeout,
            )
        except TimeoutError:
            return Verdict.failure(
                FailureKind.VERIFIER_TIMEOUT, f"instruction checks exceeded {timeout:g}s"
            )
        except Exception as exc:  # a crashing check is recorded, never a silent 0
            return Verdict.failure(FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300])
        key = "loose" if self.options.loose else "strict"
        followed = [bool(r[key]) for r in results]
        fraction = sum(followed) / len(followed)
        mode = row.get("grading_mode", "binary")
        reward = fraction if mode == "fraction" else float(all(followed))
        return Verdict(
            reward,
            extras={"followed": followed, "fraction": fraction, "grading_mode": mode, "check": key},
        )
