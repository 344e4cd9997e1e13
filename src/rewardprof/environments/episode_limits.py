"""The bounds of one episode (an environment that acts), from its entry's options."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EpisodeLimits"]


@dataclass(frozen=True)
class EpisodeLimits:
    """Bounds of one episode: turns, completion tokens over all turns, the characters of one
    tool output as the next prompt carries it, and of the whole trajectory as journaled."""

    max_steps: int = 8
    max_total_tokens: int = 8192
    max_tool_output_chars: int = 16_384
    max_trajectory_chars: int = 1_000_000
