"""Tool schemas: what is rejected, what is merely warned about, and argument checks.

Three jobs, all pure functions over plain dicts:

- `validate_tool` — the hard rules a tool must meet to be registered (docs/hermes-compat.md
  §4): a name matching ``^[a-zA-Z0-9_-]{1,64}$`` and ``parameters`` a dict with
  ``"type": "object"``.
- `lint_tools` — the tools.json self-check list (docs/hermes-compat.md §4) as `Finding`
  warnings; heuristics are kept modest and documented in docs/plugins.md, and never reject a
  tool.
- `check_args` — a light check of a call's arguments against ``parameters`` (required present,
  JSON types, enum), so a model's wrong call becomes an error result naming the parameter.

`load_tools_json` reads a plugin's ``tools.json`` (a plain list of tools, or the OpenAI-wrapped
``{"type": "function", "function": {...}}`` form). No registry state lives here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOLS_PER_TOOLSET = 8

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}
# A name made only of these words (or ending in digits, like tool1) says nothing.
_PLACEHOLDER_WORDS = {
    "do",
    "stuff",
    "thing",
    "things",
    "misc",
    "tool",
    "tools",
    "util",
    "utils",
    "helper",
    "foo",
    "bar",
    "baz",
    "test",
    "func",
    "function",
    "handler",
}
_OUTPUT_WORDS = (
    "return",
    "output",
    "result",
    "gives",
    "yield",
    "respond",
    "->",
    "→",
    "返回",
    "输出",
    "结果",
    "得到",
)
_EXAMPLE_MARKERS = ("e.g", "eg.", "for example", "such as", "like ", "例如", "比如", "如 ")
_PROSE_LIST_RE = re.compile(
    r"['\"`]?[\w.+-]{1,12}['\"`]?(?:\s*(?:,|\||、|，)\s*(?:or\s+)?['\"`]?[\w.+-]{1,12}['\"`]?){2,}"
)
_MIN_DESCRIPTION_WIDTH = 20  # characters; a CJK character counts as two


@dataclass(frozen=True)
class Finding:
    """One lint result: severity, tool name, parameter ("" for the tool itself), message."""

    severity: Literal["error", "warning"]
    tool: str
    parameter: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """Plain-dict form for RPC results."""
        return {
            "severity": self.severity,
            "tool": self.tool,
            "parameter": self.parameter,
            "message": self.message,
        }


class ToolRejected(ValueError):
    """A tool registration was refused; the message says why."""


class ToolsJsonError(ValueError):
    """A plugin's tools.json could not be read or has the wrong shape."""


def validate_tool(name: object, schema: object) -> str | None:
    """The reason ``name``/``schema`` cannot be registered, or None when they can."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return f"invalid tool name {name!r}: must match ^[a-zA-Z0-9_-]{{1,64}}$"
    if not isinstance(schema, Mapping):
        return f"schema of tool '{name}' must be a dict, not {type(schema).__name__}"
    params = schema.get("parameters")
    if not isinstance(params, Mapping):
        return f"schema of tool '{name}' has no 'parameters' dict"
    if params.get("type") != "object":
        return f"'parameters' of tool '{name}' must have \"type\": \"object\""
    props = params.get("properties", {})
    if not isinstance(props, Mapping):
        return f"'parameters.properties' of tool '{name}' must be a dict"
    return None


def normalize_schema(name: str, schema: Mapping[str, Any], description: str = "") -> dict[str, Any]:
    """The ``{name, description, parameters}`` dict sent to the model (description from the
    schema, else the ``description`` argument)."""
    return {
        "name": name,
        "description": str(schema.get("description") or description or ""),
        "parameters": dict(schema["parameters"]),
    }


def openai_form(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap a normalized schema in the OpenAI ``{"type": "function", "function": ...}`` form."""
    return {"type": "function", "function": dict(schema)}


def load_tools_json(path: Path) -> dict[str, dict[str, Any]]:
    """Read a tools.json file: tool name -> schema, in file order."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolsJsonError(f"cannot read {path.name}: {exc}") from exc
    if not isinstance(data, list):
        raise ToolsJsonError(f"{path.name} must be a JSON list of tools")
    schemas: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(data):
        if isinstance(item, dict) and item.get("type") == "function":
            item = item.get("function")
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ToolsJsonError(f"{path.name}: entry {index} has no 'name'")
        schemas[item["name"]] = item
    return schemas


def _width(text: str) -> int:
    return sum(2 if ord(ch) > 0x2E7F else 1 for ch in text)


def _lint_name(name: str) -> str | None:
    words = [w for w in re.split(r"[_-]|(?<=[a-z])(?=[A-Z])", name) if w]
    lowered = [w.lower() for w in words]
    if len(words) < 2:
        return f"name '{name}' is not verb_noun (e.g. get_weather)"
    if all(w in _PLACEHOLDER_WORDS or w.rstrip("0123456789") == "" for w in lowered):
        return f"name '{name}' does not say what the tool does"
    if re.search(r"\d+$", name):
        return f"name '{name}' ends in a number and does not say what the tool does"
    return None


def _lint_description(tool: str, text: str) -> list[Finding]:
    if not text.strip():
        return [Finding("warning", tool, "", "tool has no description")]
    findings = []
    if _width(text) < _MIN_DESCRIPTION_WIDTH:
        findings.append(
            Finding(
                "warning",
                tool,
                "",
                "description is too short to say what goes in and what comes out",
            )
        )
    elif not any(word in text.lower() for word in _OUTPUT_WORDS):
        findings.append(
            Finding(
                "warning",
                tool,
                "",
                "description does not say what the tool returns (input → output)",
            )
        )
    return findings


def _type_ok(value: Any, declared: object) -> bool:
    names = declared if isinstance(declared, list) else [declared]
    for type_name in names:
        kinds = _JSON_TYPES.get(str(type_name))
        if kinds is None:
            return True  # a type we do not know: do not judge
        if isinstance(value, bool) and type_name in ("integer", "number"):
            continue
        if type_name == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, kinds):
            return True
    return False


def _lint_param(tool: str, param: str, spec: Mapping[str, Any]) -> list[Finding]:
    findings = []

    def warn(message: str) -> None:
        findings.append(Finding("warning", tool, param, message))

    description = str(spec.get("description") or "")
    if not description.strip():
        warn("parameter has no description")
    enum = spec.get("enum")
    lowered = description.lower()
    if (
        enum is None
        and spec.get("type", "string") == "string"
        and _PROSE_LIST_RE.search(description)
        and not any(marker in lowered for marker in _EXAMPLE_MARKERS)
    ):
        warn('description lists values in prose; use "enum" instead')
    if "default" in spec:
        default = spec["default"]
        if "type" in spec and not _type_ok(default, spec["type"]):
            warn(f"default {default!r} does not match type {spec['type']!r}")
        if isinstance(enum, list) and default not in enum:
            warn(f"default {default!r} is not one of the enum values")
    low, high = spec.get("minimum"), spec.get("maximum")
    numeric = (int, float)
    if isinstance(low, numeric) and isinstance(high, numeric) and low > high:
        warn(f"minimum {low} is greater than maximum {high}")
    default = spec.get("default")
    if isinstance(default, numeric) and not isinstance(default, bool):
        if isinstance(low, numeric) and default < low:
            warn(f"default {default} is below minimum {low}")
        if isinstance(high, numeric) and default > high:
            warn(f"default {default} is above maximum {high}")
    return findings


def lint_tool(name: str, schema: Mapping[str, Any]) -> list[Finding]:
    """Self-check findings (docs/hermes-compat.md §4) for one valid tool schema."""
    findings: list[Finding] = []
    problem = _lint_name(name)
    if problem:
        findings.append(Finding("warning", name, "", problem))
    findings.extend(_lint_description(name, str(schema.get("description") or "")))
    params = schema.get("parameters") or {}
    props = params.get("properties") or {}
    for missing in [r for r in params.get("required") or [] if r not in props]:
        findings.append(
            Finding(
                "warning",
                name,
                str(missing),
                "listed in 'required' but not defined in 'properties'",
            )
        )
    for param, spec in props.items():
        if isinstance(spec, Mapping):
            findings.extend(_lint_param(name, str(param), spec))
        else:
            findings.append(Finding("warning", name, str(param), "parameter spec is not a dict"))
    return findings


def lint_tools(tools: Iterable[tuple[str, str, Mapping[str, Any]]]) -> list[Finding]:
    """Self-check findings for ``(name, toolset, schema)`` triples, incl. toolset size."""
    tools = list(tools)
    findings = [f for name, _, schema in tools for f in lint_tool(name, schema)]
    for toolset, count in Counter(toolset for _, toolset, _ in tools).items():
        if count > MAX_TOOLS_PER_TOOLSET:
            findings.append(
                Finding(
                    "warning",
                    "",
                    "",
                    f"toolset '{toolset}' has {count} tools; more than "
                    f"{MAX_TOOLS_PER_TOOLSET} makes it hard for the model to choose",
                )
            )
    return findings


def check_args(parameters: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """The first problem with ``args`` against ``parameters``, or None.

    Light by design: required parameters present, declared JSON types, enum membership. Extra
    arguments pass, and None passes for a parameter that is not required.
    """
    props = parameters.get("properties") or {}
    for name in parameters.get("required") or []:
        if name not in args or args[name] is None:
            return f"missing required parameter '{name}'"
    for name, value in args.items():
        spec = props.get(name)
        if not isinstance(spec, Mapping) or value is None:
            continue
        declared = spec.get("type")
        if declared is not None and not _type_ok(value, declared):
            expected = " or ".join(declared) if isinstance(declared, list) else str(declared)
            return f"parameter '{name}' must be {expected}, got {_json_type(value)}"
        enum = spec.get("enum")
        if isinstance(enum, list) and enum and value not in enum:
            allowed = ", ".join(json.dumps(v, ensure_ascii=False) for v in enum)
            return f"parameter '{name}' must be one of {allowed}"
    return None


def _json_type(value: Any) -> str:
    for name, kinds in _JSON_TYPES.items():
        if name == "number" or (name == "integer" and isinstance(value, bool)):
            continue
        if isinstance(value, kinds):
            return name
    return "number" if isinstance(value, float) else type(value).__name__
