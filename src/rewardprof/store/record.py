"""A rollout record made safe to journal: no secret in it, every field of its column's type.

The engine's reply was validated before (rewardprof.engine.reply), so what can still be wrong
here comes from verification: a reward that is no number, an error or extras text that UTF-8
cannot hold. Such a record becomes a `verifier_error` naming the field, never a value the
journal could not write (the journal refuses it: rewardprof.store.schemas.record_problem).
"""

from __future__ import annotations

from typing import Any

from rewardprof.core.kinds import FailureKind
from rewardprof.core.redaction import redact
from rewardprof.store.schemas import record_problem


def journal_record(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with every secret masked in its strings, or as a verifier_error when a field
    does not fit its column."""
    record = {k: redact(v) if isinstance(v, str) else v for k, v in record.items()}
    problem = record_problem(record)
    if problem is None:
        return record
    return dict(
        record,
        status=FailureKind.VERIFIER_ERROR,
        reward=None,
        extras=None,
        error=f"the verdict does not fit the record: {problem}",
    )
