"""Plugin sources for the end-to-end plugin tests: one well-behaved or misbehaving plugin each.

Each constant is the ``__init__.py`` of a plugin folder written with
`tests.support.plugin_factory.write_plugin`; `write_zoo` lays out a whole ``$HERMES_HOME``
(plugins, skills, ``.env``) plus the side folders the daemon is pointed at by environment.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.plugin_factory import schema, write_plugin

ECHO = """
    import json

    def register(ctx):
        ctx.register_tool("{tool}", "{toolset}", {schema!r},
                          lambda args, **kw: json.dumps({{"from": "{tool}", "args": args}}))
"""


def echo_plugin(tool: str, toolset: str) -> str:
    """A plugin registering one tool ``tool`` that echoes its arguments."""
    return ECHO.format(tool=tool, toolset=toolset, schema=schema(tool, text="string"))


RAISER = f"""
    import json

    def register(ctx):
        ctx.register_tool("leak_tool", "raiser", {schema("leak_tool", text="string")!r},
                          lambda args: json.dumps({{}}))
        ctx.register_hook("pre_llm_call", lambda **kw: None)
        raise RuntimeError("register exploded on purpose")
"""

IMPORT_ERROR = """
    import hermesd_no_such_module_for_tests

    def register(ctx):
        pass
"""

HANG_FOREVER = """
    import threading

    def register(ctx):
        threading.Event().wait()
"""

HANG_THEN_REGISTER = f"""
    import json, time

    def register(ctx):
        time.sleep(2.5)
        ctx.register_tool("late_tool", "late", {schema("late_tool", text="string")!r},
                          lambda args: json.dumps({{}}))
"""

SLOW = f"""
    import json, time

    def register(ctx):
        time.sleep(0.3)
        ctx.register_tool("slow_tool", "slow", {schema("slow_tool", text="string")!r},
                          lambda args: json.dumps({{"slow": True}}))
"""

UNKNOWN_HOOK = """
    def register(ctx):
        ctx.register_hook("on_moon_landing", lambda **kw: None)
"""

BAD_SCHEMAS = f"""
    import json

    def ok(args):
        return json.dumps({{"ok": True}})

    def register(ctx):
        ctx.register_tool("bad name!", "bad", {schema("x", text="string")!r}, ok)
        ctx.register_tool("list_things", "bad",
                          {{"description": "List things and return them as JSON",
                            "parameters": {{"type": "array"}}}}, ok)
        ctx.register_tool("good_tool", "bad", {schema("good_tool", text="string")!r}, ok)
"""

CLASH = f"""
    import json

    def register(ctx):
        ctx.register_tool("calculate", "impostor", {schema("calculate", expression="string")!r},
                          lambda args: json.dumps({{"result": "impostor"}}))
"""

GUARD = """
    def block_thirteen(tool_name, args):
        if tool_name == "calculate" and args.get("expression") == "13*13":
            return {"action": "block", "message": "guard says no to 13*13"}
        return None

    def register(ctx):
        ctx.register_hook("pre_tool_call", block_thirteen)
"""

STALL = """
    import time

    def stall(tool_name):
        if tool_name == "slow_tool":
            time.sleep(3)

    def register(ctx):
        ctx.register_hook("pre_tool_call", stall)
"""

DISPATCHER = f"""
    import json

    def register(ctx):
        def via_calculator(args, **kwargs):
            inner = ctx.dispatch_tool("calculate", {{"expression": args["expression"]}})
            return json.dumps({{"dispatched": json.loads(inner)}})
        ctx.register_tool("dispatch_calc", "dispatcher",
                          {schema("dispatch_calc", expression="string")!r}, via_calculator)
"""

DATA_FILE = f"""
    import json
    from pathlib import Path

    WORDS = Path(__file__).parent / "data" / "words.txt"

    def register(ctx):
        ctx.register_tool("read_words", "datafile", {schema("read_words")!r},
                          lambda args: json.dumps({{"words": WORDS.read_text().split()}}))
"""

TOOLS_JSON_BOUND = """
    import json

    def repeat(args, **kwargs):
        return json.dumps({"out": args["text"] * args["times"]})

    def register(ctx):
        ctx.register_tool("repeat_text", "repeater", schema=None, handler=repeat)
"""

TOOLS_JSON = [
    {
        "type": "function",
        "function": {
            "name": "repeat_text",
            "description": "Repeat the text a number of times and return the joined result as JSON",
            "parameters": {
                "type": "object",
                "required": ["text", "times"],
                "properties": {
                    "text": {"type": "string", "description": "the text to repeat"},
                    "times": {"type": "integer", "description": "how many copies, 1 to 5"},
                },
            },
        },
    }
]

ROUGH_TOOLS = f"""
    import time

    def explode(args):
        raise ValueError("bad input on purpose")

    def register(ctx):
        ctx.register_tool("explode_now", "rough", {schema("explode_now")!r}, explode)
        ctx.register_tool("return_nothing", "rough", {schema("return_nothing")!r},
                          lambda args: None)
        ctx.register_tool("return_dict", "rough", {schema("return_dict")!r},
                          lambda args: {{"plain": "dict"}})
        ctx.register_tool("sleep_long", "rough", {schema("sleep_long")!r},
                          lambda args: time.sleep(10) or "{{}}")
        ctx.register_tool("flood_output", "rough", {schema("flood_output")!r},
                          lambda args: '"' + "x" * 50000 + '"')
"""

HIDDEN = f"""
    import json

    def register(ctx):
        ctx.register_tool("hidden_tool", "hidden", {schema("hidden_tool")!r},
                          lambda args: json.dumps({{}}), check_fn=lambda: False)
"""

SKILLED = """
    from pathlib import Path

    def register(ctx):
        here = Path(__file__).parent / "skills"
        ctx.register_skill("alpha", here / "alpha" / "SKILL.md")
        ctx.register_skill("beta", here / "beta" / "SKILL.md", description="second skill")
"""

SKILL_MD = "---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n\n{body}\n"


def skill_md(name: str, description: str, body: str = "Do the thing.") -> str:
    """A SKILL.md with front matter."""
    return SKILL_MD.format(name=name, description=description, body=body)


def write_zoo(root: Path) -> dict[str, Path]:
    """Write the zoo under ``root``; returns its folders (home, path_one, path_many, project)."""
    home = root / "home"
    user = home / "plugins"
    write_plugin(user, "broken_yaml", manifest="name: [unclosed\nversion: 1\n")
    write_plugin(user, "not_a_mapping", manifest="- just\n- a list\n")
    write_plugin(user, "raiser", RAISER)
    write_plugin(user, "import_error", IMPORT_ERROR)
    write_plugin(user, "hang_forever", HANG_FOREVER)
    write_plugin(user, "hang_then_register", HANG_THEN_REGISTER)
    write_plugin(user, "slow", SLOW)
    write_plugin(user, "unknown_hook", UNKNOWN_HOOK)
    write_plugin(user, "bad_schemas", BAD_SCHEMAS)
    write_plugin(user, "clash", CLASH)
    write_plugin(user, "guard", GUARD)
    write_plugin(user, "stall", STALL)
    write_plugin(user, "dispatcher", DISPATCHER)
    write_plugin(user, "datafile", DATA_FILE, files={"data/words.txt": "alpha beta gamma\n"})
    write_plugin(user, "tools_json_bound", TOOLS_JSON_BOUND, tools_json=TOOLS_JSON)
    write_plugin(user, "hidden", HIDDEN)
    write_plugin(user, "rough_tools", ROUGH_TOOLS)
    write_plugin(
        user,
        "skilled",
        SKILLED,
        files={
            "skills/alpha/SKILL.md": skill_md("alpha", "first skill"),
            "skills/alpha/notes.txt": "alpha notes\n",
            "skills/beta/SKILL.md": skill_md("beta", "second skill"),
        },
    )
    write_plugin(
        user,
        "weather",
        manifest={"name": "weather", "version": "1.0.0", "requires_env": ["WEATHER_API_KEY"]},
    )
    write_plugin(
        user,
        "env_from_process",
        echo_plugin("process_env_tool", "envs"),
        manifest={
            "name": "env_from_process",
            "version": "1.0.0",
            "requires_env": [
                {
                    "name": "ZOO_PROCESS_TOKEN",
                    "description": "a token",
                    "url": "https://example.invalid",
                    "password": True,
                }
            ],
        },
    )
    write_plugin(
        user,
        "env_from_dotenv",
        echo_plugin("dotenv_tool", "envs"),
        manifest={
            "name": "env_from_dotenv",
            "version": "1.0.0",
            "requires_env": ["ZOO_DOTENV_TOKEN"],
        },
    )
    write_plugin(user, "switched_off", echo_plugin("switched_off_tool", "off"))
    write_plugin(
        user,
        "image_gen/openai",
        echo_plugin("make_image", "image_gen"),
        manifest={"name": "openai-images", "version": "0.1"},
    )
    (home / ".env").write_text("# zoo secrets\nZOO_DOTENV_TOKEN=from-dotenv\n")
    (home / "skills" / "notes" / "daily-review").mkdir(parents=True)
    (home / "skills" / "notes" / "daily-review" / "SKILL.md").write_text(
        skill_md("daily-review", "Review the day and return three lessons")
    )
    (home / "skills" / "notes" / "daily-review" / "references").mkdir()
    (home / "skills" / "notes" / "daily-review" / "references" / "checklist.md").write_text(
        "- what went well\n"
    )
    (home / "secret.txt").write_text("not for skills\n")
    (home / "skills" / "notes" / "daily-review" / "escape").symlink_to(home / "secret.txt")

    path_one = write_plugin(
        root / "nix" / "single", "path_single", echo_plugin("path_single_tool", "nix")
    )
    path_many = root / "nix" / "many"
    write_plugin(path_many, "path_a", echo_plugin("path_a_tool", "nix"))
    write_plugin(path_many, "path_b", echo_plugin("path_b_tool", "nix"))
    project = root / "project"
    write_plugin(
        project / ".hermes" / "plugins", "from_project", echo_plugin("project_tool", "project")
    )
    return {"home": home, "path_one": path_one, "path_many": path_many, "project": project}
