"""A rollout record made safe to journal: no secret in it, every field of its column's type,
every text cleaned and bounded.

The engine's reply was validated before (rewardprof.engine.reply), and verification adds text
of its own (an error quoting a program's exception, extras). Every string field is cleaned
here, in one place, before anything is journaled: secrets masked (rewardprof.core.redaction),
lone surrogates (which UTF-8 cannot hold) and NULs replaced by U+FFFD, and its length capped
(TEXT_LIMITS), so a program's fault stays its reward 0 and never becomes an unwritable record,
and no record is larger than a journal segment can read back. What can still be wrong is a
value of the wrong type (a reward that is no number): such a record becomes a
`verifier_error` naming the field (the journal refuses it:
rewardprof.store.schemas.record_problem).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rewardprof.core.kinds import FailureKind
from rewardprof.core.redaction import redact
from rewardprof.store.schemas import record_problem

# Characters kept of each text field; the rest is cut with a note saying how much. A completion
# is bounded before (max_tokens x rollout.max_chars_per_token); this is the journal's own bound,
# so that a segment of segment_max_records records stays far below Arrow's 2 GiB per column.
COMPLETION_CHARS = 4 << 20
EXTRAS_CHARS = 1 << 20
ERROR_CHARS = 4 << 10
OTHER_CHARS = 1 << 10  # ids, labels, model names, finish reasons
TEXT_LIMITS = {"completion": COMPLETION_CHARS, "extras": EXTRAS_CHARS, "error": ERROR_CHARS}

_UNWRITABLE = re.compile("[\ud800-\udfff\x00]")


def clean_text(text: str, limit: int) -> str:
    """`text` as a record holds it: lone surrogates and NULs replaced by U+FFFD, at most
    `limit` characters (a longer text is cut and says so)."""
    if len(text) > limit:
        note = f" [cut: {len(text) - limit} more characters]"
        text = text[: max(0, limit - len(note))] + note
    return _UNWRITABLE.sub("\ufffd", text)


def _clean_extras(text: str) -> str:
    """Extras are JSON text: cut, they would no longer parse, so a too-long one is replaced by
    a JSON object saying so."""
    if len(text) <= EXTRAS_CHARS:
        return clean_text(text, EXTRAS_CHARS)
    return json.dumps({"cut": f"verifier extras of {len(text)} characters were not kept"})


def _clean(name: str, value: str) -> str:
    value = redact(value)
    if name == "extras":
        return _clean_extras(value)
    return clean_text(value, TEXT_LIMITS.get(name, OTHER_CHARS))


def journal_record(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with every string cleaned (`_clean`), or as a verifier_error when a field does
    not fit its column."""
    record = {k: _clean(k, v) if isinstance(v, str) else v for k, v in record.items()}
    problem = record_problem(record)
    if problem is None:
        return record
    return dict(
        record,
        status=FailureKind.VERIFIER_ERROR,
        reward=None,
        extras=None,
        error=clean_text(f"the verdict does not fit the record: {problem}", ERROR_CHARS),
    )
