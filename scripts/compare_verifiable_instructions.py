"""Differential check of rewardprof's `verifiable_instructions` registry against the original.

The original (the `verifiable-instructions` project NeMo Gym's instruction_following uses) is not
on PyPI, so no test can import it; run this by hand with a checkout of it:

    git clone <verifiable-instructions repository> /tmp/vi
    python scripts/compare_verifiable_instructions.py /tmp/vi [--rollouts FILE ...]

Every id is scored by both on generated texts (and the responses of any NeMo Gym rollout files
given) under many kwargs combinations, the original run as NeMo Gym runs it (null kwargs
dropped, a raising checker counted as not followed). Cases where the original would draw a
missing kwarg at random are counted as skipped. Prints the counts and the first disagreements;
exits 1 if there is any. Needs NLTK's punkt_tab (`rewardprof install-nltk-data`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import types
from pathlib import Path

from rewardprof.environments.instruction_following import verifiable_instructions as vi
from rewardprof.environments.instruction_following.checks import registries

WORDS = "the cat sat on a mat Sure done Hello world racecar level x y Apple [a] [b] <<t>> <<u>>"
SEPARATORS = [". ", "\n\n", "\n***\n", "! ", "? ", "-", ", ", "******"]
FIXED = ["", " ", "hi", '"quoted"', '{"a": 1}', "```json\n{}\n```", "P.S. thanks", "HELLO WORLD",
         "Section 1 a Section 2 b", "I am here.***Go on now.***We are here.", "hi******HI",
         "hello world", "a-b-c", "Sure here it is"]  # fmt: skip
KWARGS = {
    "keywords": [["cat"], ["the", "mat"]], "keyword": ["cat", "the", "x"], "frequency": [1, 2, 3],
    "relation": ["less than", "at least", "bogus"], "forbidden_words": [["cat"], ["zebra"]],
    "letter": ["a", "e", "z"], "let_frequency": [1, 5], "let_relation": ["less than", "at least"],
    "language": ["en", "de", "xx"], "num_sentences": [1, 3], "num_paragraphs": [1, 2, 3],
    "num_words": [5, 50], "nth_paragraph": [1, 2], "first_word": ["sure", "the", "hello"],
    "num_placeholders": [1, 2], "postscript_marker": ["P.S.", "P.P.S", "Note"],
    "num_bullets": [0, 1, 2], "num_highlights": [1], "section_spliter": ["Section", "SECTION"],
    "num_sections": [1, 2], "prompt_to_repeat": ["hi", "Hello world"], "end_phrase": ["here"],
    "capital_frequency": [1, 3], "capital_relation": ["less than", "at least"],
    "phrase": ["the cat sat on", "hello big world"], "small_n": [1, 2], "n_start": [1, 2],
    "n_end": [3, 5], "instruction": ["do this"], "last_word": ["here", "world", "mat"],
    "N": [1, 2, 3, 10, 40], "n_sent": [1, 2], "n_words": [2, 4], "keyword1": ["cat", "x"],
    "keyword2": ["the", "y"], "n": [1, 2], "m": [1, 2],
}  # fmt: skip


def _import_original(checkout: Path) -> dict:
    try:
        import absl.logging  # noqa: F401  # optional: the original logs through absl
    except ImportError:  # a stand-in, so that absl need not be installed for this check
        absl = types.ModuleType("absl")
        absl.logging = types.SimpleNamespace(error=lambda *a, **k: None)
        sys.modules["absl"], sys.modules["absl.logging"] = absl, absl.logging
    package = types.ModuleType("verifiable_instructions")  # skip its __init__ (synthesis deps)
    package.__path__ = [str(checkout / "verifiable_instructions")]
    sys.modules["verifiable_instructions"] = package
    from verifiable_instructions.instructions_registry import (  # noqa: E402  # lazy: the checkout
        INSTRUCTION_DICT,
    )

    return INSTRUCTION_DICT


def _texts(rollouts: list[Path], rng: random.Random) -> list[str]:
    texts = list(FIXED)
    for path in rollouts:
        for line in path.open():
            for item in json.loads(line)["response"]["output"]:
                if item.get("type") == "message":
                    texts.append(item["content"][0]["text"])
    words = WORDS.split()
    for _ in range(300):
        picked = [rng.choice(words) for _ in range(rng.randint(0, 30))]
        texts.append("".join(w + (rng.choice(SEPARATORS) if rng.random() < 0.2 else " ")
                             for w in picked))  # fmt: skip
    return texts


def _original(registry: dict, iid: str, kwargs: dict, text: str) -> bool:
    try:
        checker = registry[iid](iid)
        checker.build_description(**{k: v for k, v in kwargs.items() if v is not None})
        return bool(checker.check_following(text))
    except Exception:  # NeMo Gym: a raising checker is not followed
        return False


def _ours(iid: str, kwargs: dict, text: str) -> bool | None:
    try:
        return vi.evaluate(iid, kwargs, text)
    except vi.ArgumentMissing:
        return None
    except Exception as exc:
        if type(exc) is LookupError:  # NLTK data missing: not a verdict
            raise
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of verifiable-instructions")
    parser.add_argument("--rollouts", type=Path, nargs="*", default=[])
    parser.add_argument("--combos", type=int, default=25, help="kwargs combinations per id")
    args = parser.parse_args(argv)
    original = _import_original(args.checkout)
    registries()  # seeds langdetect, as the environment does
    if set(original) != set(vi.SPECS):
        print(f"ids differ: {sorted(set(original) ^ set(vi.SPECS))}")
        return 1
    rng = random.Random(0)
    texts = _texts(args.rollouts, rng)
    compared = skipped = 0
    differ: list[tuple] = []
    for iid, spec in vi.SPECS.items():
        values = (KWARGS.get(p, [None]) for p in spec.params)
        combos = [dict(zip(spec.params, v, strict=True)) for v in itertools.product(*values)]
        rng.shuffle(combos)
        for kwargs in [*combos[: args.combos], {}]:
            for text in texts:
                ours = _ours(iid, kwargs, text)
                if ours is None:
                    skipped += 1
                    continue
                compared += 1
                if ours != _original(original, iid, kwargs, text):
                    differ.append((iid, kwargs, text[:80], ours))
    print(f"{compared} compared, {len(differ)} differ, {skipped} skipped (random draw)")
    for case in differ[:20]:
        print("differs:", case)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
