"""vLLM's tool calling, as serve mode starts it (environments that act, docs/environments.md).

vLLM answers a request that offers `tools` with `tool_calls` only when started with
--enable-auto-tool-choice and the model's --tool-call-parser; a builtin model, whose own chat
template knows no tools, is served with rewardprof's ChatML template that lists them the
Hermes way (engine/templates/chatml_tools.jinja), which the `hermes` parser reads back.
"""

from __future__ import annotations

from pathlib import Path

from rewardprof.core.config import Config
from rewardprof.engine.model import builtin_name

# ChatML that lists tools (engine/templates/): served with a builtin model when tools are on
TOOLS_TEMPLATE = Path(__file__).parent / "templates" / "chatml_tools.jinja"


def tool_args(cfg: Config) -> list[str]:
    """vLLM's tool-calling flags for engine.tool_call_parser (none without it)."""
    parser = cfg.engine.tool_call_parser
    if parser is None:
        return []
    args = ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if builtin_name(cfg.engine.model) is not None:
        args += ["--chat-template", str(TOOLS_TEMPLATE)]
    return args
