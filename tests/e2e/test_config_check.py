"""Configuration checks as a person meets them: ``--check-config`` lists every problem, a base_url
must be an absolute http(s) URL and every form an OpenAI-compatible server accepts works, and a
permanent model error is never retried."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.daemon import daemon_env, run_hermesctl, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, http_error, model_config, reply


def check_config(text: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    home = short_tmpdir()
    (home / "config.yaml").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        env=daemon_env(home, env),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_check_config_reports_every_problem_not_only_the_first() -> None:
    out = check_config(
        "limits:\n  max_connections: lots\n"
        "model:\n  base_url: localhost:8080\n  timeout: [1]\n"
        "approvals:\n  mode: sometimes\n"
    )
    assert out.returncode == 78
    problems = out.stderr.splitlines()
    assert [p.split("'")[1] for p in problems] == [
        "limits.max_connections",
        "model.base_url",
        "model.timeout",
        "approvals.mode",
    ]
    assert all(p.startswith("hermesd: configuration error: ") for p in problems)


def test_sections_of_the_wrong_type_are_each_reported_once_without_a_traceback() -> None:
    out = check_config("plugins: 5\nmcp_servers: 7\n")
    assert out.returncode == 78, out.stderr
    assert out.stderr.splitlines() == [
        "hermesd: configuration error: 'plugins' must be a mapping, got int",
        "hermesd: configuration error: 'mcp_servers' must be a mapping, got int",
    ]


@pytest.mark.parametrize(
    "url", ["localhost:8080/v1", "ftp://127.0.0.1/v1", "/v1", "http://", "http://host:port/v1"]
)
def test_a_base_url_that_is_not_an_absolute_http_url_is_rejected(url: str) -> None:
    out = check_config(f"model:\n  base_url: '{url}'\n")
    assert out.returncode == 78
    assert "'model.base_url' must be an absolute http(s) URL" in out.stderr


def test_a_bad_openai_base_url_in_the_environment_is_rejected_too() -> None:
    out = check_config("", env={"OPENAI_BASE_URL": "ftp://127.0.0.1/v1"})
    assert out.returncode == 78
    assert "OPENAI_BASE_URL must be an absolute http(s) URL" in out.stderr


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_every_base_url_form_completes_a_turn_through_hermesctl(start, suffix: str) -> None:
    with ScriptedModelServer([reply("hello there")]) as model:
        daemon = start(config=model_config(model.root_url + suffix))
        out = run_hermesctl(["--socket", str(daemon.socket), "chat", "-m", "hi"])
        assert out.returncode == 0, out.stderr
        assert "hello there" in out.stdout
        assert len(model.requests) == 1


@pytest.mark.parametrize(
    "status, message", [(401, "invalid api key"), (404, "model 'nope' not found")]
)
def test_a_permanent_model_error_is_never_retried(start, status: int, message: str) -> None:
    with ScriptedModelServer([http_error(status, message)] * 4) as model:
        daemon = start(config=model_config(model.url, max_retries=3, retry_max_wait=0.01))
        out = run_hermesctl(["--socket", str(daemon.socket), "chat", "-m", "hi"])
        assert out.returncode != 0
        assert message in out.stdout + out.stderr
        assert len(model.requests) == 1


def test_a_retryable_model_error_is_retried(start) -> None:
    # the counterpart of the test above: the same daemon settings do retry a 503
    with ScriptedModelServer([http_error(503), reply("after a retry")]) as model:
        daemon = start(config=model_config(model.url, max_retries=3, retry_max_wait=0.01))
        out = run_hermesctl(["--socket", str(daemon.socket), "chat", "-m", "hi"])
        assert out.returncode == 0 and "after a retry" in out.stdout
        assert len(model.requests) == 2
