"""The rules a manifest's fields are held to, the variables a plugin may not ask for, and the
warning about a plugin that shadows another."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.daemon.config_edit import check_env_value
from hermesd.plugins.host import PluginHost
from hermesd.plugins.listing import plugin_dict, plugin_line
from hermesd.plugins.manifest import ManifestError, parse_manifest, refused_env_name
from tests.support.plugin_factory import make_host, write_plugin

MARKER_INIT = """
    from pathlib import Path

    def register(ctx):
        Path(__file__).with_name("registered").touch()
"""


def manifest(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plugin.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def parse(tmp_path: Path, text: str) -> Any:
    return parse_manifest(manifest(tmp_path, text), default_name="folder")


# --- scalar fields ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: [a, b]\n", "'name' must be a string, not a list"),
        ("name: {a: 1}\n", "'name' must be a string, not a mapping"),
        ("name: x\nversion: [1, 2]\n", "'version' must be a string, not a list"),
        ("name: x\ndescription: {text: hi}\n", "'description' must be a string, not a mapping"),
        ("name: x\nauthor: [me, you]\n", "'author' must be a string, not a list"),
        ("name: x\nkind: [standalone]\n", "'kind' must be a string, not a list"),
        ("name: x\nversion: !!binary aGk=\n", "'version' must be a string, not a bytes"),
    ],
)
def test_a_field_that_is_not_a_scalar_is_refused_naming_it(
    tmp_path: Path, text: str, needle: str
) -> None:
    with pytest.raises(ManifestError, match=needle):
        parse(tmp_path, text)


@pytest.mark.parametrize(
    ("field", "limit"), [("version", 64), ("description", 1000), ("author", 200)]
)
def test_fields_are_capped_in_length(tmp_path: Path, field: str, limit: int) -> None:
    assert getattr(parse(tmp_path, f"name: x\n{field}: {'a' * limit}\n"), field) == "a" * limit
    with pytest.raises(ManifestError, match=f"'{field}' is {limit + 1} characters long"):
        parse(tmp_path, f"name: x\n{field}: {'a' * (limit + 1)}\n")


@pytest.mark.parametrize("name", ["my plugin", "../up", "-dash", ".hidden", "café", "a/b", "x;y"])
def test_a_name_outside_the_charset_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ManifestError, match=r"plugin name .* must be 1 to 64 letters"):
        parse(tmp_path, f'name: "{name}"\n')


def test_a_name_longer_than_64_characters_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="'name' is 65 characters long; the limit is 64"):
        parse(tmp_path, f"name: {'a' * 65}\n")


def test_a_raw_escape_character_is_refused_by_the_yaml_reader(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="special characters are not allowed"):
        parse(tmp_path, 'name: "x\x1b[2J"\n')


def test_a_name_of_64_characters_in_the_charset_is_accepted(tmp_path: Path) -> None:
    name = "A1_.-" + "z" * 59
    assert parse(tmp_path, f"name: {name}\n").name == name


def test_numbers_are_still_read_as_strings(tmp_path: Path) -> None:
    got = parse(tmp_path, "name: 2048\nversion: 1.0\ndescription: 42\n")
    assert (got.name, got.version, got.description) == ("2048", "1.0", "42")


def test_control_characters_are_refused_but_a_description_may_have_lines(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="'author' contains control characters"):
        parse(tmp_path, 'name: x\nauthor: "me\\e[31m"\n')
    with pytest.raises(ManifestError, match="'version' contains control characters"):
        parse(tmp_path, 'name: x\nversion: "1\\n2"\n')
    assert parse(tmp_path, 'name: x\ndescription: "one\\ntwo\\tthree"\n').description == (
        "one\ntwo\tthree"
    )


def test_a_missing_name_is_the_folder_name(tmp_path: Path) -> None:
    assert parse(tmp_path, "version: 1\n").name == "folder"


def test_list_items_must_be_scalars(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"'provides_tools\[1\]' must be a string"):
        parse(tmp_path, "name: x\nprovides_tools: [a, {b: 1}]\n")


def test_an_alias_bomb_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="anchors"):
        parse(tmp_path, 'a: &a ["x","x"]\nb: &b [*a,*a]\nname: *b\n')


# --- requires_env -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "LD_ANYTHING",
        "ld_preload",
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONWARNINGS",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "NODE_OPTIONS",
        "BASH_ENV",
        "ENV",
        "PATH",
        "HOME",
        "IFS",
        "GCONV_PATH",
        "OPENSSL_CONF",
        "SSL_CERT_FILE",
        "HTTPS_PROXY",
        "GIT_SSH_COMMAND",
        "HERMES_HOME",
        "HERMES_PLUGIN_PATH",
        "HERMES_SAFE_MODE",
    ],
)
def test_requires_env_may_not_name_loader_interpreter_or_hermes_variables(
    tmp_path: Path, name: str
) -> None:
    assert refused_env_name(name) is not None
    with pytest.raises(ManifestError, match=f"'requires_env': {name} may not be set"):
        parse(tmp_path, f"name: x\nrequires_env: [{name}]\n")
    with pytest.raises(ManifestError, match=f"{name} may not be set"):
        parse(tmp_path, f"name: x\nrequires_env:\n  - name: {name}\n    secret: true\n")


@pytest.mark.parametrize(
    "name", ["WEATHER_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "PATHWAY_KEY", "HOMEASSIST"]
)
def test_ordinary_variables_are_allowed(tmp_path: Path, name: str) -> None:
    assert refused_env_name(name) is None
    assert [r.name for r in parse(tmp_path, f"name: x\nrequires_env: [{name}]\n").requires_env] == [
        name
    ]


@pytest.mark.parametrize("name", ["A=B", "1X", "A B", "A-B", "X" * 129])
def test_requires_env_names_must_be_variable_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ManifestError, match="is not an environment variable name"):
        parse(tmp_path, f'name: x\nrequires_env: ["{name}"]\n')


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "HERMES_HOME", "BASH_ENV"])
def test_set_env_refuses_to_write_a_refused_name_to_dotenv(name: str) -> None:
    problem = check_env_value(name, "/tmp/x")
    assert problem is not None and f"{name} may not be set" in problem


def test_set_env_still_accepts_ordinary_names() -> None:
    assert check_env_value("WEATHER_API_KEY", "k") is None


# --- through the plugin host ------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "plugins").mkdir(parents=True)
    return tmp_path / "home"


@pytest.fixture
def host(home: Path) -> Iterator[Callable[..., PluginHost]]:
    made: list[PluginHost] = []

    def build(env: dict[str, str] | None = None) -> PluginHost:
        made.append(make_host(home, env))
        made[-1].plugins.load_all()
        return made[-1]

    yield build
    for built in made:
        built.plugins.unload_all()


def test_a_plugin_with_a_list_valued_name_is_listed_as_failed_naming_the_field(
    home: Path, host: Callable[..., PluginHost]
) -> None:
    folder = write_plugin(home / "plugins", "listy", MARKER_INIT, manifest="name: [a, b]\n")
    [record] = host().plugins.records()
    assert (record.key, record.state) == ("listy", "error")
    assert record.reason == "Failed to parse plugin.yaml: 'name' must be a string, not a list"
    assert not (folder / "registered").exists()


def test_a_plugin_asking_for_ld_preload_is_not_loaded(
    home: Path, host: Callable[..., PluginHost]
) -> None:
    folder = write_plugin(
        home / "plugins",
        "preload",
        MARKER_INIT,
        manifest="name: preload\nrequires_env: [LD_PRELOAD]\n",
    )
    [record] = host(env={"LD_PRELOAD": ""}).plugins.records()
    assert record.state == "error" and "LD_PRELOAD may not be set" in record.reason
    assert "dynamic loader" in record.reason
    assert not (folder / "registered").exists()


def test_a_user_plugin_shadowing_a_bundled_one_is_warned_about_naming_both(
    tmp_path: Path, home: Path, host: Callable[..., PluginHost], caplog: pytest.LogCaptureFixture
) -> None:
    bundled = write_plugin(tmp_path / "bundled", "calc", manifest={"name": "calc", "version": "1"})
    mine = write_plugin(home / "plugins", "calc", manifest={"name": "calc", "version": "2"})
    with caplog.at_level(logging.WARNING, logger="hermesd.plugins.loader"):
        [record] = host(env={"HERMES_BUNDLED_PLUGINS": str(tmp_path / "bundled")}).plugins.records()
    assert (record.source, record.version, record.state) == ("user", "2", "loaded")
    assert plugin_line(record) == "  ✓ calc v2 — registered nothing; shadows the bundled plugin"
    [warning] = [w.message for w in record.warnings]
    assert warning == (
        f"shadows the plugin of the same key from the bundled source ({bundled}), "
        "which is therefore not loaded"
    )
    assert plugin_dict(record)["shadows"] == [{"source": "bundled", "location": str(bundled)}]
    assert (
        f"Plugin 'calc' from the user source overrides the one from the bundled source "
        f"({mine} is loaded, {bundled} is not)"
    ) in caplog.messages


def test_a_plugin_shadowing_two_keeps_both_in_source_order(
    tmp_path: Path, home: Path, host: Callable[..., PluginHost]
) -> None:
    write_plugin(tmp_path / "bundled", "calc")
    write_plugin(tmp_path / "path", "calc")
    write_plugin(home / "plugins", "calc")
    built = host(
        env={
            "HERMES_BUNDLED_PLUGINS": str(tmp_path / "bundled"),
            "HERMES_PLUGIN_PATH": str(tmp_path / "path"),
        }
    )
    [record] = built.plugins.records()
    assert [s.source for s in record.shadows] == ["bundled", "path"]
    assert plugin_line(record).endswith("; shadows the bundled plugin; shadows the path plugin")


def test_a_failed_plugin_that_shadows_keeps_its_reason_first(
    tmp_path: Path, home: Path, host: Callable[..., PluginHost]
) -> None:
    write_plugin(tmp_path / "bundled", "calc")
    write_plugin(home / "plugins", "calc", "raise RuntimeError('boom')\n")
    [record] = host(env={"HERMES_BUNDLED_PLUGINS": str(tmp_path / "bundled")}).plugins.records()
    assert plugin_line(record) == (
        "  ✗ calc v1.0.0 — RuntimeError: boom; shadows the bundled plugin"
    )


def test_plugins_with_distinct_keys_shadow_nothing(
    tmp_path: Path, home: Path, host: Callable[..., PluginHost]
) -> None:
    write_plugin(tmp_path / "bundled", "calc")
    write_plugin(home / "plugins", "notes")
    built = host(env={"HERMES_BUNDLED_PLUGINS": str(tmp_path / "bundled")})
    assert [(r.key, r.shadows, r.warnings) for r in built.plugins.records()] == [
        ("calc", [], []),
        ("notes", [], []),
    ]
