from helpers import REPO

from rewardprof.core.config import Config, Engine, Entry, Profile, Rollout, Sampling
from rewardprof.core.configdoc import render_markdown


def test_config_reference_is_current_and_complete():
    doc = (REPO / "docs" / "config.md").read_text()
    assert doc == render_markdown(), "run: rewardprof schema --markdown > docs/config.md"
    for model in (Config, Entry, Sampling, Engine, Rollout, Profile):
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in doc
            assert field.description, f"{model.__name__}.{name} has no description"
