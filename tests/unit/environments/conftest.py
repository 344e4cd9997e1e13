"""Fixtures for the L0 verifier tests: a context whose "pool" runs each call in process.

The verifiers are tested here for what they decide (reward, failure kind, extras), in the test's
own process: the pool's work is run inline, on the event loop's thread (math-verify's timeout
uses signal.alarm, which only the main thread may set). The real process pool (forked workers,
hard timeouts, a wedged call killed) is tested in tests/functional/environments and tests/faults."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from rewardprof.environments import VerifyContext


class InlinePool:
    """pebble.ProcessPool's `schedule`, run at once in this process: a finished Future."""

    def schedule(self, fn, args=(), kwargs=None, timeout=None) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **(kwargs or {})))
        except Exception as exc:  # the worker's exception, as the pool would hand it back
            future.set_exception(exc)
        return future


@pytest.fixture
def ctx():
    return VerifyContext(pool=InlinePool(), timeout_s=20)
