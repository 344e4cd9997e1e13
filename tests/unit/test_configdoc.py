from helpers import REPO

from rewardprof.core.config import (
    Adaptive,
    Config,
    Engine,
    Entry,
    Export,
    Fleet,
    Profile,
    Rollout,
    Sampling,
)
from rewardprof.environments import BUILTIN, get_environment_class
from rewardprof.manifest.configdoc import SECTIONS, environment_sections, render_markdown


def test_config_reference_is_current_and_complete():
    doc = (REPO / "docs" / "config.md").read_text()
    assert doc == render_markdown(), "run: rewardprof schema --markdown > docs/config.md"
    options = [model for _, model, _ in environment_sections()]
    for model in (
        Config,
        Entry,
        Sampling,
        Engine,
        Rollout,
        Profile,
        Export,
        Adaptive,
        Fleet,
        *options,
    ):
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in doc
            assert field.description, f"{model.__name__}.{name} has no description"


def test_every_environments_options_are_in_the_reference():
    doc = (REPO / "docs" / "config.md").read_text()
    for name in BUILTIN:
        assert f"## entries[].options ({name})" in doc
        assert get_environment_class(name).Options in [m for _, m, _ in environment_sections()]
    assert "## entries[].options.judge (math)" in doc  # a nested option model has its section


def test_every_section_of_the_config_has_its_table():
    """A section model added to Config (as `adaptive` once was, unlisted) gets its table."""
    listed = {model for _, model, _ in SECTIONS}
    for name, field in Config.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and model.__name__ != "Entry" and hasattr(model, "model_fields"):
            assert model in listed, (
                f"Config.{name}: {model.__name__} has no section in docs/config.md"
            )
