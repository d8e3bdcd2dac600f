"""hermesd.mcp's pure parts: server settings, ${VAR} expansion, tool names, result shapes."""

from __future__ import annotations

import hashlib
import json
import os
from types import SimpleNamespace

import pytest

from hermesd.mcp import naming, results
from hermesd.mcp.connection import safe_environment, spawn_parameters
from hermesd.mcp.settings import McpSettingsError, check_allowlists, check_server, check_servers
from tests.support.mcp_helpers import unmarked

pytestmark = pytest.mark.unit


def test_a_stdio_entry_becomes_settings_with_the_reference_defaults() -> None:
    s = check_server("t", {"command": "uvx", "args": ["mcp-server-time"]})
    assert (s.kind, s.timeout, s.connect_timeout, s.enabled) == ("stdio", 300.0, 60.0, True)
    assert (s.approval, s.trusted) == ("always", False)


def test_a_trusted_server_does_not_ask_by_default() -> None:
    assert check_server("t", {"command": "x", "trusted": True}).approval == "never"


def test_transport_sse_selects_the_legacy_transport() -> None:
    assert check_server("w", {"url": "http://h/sse", "transport": "sse"}).kind == "sse"
    assert check_server("w", {"url": "http://h/mcp"}).kind == "streamable_http"


def test_include_wins_over_exclude_for_a_tool_matching_both() -> None:
    s = check_server("t", {"command": "x", "tools": {"include": ["read_*"], "exclude": ["read_x"]}})
    assert s.wants_tool("read_x")
    assert not s.wants_tool("write")


def test_expansion_replaces_both_variable_forms() -> None:
    s = check_server("t", {"command": "${BIN}", "env": {"K": "${env:KEY}-x"}})
    done = s.resolved({"BIN": "/bin/srv", "KEY": "v"})
    assert (done.command, dict(done.env)) == ("/bin/srv", {"K": "v-x"})


def test_expansion_of_an_unset_variable_names_it() -> None:
    s = check_server("t", {"url": "http://h", "headers": {"A": "Bearer ${TOKEN}"}})
    with pytest.raises(McpSettingsError, match=r"mcp_servers.t.headers.A: \$\{TOKEN\} is not set"):
        s.resolved({})


def test_changed_settings_compare_unequal_and_the_same_compare_equal() -> None:
    a, _ = check_servers({"s": {"command": "x", "env": {"A": "1"}}})
    b, _ = check_servers({"s": {"command": "x", "env": {"A": "1"}}})
    c, _ = check_servers({"s": {"command": "x", "env": {"A": "2"}}})
    assert a == b
    assert a != c


def test_a_server_name_with_a_slash_is_refused() -> None:
    with pytest.raises(McpSettingsError, match="a server name is"):
        check_servers({"a/b": {"command": "x"}})


def test_allowlists_are_read_per_plugin() -> None:
    assert check_allowlists({"p": {"mcp_allowlist": ["time", "docs:s*"]}, "q": None}) == {
        "p": ("time", "docs:s*")
    }


def test_the_safe_environment_keeps_only_the_basics_and_xdg() -> None:
    environ = {"PATH": "/bin", "XDG_DATA_HOME": "/d", "OPENAI_API_KEY": "sk", "AWS_SECRET": "s"}
    assert safe_environment(environ, {"MINE": "1"}) == {
        "PATH": "/bin",
        "XDG_DATA_HOME": "/d",
        "MINE": "1",
    }


def test_spawn_parameters_are_the_resolved_command_line() -> None:
    s = check_server("t", {"command": "srv", "args": ["-v"], "cwd": "/tmp"})
    params = spawn_parameters(s, {"PATH": "/bin", "TOKEN": "x"})
    assert (params.command, params.args, params.env, str(params.cwd)) == (
        "srv",
        ["-v"],
        {"PATH": "/bin"},
        "/tmp",
    )


def test_names_are_sanitised_per_part() -> None:
    assert naming.tool_name("my-srv.v2", "read file") == "mcp__my_srv_v2__read_file"
    assert naming.legacy_name("my-srv", "read") == "mcp_my_srv_read"
    assert naming.toolset("my-srv") == "mcp-my-srv"


def test_a_long_name_is_clamped_deterministically_to_64_characters() -> None:
    tool = "t" * 80
    full = f"mcp__s__{tool}"
    clamped = naming.tool_name("s", tool)
    assert clamped == full[:55] + "_" + hashlib.sha256(full.encode()).hexdigest()[:8]
    assert len(clamped) == 64
    assert naming.tool_name("s", tool[:-1] + "u") != clamped


def _block(kind: str, **fields: object) -> SimpleNamespace:
    return SimpleNamespace(type=kind, **fields)


def test_an_error_result_joins_its_text_and_hides_credentials() -> None:
    result = SimpleNamespace(
        is_error=True,
        content=[_block("text", text="bad key "), _block("text", text="sk-" + "a" * 30)],
        structured_content=None,
        meta=None,
    )
    error = json.loads(results.tool_result(result, "mcp:s/t"))["error"]
    assert 'source="mcp:s/t"' in error
    assert "bad key [REDACTED]" in error and "sk-" not in error


def test_reserved_meta_keys_are_dropped_and_vendor_ones_kept() -> None:
    result = SimpleNamespace(
        is_error=False,
        content=[_block("text", text="ok")],
        structured_content=None,
        meta={"io.modelcontextprotocol/x": 1, "mcp/y": 2, "acme.com/trace": "t"},
    )
    assert unmarked(results.tool_result(result, "mcp:s/t"), "mcp:s/t") == {
        "result": "ok",
        "_meta": {"acme.com/trace": "t"},
    }


def test_tag_characters_are_stripped_from_nested_values() -> None:
    assert results.strip_tags({"k\U000e0041": ["a\U000e007fb"]}) == {"k": ["ab"]}


def test_the_stderr_log_keeps_only_its_last_bytes() -> None:
    from hermesd.mcp.connection import StderrLog

    log = StderrLog(limit=100)
    try:
        for i in range(50):
            log.append(f"line {i:03d}\n".encode())
        text = log.text()
        assert len(text.encode()) == 100
        assert text.endswith("line 049\n")
        assert "line 000" not in text
        assert log.text(tail=9) == "line 049\n"
    finally:
        log.close(None)


def test_editor_variables_user_home_and_path_separator_expand() -> None:
    s = check_server("t", {"command": "srv", "args": ["${userHome}${/}data${pathSeparator}x"]})
    home = os.path.expanduser("~")
    assert s.resolved({}).args == (f"{home}/data/x",)


def test_a_servers_sandbox_setting_is_read_and_expanded() -> None:
    s = check_server(
        "fs",
        {"command": "srv", "sandbox": {"writable": ["~/notes", "${DATA}/x"], "readable": "/r"}},
    )
    assert (s.writable, s.readable) == (("~/notes", "${DATA}/x"), ("/r",))
    assert s.resolved({"DATA": "/data"}).writable == ("~/notes", "/data/x")


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ("/tmp", r"'mcp_servers\.fs\.sandbox' must be a mapping"),
        ({"writeable": ["/x"]}, r"accepts writable and readable, not writeable"),
        ({"writable": ["relative/dir"]}, r"sandbox\.writable' entries must be absolute paths"),
        ({"readable": [{"a": 1}]}, r"sandbox\.readable' must be a list of strings"),
    ],
)
def test_a_bad_sandbox_setting_is_refused_naming_the_key(sandbox: object, message: str) -> None:
    with pytest.raises(McpSettingsError, match=message):
        check_server("fs", {"command": "srv", "sandbox": sandbox})


def test_a_sandbox_setting_on_an_http_server_is_refused() -> None:
    with pytest.raises(McpSettingsError, match="applies only to a stdio server"):
        check_server("web", {"url": "http://127.0.0.1:1/mcp", "sandbox": {"writable": ["/x"]}})


def test_a_changed_sandbox_setting_compares_unequal_so_a_reload_restarts_it() -> None:
    a = check_server("fs", {"command": "srv", "sandbox": {"writable": ["/a"]}})
    b = check_server("fs", {"command": "srv", "sandbox": {"writable": ["/b"]}})
    assert a != b
