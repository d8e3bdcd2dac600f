"""The hermes-agent 0.19 plugin API on a real hermesd (issue 32, docs/hermes-compat.md §4).

One daemon holds a plugin that calls all eleven provider registrars of 0.19 (and a registrar
from a future API) besides an ordinary tool; plugins whose ``requires_hermes`` does and does not
admit the implemented API; and a plugin that wants a web search provider name already taken.
The plugin loads, its tool answers a turn, ``plugins info`` lists every backend with what hermesd
does with it, an unknown ``register_*`` is one warning and no failure, and ``ctx.llm`` honours
an auxiliary task's model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from hermesd import PLUGIN_API, __version__
from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    run_hermesctl,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.plugin_factory import write_plugin

ALL_KINDS = """
import json


class Backend:
    def __init__(self, name):
        self._name = name

    @property
    def name(self):
        return self._name


class Vault(Backend):
    api_version = 1
    shape = "mapped"

    def fetch(self, cfg, home_path):
        return None


def shout(args, **kwargs):
    return json.dumps({"out": args["text"].upper()})


async def on_click(ack, body, action):
    await ack()


def ask_aux(raw):
    result = ctx_ref[0].llm.complete([{"role": "user", "content": raw}], task="allkinds_digest")
    return f"{result.model}: {result.text}"


ctx_ref = []


def register(ctx):
    ctx_ref.append(ctx)
    ctx.register_web_search_provider(Backend("yandex"))
    ctx.register_browser_provider(Backend("cloudbrowse"))
    ctx.register_image_gen_provider(Backend("pixels"))
    ctx.register_video_gen_provider(Backend("frames"))
    ctx.register_tts_provider(Backend("voice"))
    ctx.register_transcription_provider(Backend("ears"))
    ctx.register_secret_source(Vault("vault"))
    ctx.register_dashboard_auth_provider(Backend("sso"))
    ctx.register_platform(name="irc", label="IRC", adapter_factory=lambda cfg: None,
                          check_fn=lambda: True, emoji="*")
    ctx.register_slack_action_handler("approve_button", on_click)
    ctx.register_auxiliary_task("allkinds_digest", display_name="Digest",
                                description="summaries", defaults={"timeout": 30})
    ctx.register_time_machine(lambda: None)
    ctx.register_time_machine(lambda: None)
    ctx.register_tool("shout_text", "allkinds",
                      {"description": "Shout the text and return it in capitals as JSON",
                       "parameters": {"type": "object", "required": ["text"],
                                      "properties": {"text": {"type": "string",
                                                              "description": "the text"}}}},
                      shout)
    ctx.register_command("askaux", ask_aux, description="ctx.llm through an auxiliary task")
    ctx.register_command("peek", lambda raw: json.dumps({
        "plugin_id": ctx.plugin_id, "depth": ctx.get_config("depth"),
        "missing": ctx.get_config("nothing", "fallback"),
        "fits": ctx.has_plugin("fitsplug"), "future": ctx.has_plugin("futureplug"),
    }), description="the newer ctx members")
"""

CLASH = """
class Backend:
    name = "yandex"


def register(ctx):
    ctx.register_web_search_provider(Backend())
"""

WEBSUB = """
from agent.web_search_provider import WebSearchProvider, get_provider_env


class Search(WebSearchProvider):
    name = "subsearch"

    def is_available(self):
        return bool(get_provider_env("WEBSUB_REGION"))


def register(ctx):
    provider = Search()
    ctx.register_web_search_provider(provider)
    ctx.register_command("websub", lambda raw: f"{provider.display_name} "
                         f"{provider.is_available()} {get_provider_env('WEBSUB_REGION')}")
"""

KIND_OF = {
    "web_search": "yandex",
    "browser": "cloudbrowse",
    "image_gen": "pixels",
    "video_gen": "frames",
    "tts": "voice",
    "transcription": "ears",
    "secret_source": "vault",
    "dashboard_auth": "sso",
    "platform": "irc",
    "slack_action": "approve_button",
    "auxiliary_task": "allkinds_digest",
}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def apid(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("pa-")
    plugins = home / "plugins"
    write_plugin(plugins, "allkinds", ALL_KINDS)
    write_plugin(plugins, "zclash", CLASH)
    write_plugin(plugins, "websub", WEBSUB)
    (home / ".env").write_text("WEBSUB_REGION= from-dotenv \n")
    quiet = "def register(ctx):\n    ctx.register_hook('post_tool_call', lambda **kw: None)\n"
    write_plugin(
        plugins,
        "futureplug",
        quiet,
        manifest={"name": "futureplug", "version": "1.0", "requires_hermes": ">=0.21.4"},
    )
    write_plugin(
        plugins,
        "fitsplug",
        quiet,
        manifest={"name": "fitsplug", "version": "1.0", "requires_hermes": ">=0.19,<0.20"},
    )
    write_plugin(
        plugins,
        "oldplug",
        quiet,
        manifest={"name": "oldplug", "version": "1.0", "requires_hermes": "<0.19"},
    )
    config = model_config(model.url, timeout=30, max_retries=0) + (
        "auxiliary:\n  allkinds_digest:\n    model: digest-model\n"
        "plugins:\n  entries:\n    allkinds:\n      settings:\n        depth: 3\n"
    )
    daemon = start_daemon(home, config=config)
    yield daemon
    daemon.stop()


def ctl(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


def info(daemon: DaemonProcess, name: str) -> dict[str, Any]:
    with daemon.client() as c:
        result: dict[str, Any] = c.call("plugins.info", {"name": name})
    return result


def test_a_plugin_calling_all_eleven_registrars_loads_and_its_tool_still_answers(
    apid: DaemonProcess, model: ScriptedModelServer
) -> None:
    assert info(apid, "allkinds")["state"] == "loaded"
    model.push(call_tools(tool_call("shout_text", {"text": "hello"})), reply("done"))
    with apid.client() as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "shout hello")
    finished = [e for e in events if e["type"] == "tool.finished"]
    assert finished[0]["name"] == "shout_text"
    assert json.loads(finished[0]["preview"]) == {"out": "HELLO"}


def test_plugins_info_lists_every_backend_with_what_hermesd_does_with_it(
    apid: DaemonProcess,
) -> None:
    providers = {p["kind"]: p for p in info(apid, "allkinds")["providers"]}
    assert {kind: p["name"] for kind, p in providers.items()} == KIND_OF
    for kind, entry in providers.items():
        if kind == "auxiliary_task":
            assert entry["status"].startswith("in use: ctx.llm.complete(task=<key>)")
        elif kind == "web_search":
            assert entry["status"].startswith("in use: web_search sends queries to it"), entry
        elif kind == "image_gen":
            assert entry["status"].startswith("in use: image_generate calls it"), entry
        elif kind == "video_gen":
            assert entry["status"].startswith("in use: video_generate calls it"), entry
        elif kind == "tts":
            assert entry["status"].startswith("in use: text_to_speech calls it"), entry
        elif kind == "dashboard_auth":
            assert entry["status"].startswith("in use: the HTTP door asks it"), entry
        elif kind == "secret_source":
            assert entry["status"].startswith("in use: when secrets.<name>.enabled"), entry
        elif kind == "browser":
            assert entry["status"].startswith("in use: the browser tools drive"), entry
        elif kind == "platform":
            assert entry["status"].startswith("in use: the gateway runs its adapter"), entry
        elif kind == "transcription":
            assert entry["status"].startswith("in use: the messaging gateway transcribes"), entry
        else:
            assert entry["status"].startswith("registered, not used by hermesd: "), kind
    assert "messaging gateway" in providers["transcription"]["status"]
    out = ctl(apid, "plugins", "info", "allkinds")
    assert "provides:    web search 'yandex' — in use: web_search sends queries" in out.stdout


def test_an_unknown_registrar_is_one_warning_naming_plugin_and_method_and_no_failure(
    apid: DaemonProcess,
) -> None:
    record = info(apid, "allkinds")
    messages = [w["message"] for w in record["warnings"]]
    assert (
        messages.count(
            f"ctx.register_time_machine is not part of the plugin API hermesd implements "
            f"({PLUGIN_API}); its calls are ignored"
        )
        == 1
    )
    assert apid.log().count("Plugin 'allkinds': ctx.register_time_machine is not part") == 1


def test_a_provider_subclassing_the_reference_base_class_imports_and_registers(
    apid: DaemonProcess,
) -> None:
    assert [p["name"] for p in info(apid, "websub")["providers"]] == ["subsearch"]
    with apid.client() as c:
        out = c.call("command.run", {"line": "/websub"})
    assert out["output"] == "subsearch True from-dotenv"


def test_a_backend_name_another_plugin_took_is_refused_and_the_plugin_still_loads(
    apid: DaemonProcess,
) -> None:
    clash = info(apid, "zclash")
    assert clash["state"] == "loaded"
    assert clash["providers"] == []
    assert "web_search 'yandex' is already registered by plugin 'allkinds'" in apid.log()


def test_requires_hermes_refuses_a_plugin_for_another_version_naming_both(
    apid: DaemonProcess,
) -> None:
    future = info(apid, "futureplug")
    assert future["state"] == "error"
    assert future["reason"] == (
        f"requires hermes >=0.21.4, but hermesd implements the plugin API of {PLUGIN_API}"
    )
    assert info(apid, "oldplug")["reason"].startswith("requires hermes <0.19, but")
    assert info(apid, "fitsplug")["state"] == "loaded"


def test_an_auxiliary_task_takes_its_model_from_its_config_section(
    apid: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("a digest"))
    with apid.client() as c:
        out = c.call("command.run", {"line": "/askaux summarise this"}, timeout=30)
    assert model.last_request["model"] == "digest-model"
    assert out["output"] == "digest-model: a digest"


def test_the_newer_ctx_members_answer_from_config_and_the_loaded_plugins(
    apid: DaemonProcess,
) -> None:
    with apid.client() as c:
        out = c.call("command.run", {"line": "/peek"})
    assert json.loads(out["output"]) == {
        "plugin_id": "allkinds",
        "depth": 3,
        "missing": "fallback",
        "fits": True,
        "future": False,
    }


def test_status_and_version_say_which_plugin_api_hermesd_implements(
    apid: DaemonProcess,
) -> None:
    assert apid.call("status")["plugin_api"] == PLUGIN_API == "hermes-agent 0.19.0"
    assert f"plugin API:  {PLUGIN_API}" in ctl(apid, "status").stdout
    version = subprocess.run(
        [sys.executable, "-m", "hermesd", "--version"],
        env={**os.environ, "PYTHONPATH": checkout_pythonpath(os.environ.get("PYTHONPATH"))},
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == f"hermesd {__version__} (plugin API: {PLUGIN_API})"


def test_unloading_a_plugin_frees_the_backend_names_it_held() -> None:
    home = short_tmpdir("pb-")
    write_plugin(home / "plugins", "allkinds", ALL_KINDS)
    write_plugin(home / "plugins", "zclash", CLASH)
    daemon = start_daemon(home)
    try:
        with daemon.client() as c:
            c.call("plugins.disable", {"name": "allkinds"})
            c.call("plugins.reload", timeout=120)
            clash = c.call("plugins.info", {"name": "zclash"})
    finally:
        daemon.stop()
    assert [(p["kind"], p["name"]) for p in clash["providers"]] == [("web_search", "yandex")]


VERIFIER = """
import json
from pathlib import Path


def register(ctx):
    def pre_verify(session_id, coding, attempt, final_response, changed_paths):
        with open(Path(ctx.hermes_home) / "pre_verify.jsonl", "a") as out:
            out.write(json.dumps({"attempt": attempt, "coding": coding,
                                  "final_response": final_response,
                                  "changed_paths": changed_paths}) + "\\n")
        if attempt == 0:
            return {"action": "continue", "message": "Run the tests before you finish."}
        return {"decision": "block", "reason": "   "}  # blank: lets the turn end

    ctx.register_hook("pre_verify", pre_verify)
"""


def test_pre_verify_keeps_a_turn_that_wrote_files_going_once_with_its_message(
    model: ScriptedModelServer,
) -> None:
    home = short_tmpdir("pv-")
    project = home / "project"
    project.mkdir()
    write_plugin(home / "plugins", "verifier", VERIFIER)
    config = model_config(model.url, timeout=30, max_retries=0) + f"terminal:\n  cwd: {project}\n"
    daemon = start_daemon(home, config=config)
    target = project / "notes.txt"
    model.push(
        call_tools(tool_call("write_file", {"path": str(target), "content": "hi\n"})),
        reply("all done"),
        reply("tests pass, done"),
        reply("plain answer"),
    )
    try:
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            first = send_and_follow(c, sid, "write the notes")[-1]
            nudged = model.last_request["messages"]
            second = send_and_follow(c, sid, "and now just talk")[-1]
    finally:
        daemon.stop()
    assert target.read_text() == "hi\n"
    assert first["final_text"] == "tests pass, done"
    assert nudged[-2:] == [
        {"role": "assistant", "content": "all done"},
        {"role": "user", "content": "Run the tests before you finish."},
    ]
    calls = [json.loads(line) for line in (home / "pre_verify.jsonl").read_text().splitlines()]
    assert calls == [
        {
            "attempt": 0,
            "coding": True,
            "final_response": "all done",
            "changed_paths": [str(target)],
        },
        {
            "attempt": 1,
            "coding": True,
            "final_response": "tests pass, done",
            "changed_paths": [str(target)],
        },
    ]  # the second turn wrote nothing: no call
    assert second["final_text"] == "plain answer"


DIGESTER = """
ctx_ref = []


def ask(raw):
    result = ctx_ref[0].llm.complete([{"role": "user", "content": raw}], task="digester_sum")
    return f"{result.model}: {result.text}"


def register(ctx):
    ctx_ref.append(ctx)
    ctx.register_auxiliary_task("digester_sum", display_name="Sum", description="summaries")
    ctx.register_command("sum", ask, description="ctx.llm through an auxiliary task")
"""


def test_an_auxiliary_task_with_its_own_base_url_goes_to_that_endpoint_with_its_key(
    model: ScriptedModelServer,
) -> None:
    home = short_tmpdir("auxep-")
    write_plugin(home / "plugins", "digester", DIGESTER)
    with ScriptedModelServer() as other:
        config = model_config(model.url, timeout=30, max_retries=0) + (
            "auxiliary:\n  digester_sum:\n"
            f"    model: aux-model\n    base_url: {other.url}\n    api_key: aux-key-123\n"
        )
        daemon = start_daemon(home, config=config)
        try:
            seen = len(model.requests)
            other.push(reply("from the side"))
            with daemon.client() as c:
                out = c.call("command.run", {"line": "/sum these notes"}, timeout=30)
        finally:
            daemon.stop()
    assert out["output"] == "aux-model: from the side"
    assert other.last_request["model"] == "aux-model"
    assert other.request_headers[-1]["authorization"] == "Bearer aux-key-123"
    assert len(model.requests) == seen  # the daemon's endpoint was not asked
