from helpers import REPO

from rewardprof.core.config import Config, Engine, Entry, Profile, Rollout, Sampling
from rewardprof.environments import BUILTIN, get_environment_class
from rewardprof.manifest.configdoc import environment_sections, render_markdown


def test_config_reference_is_current_and_complete():
    doc = (REPO / "docs" / "config.md").read_text()
    assert doc == render_markdown(), "run: rewardprof schema --markdown > docs/config.md"
    options = [model for _, model, _ in environment_sections()]
    for model in (Config, Entry, Sampling, Engine, Rollout, Profile, *options):
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in doc
            assert field.description, f"{model.__name__}.{name} has no description"


def test_every_environments_options_are_in_the_reference():
    doc = (REPO / "docs" / "config.md").read_text()
    for name in BUILTIN:
        assert f"## entries[].options ({name})" in doc
        assert get_environment_class(name).Options in [m for _, m, _ in environment_sections()]
    assert "## entries[].options.judge (math)" in doc  # a nested option model has its section
