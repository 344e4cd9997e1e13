"""instruction_following: IFEval / IFBench / NeMo Gym instruction checks.

Row format (NeMo Gym `instruction_following` and `ifbench` rows, IFEval/IFBench rows):
`instruction_id_list` (e.g. ["keywords:existence", "count:lowercase_counting"]), `kwargs` (a
list of dicts, one per instruction, unused keys as null; may be omitted when no instruction
takes arguments), the prompt (`responses_create_params.input`, `messages` or `prompt`), and
optionally `grading_mode`: `binary` (1 only if every instruction is followed) or `fraction`
(share followed); its default is `options.grading_mode` (binary; NeMo Gym's ifbench: fraction).
These fields may also sit under `verifier_metadata` (NeMo Gym's newer layout), which wins over
the top level as in NeMo Gym.

Each id is scored by the registry that knows it (checks.py):
if-verifiable's IFEval or IFBench checks, or NeMo Gym's `verifiable_instructions` ids
(verifiable_instructions.py). An id no registry knows fails the row at
materialize with the known ids. Null kwargs are dropped before a checker is built. A checker
that raises counts as not followed for rows with NeMo Gym ids and under
`options.check_errors: not_followed` (NeMo Gym's rule; extras.check_errors says which and why),
else the rollout is a `verifier_error`.

Some checks read NLTK data (`punkt_tab`, `stopwords`, a POS tagger). Nothing is downloaded at
run time: a row whose checks need data that is not installed fails at materialize naming the
resource and the command that installs it; with `options.nltk_missing: unavailable` the run goes
on and those checks are left out of the reward (extras.unavailable lists them).
"""

from __future__ import annotations

from typing import Any, Literal

from rewardprof.core.kinds import FailureKind
from rewardprof.environments.base import (
    Environment,
    RowError,
    Verdict,
    VerifyContext,
    extract_messages,
)
from rewardprof.environments.extract import last_user_text
from rewardprof.environments.instruction_following import checks
from rewardprof.environments.options import VerifyTimeout

GRADING_MODES = ("binary", "fraction")
# NeMo Gym's newer rows keep these under verifier_metadata (which wins over the top level)
_FIELDS = ("instruction_id_list", "kwargs", "grading_mode", "prompt")


def row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The verifier's fields of a row in either layout (flat or under `verifier_metadata`)."""
    meta = row.get("verifier_metadata")
    meta = meta if isinstance(meta, dict) else {}
    return {f: meta[f] if f in meta else row.get(f) for f in _FIELDS}


def _kwargs(fields: dict[str, Any]) -> list[dict[str, Any]]:
    ids, kwargs = fields["instruction_id_list"], fields["kwargs"]
    if kwargs is None:
        return [{} for _ in ids]
    if not (isinstance(kwargs, list) and len(kwargs) == len(ids)):
        raise RowError("kwargs: expected a list with one dict per instruction_id_list entry")
    if not all(k is None or isinstance(k, dict) for k in kwargs):
        raise RowError("kwargs: every entry must be a dict (or null)")
    return [dict(k or {}) for k in kwargs]


def _prompt_text(row: dict[str, Any], fields: dict[str, Any]) -> str:
    if isinstance(fields["prompt"], str):
        return fields["prompt"]
    return last_user_text(extract_messages(row))


class InstructionFollowingOptions(VerifyTimeout):
    loose: bool = False
    """IFEval's loose variant: also accept the response with its first / last line or markdown
    asterisks removed."""
    grading_mode: Literal["binary", "fraction"] = "binary"
    """How a row without `grading_mode` is scored: binary (every instruction followed) or
    fraction (the share followed; NeMo Gym's ifbench default)."""
    registry: Literal["auto", "verifiable_instructions"] = "auto"
    """Which checks score IFEval's 25 ids that NeMo Gym's registry shares (the same checks; NeMo
    Gym runs them on an empty response too and never draws a missing kwarg at random here):
    auto (verifiable_instructions in rows with an id only that registry has, i.e. NeMo Gym's
    rows; if-verifiable's IFEval otherwise) or verifiable_instructions (always). Other ids go to
    the one registry that knows them."""
    check_errors: Literal["auto", "not_followed", "verifier_error"] = "auto"
    """A checker that raises (bad kwargs, an empty response): not_followed (NeMo Gym's rule,
    listed in extras.check_errors) or a verifier_error rollout; auto: not_followed in rows with
    an id only NeMo Gym's verifiable_instructions has (NeMo Gym's rows), else verifier_error."""
    nltk_missing: Literal["fail", "unavailable"] = "fail"
    """NLTK data a row's checks need but that is not installed: fail at materialize (naming it
    and the install command) or run anyway, leaving those checks out of the reward
    (extras.unavailable)."""


class InstructionFollowingEnvironment(Environment[InstructionFollowingOptions]):
    name = "instruction_following"
    required_fields = ()
    # if-verifiable brings nltk and langdetect; each is imported by name, so each is checked
    requires = ("if_verifiable", "nltk", "langdetect")

    def warm(self) -> None:
        """Import if-verifiable now, e.g. before a fork-based pool starts (~3 s per worker)."""
        checks.registries()

    def _check_known(self, ids: list[str]) -> None:
        unknown = [i for i in ids if checks.registry_of(i, self.options.registry) is None]
        if unknown:
            raise RowError(
                f"instruction ids unknown to every registry (if-verifiable IFEval/IFBench, "
                f"NeMo Gym verifiable_instructions): {unknown}; known: {checks.known_ids()}"
            )

    def nltk_missing(self, row: dict[str, Any]) -> dict[str, list[str]]:
        """{NLTK resource: [the row's instruction ids that need it]}, for data not installed."""
        return checks.missing_nltk(list(row_fields(row)["instruction_id_list"] or []))

    def check_row(self, row: dict[str, Any]) -> None:
        fields = row_fields(row)
        ids = fields["instruction_id_list"]
        if ids is None:
            raise RowError(
                "missing field(s) needed by environment 'instruction_following': "
                "['instruction_id_list'] (top level or under verifier_metadata)"
            )
        if not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
            raise RowError("instruction_id_list: expected a non-empty list of strings")
        self._check_known(ids)
        _kwargs(fields)
        mode = fields["grading_mode"] or self.options.grading_mode
        if mode not in GRADING_MODES:
            raise RowError(f"grading_mode: expected one of {GRADING_MODES}, got {mode!r}")
        extract_messages(row)
        missing = self.nltk_missing(row) if self.options.nltk_missing == "fail" else {}
        if missing:
            resource, needing = next(iter(missing.items()))
            raise RowError(
                f"instruction {needing[0]} needs NLTK data {resource!r}, which is not installed: "
                f"install it with {checks.install_hint(resource)}, or set "
                f"options.nltk_missing: unavailable to score without it"
            )

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        fields = row_fields(row)
        ids = list(fields["instruction_id_list"])
        missing: dict[str, list[str]] = {}  # instruction id -> the NLTK data it lacks
        for resource, needing in self.nltk_missing(row).items():
            for iid in needing:
                missing.setdefault(iid, []).append(resource)
        timeout = self.options.timeout_s or ctx.timeout_s
        try:
            results = await ctx.run_in_pool(
                checks.check_instructions,
                completion,
                ids,
                _kwargs(fields),
                _prompt_text(row, fields),
                self.options.registry,
                self.options.loose,
                missing,
                timeout_s=timeout,
            )
        except TimeoutError:
            return Verdict.failure(
                FailureKind.VERIFIER_TIMEOUT, f"instruction checks exceeded {timeout:g}s"
            )
        except Exception as exc:  # a crashing check is recorded, never a silent 0
            return Verdict.failure(FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300])
        return self._score(results, fields["grading_mode"] or self.options.grading_mode)

    def _score(self, results: list[dict[str, Any]], mode: str) -> Verdict:
        nltk = [(i, r) for i, r in enumerate(results) if "nltk_missing" in r]
        if nltk and self.options.nltk_missing == "fail":
            i, r = nltk[0]
            return Verdict.failure(
                FailureKind.VERIFIER_ERROR,
                f"instruction {i} ({r['id']}) needs NLTK resource {r['nltk_missing'][0]!r}, "
                f"which is not installed",
            )
        errors = [
            {"index": i, "id": r["id"], "error": r["error"]}
            for i, r in enumerate(results)
            if "error" in r
        ]
        policy = self.options.check_errors
        if policy == "auto":  # a row with a NeMo Gym-only id is NeMo Gym's: its rule applies
            nemo_row = any(r["registry"] == checks.VERIFIABLE for r in results)
            policy = "not_followed" if nemo_row else "verifier_error"
        if errors and policy == "verifier_error":
            e = errors[0]
            return Verdict.failure(
                FailureKind.VERIFIER_ERROR, f"instruction {e['index']} ({e['id']}): {e['error']}"
            )
        key = "loose" if self.options.loose else "strict"
        scored = [r for r in results if "nltk_missing" not in r]
        extras: dict[str, Any] = {"grading_mode": mode, "check": key}
        extras["followed"] = [None if "nltk_missing" in r else bool(r[key]) for r in results]
        extras["registries"] = sorted({r["registry"] for r in results})
        if errors:
            extras["check_errors"] = errors
        if nltk:
            extras["unavailable"] = [
                {"index": i, "id": r["id"], "nltk": r["nltk_missing"]} for i, r in nltk
            ]
        if not scored:
            return Verdict.failure(
                FailureKind.VERIFIER_ERROR,
                "no instruction check could run: all need NLTK data that is not installed",
                **extras,
            )
        followed = [bool(r[key]) for r in scored]
        fraction = sum(followed) / len(followed)
        extras["fraction"] = fraction
        reward = fraction if mode == "fraction" else float(all(followed))
        return Verdict(reward, extras=extras)
