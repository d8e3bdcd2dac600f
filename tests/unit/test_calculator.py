"""The bundled calculator plugin: the guide's behaviour, safely.

The plugin package is imported straight from `plugins/calculator/` as a package (as the host does,
so relative imports work); the guide's original is extracted from the guide seed at test time to
compare against.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO_ROOT / "plugins" / "calculator"
SAFETY_BOUND_S = 2.0  # a hostile expression must be refused well before this; not a perf target

EXPECTED_UNITS = {
    "length": ["m", "km", "mi", "ft", "in", "cm"],
    "weight": ["kg", "g", "lb", "oz"],
    "temperature": ["C", "F", "K"],
    "data": ["B", "KB", "MB", "GB", "TB"],
    "time": ["s", "ms", "min", "hr", "day"],
}


def _load_package(name: str, folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


plugin = _load_package("hermesd_test_calculator", PLUGIN_DIR)
tools = importlib.import_module("hermesd_test_calculator.tools")
schemas = importlib.import_module("hermesd_test_calculator.schemas")
guide_seed = _load_file(
    "hermesd_test_guide_seed", REPO_ROOT / "tests" / "support" / "guide_seed.py"
)


def _strict_json(text: str) -> dict[str, Any]:
    """Parse JSON, refusing the NaN/Infinity extensions that json.dumps emits by default."""

    def refuse(token: str) -> None:
        raise AssertionError(f"invalid JSON constant {token} in {text!r}")

    value = json.loads(text, parse_constant=refuse)
    assert isinstance(value, dict)
    return value


def calc(expression: object) -> dict[str, Any]:
    out = tools.calculate({"expression": expression})
    assert isinstance(out, str)
    return _strict_json(out)


def convert(value: object, from_unit: object, to_unit: object) -> dict[str, Any]:
    out = tools.unit_convert({"value": value, "from_unit": from_unit, "to_unit": to_unit})
    assert isinstance(out, str)
    return _strict_json(out)


# --- calculate: the guide's examples and ordinary arithmetic -------------------------------------


def test_guide_example_power_of_two() -> None:
    assert calc("2**16") == {"expression": "2**16", "result": 65536}


def test_guide_example_square_root() -> None:
    assert calc("sqrt(144)") == {"expression": "sqrt(144)", "result": 12.0}


def test_guide_example_circle_area() -> None:
    assert calc("pi * 5**2")["result"] == pytest.approx(math.pi * 25)


def test_guide_example_square_root_of_two_pi() -> None:
    assert calc("sqrt(2*pi)")["result"] == pytest.approx(math.sqrt(2 * math.pi))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("-3 ** 2", -9),
        ("2 ** 3 ** 2", 512),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("7 / 2", 3.5),
        ("+5 - -5", 10),
        ("1e3 + 0.5", 1000.5),
        ("2 ** -1", 0.5),
        ("abs(-4)", 4),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),
        ("round(1234, -2)", 1200),
        ("min(3, 1, 2)", 1),
        ("max(3, 1, 2)", 3),
        ("pow(2, 10)", 1024),
        ("pow(3, 4, 5)", 1),
        ("floor(-2.5)", -3),
        ("ceil(2.1)", 3),
        ("trunc(-2.7)", -2),
        ("factorial(10)", 3628800),
        ("factorial(5.0)", 120),
        ("hypot(3, 4)", 5.0),
        ("log(e)", 1.0),
        ("log(8, 2)", 3.0),
        ("log2(1024)", 10.0),
        ("log10(1000)", 3.0),
        ("exp(0)", 1.0),
        ("degrees(pi)", 180.0),
        ("radians(180)", math.pi),
        ("sin(0) + cos(0)", 1.0),
        ("atan2(1, 1)", math.pi / 4),
        ("cbrt(27)", 3.0),
        ("tau / 2", math.pi),
        ("\uff50\uff49", math.pi),  # NFKC-normalised by the parser to the allowed name `pi`
    ],
)
def test_arithmetic_gives_python_semantics(expression: str, expected: float) -> None:
    assert calc(expression)["result"] == pytest.approx(expected)


def test_integer_results_stay_exact() -> None:
    assert calc("2**100 + 1")["result"] == 2**100 + 1


def test_largest_allowed_integer_is_computed() -> None:
    assert calc("2**9999")["result"] == 2**9999


def test_factorial_at_its_bound_is_computed() -> None:
    assert calc("factorial(1000)")["result"] == math.factorial(1000)


def test_three_argument_pow_with_huge_exponent_and_small_modulus_is_cheap() -> None:
    assert calc("pow(2, 10**9, 7)")["result"] == pow(2, 10**9, 7)


def test_redundant_parentheses_add_no_depth() -> None:
    assert calc("(" * 150 + "1" + ")" * 150)["result"] == 1


def test_expression_is_echoed_stripped() -> None:
    assert calc("  1 + 1\n")["expression"] == "1 + 1"


def test_extra_kwargs_are_accepted() -> None:
    out = tools.calculate({"expression": "1+1"}, task_id="t1", session_id="s1")
    assert json.loads(out)["result"] == 2


# --- calculate: errors ---------------------------------------------------------------------------


def test_empty_expression_is_an_error() -> None:
    assert calc("") == {"error": "No expression provided"}


def test_blank_expression_is_an_error() -> None:
    assert calc("   ") == {"error": "No expression provided"}


def test_missing_expression_is_an_error() -> None:
    assert json.loads(tools.calculate({})) == {"error": "No expression provided"}


@pytest.mark.parametrize("expression", [42, None, ["1+1"], {"a": 1}])
def test_non_string_expression_is_an_error(expression: object) -> None:
    assert calc(expression)["error"].startswith("Invalid:")


@pytest.mark.parametrize("expression", ["1/0", "1//0", "1%0", "0**-1", "1.0/0.0", "5 % 0.0"])
def test_division_by_zero_has_its_own_message(expression: str) -> None:
    assert calc(expression) == {"expression": expression, "error": "Division by zero"}


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("x + 1", "unknown name 'x'"),
        ("sqrt", "sqrt is a function"),
        ("1 +", "syntax error"),
        ("sqrt(-1)", "math domain error"),
        ("factorial(1001)", "factorial() argument above 1000"),
        ("factorial(-1)", "non-negative"),
        ("factorial(2.5)", "whole number"),
        ("sqrt(1, 2)", "argument"),
        ("min()", "at least one"),
        ("exp(1000)", "too large"),
        ("2**10000", "larger than 10000 bits"),
        ("1" * 501, "longer than 500 characters"),
    ],
)
def test_refused_expression_says_why(expression: str, reason: str) -> None:
    error = calc(expression)["error"]
    assert error.startswith("Invalid: ")
    assert reason in error


def test_overlong_expression_is_echoed_truncated() -> None:
    assert calc("1+" * 5000 + "1")["expression"].endswith("…")
    assert len(calc("1+" * 5000 + "1")["expression"]) == 501


def test_non_finite_results_are_errors_in_valid_json() -> None:
    for expression in ("1e308 * 10", "-1e308 - 1e308", "1e999", "degrees(1e308)"):
        result = calc(expression)  # _strict_json rejects NaN/Infinity tokens
        assert "result" not in result and result["error"].startswith("Invalid:")


# --- calculate: sandbox escapes and resource bombs -----------------------------------------------

ESCAPES = [
    # object-graph walks to reach builtins / subclasses
    "().__class__.__bases__[0].__subclasses__()",
    "[].__class__.__base__.__subclasses__()",
    "(1).__class__.__mro__[-1].__subclasses__()",
    "''.__class__.__mro__[1].__subclasses__()",
    "sqrt.__self__",
    "sqrt.__self__.__loader__",
    "abs.__self__.__import__('os')",
    "pow.__globals__",
    "round.__globals__['__builtins__']",
    "factorial.__code__",
    "1 .real",
    "(1).__class__",
    # builtins and dynamic code
    "__import__('os').system('id')",
    "__import__",
    "__builtins__",
    "__builtins__['eval']('1')",
    "eval('1+1')",
    "exec('x=1')",
    "compile('1', '', 'eval')",
    "getattr(1, '__class__')",
    "open('/etc/passwd').read()",
    "globals()",
    "locals()",
    "vars()",
    "dir()",
    "type(1)",
    "breakpoint()",
    "input()",
    "print(1)",
    "help()",
    "exit()",
    "import os",
    "1; import os",
    "1\nimport os",
    "1\x00",
    # unicode lookalikes
    "\uff45\uff56\uff41\uff4c('1')",  # fullwidth: NFKC-normalises to eval, which is not allowed
    "\uff3f\uff3fimport\uff3f\uff3f('os')",  # fullwidth low line
    "sqrt(\u0435)",  # Cyrillic ie, not the constant e
    "\u0455qrt(4)",  # Cyrillic dze in place of s
    # functions, comprehensions, assignment, unpacking
    "(lambda: 1)()",
    "(lambda f: f(f))(lambda f: f(f))",
    "[x for x in range(10**9)]",
    "{x: x for x in range(10)}",
    "{x for x in (1, 2)}",
    "sum(x for x in range(10**12))",
    "(x := 5)",
    "sqrt(*[4])",
    "max(*(1, 2))",
    "max(**{})",
    "round(2.5, ndigits=1)",
    "sqrt(4)(1)",
    "hypot(*range(10**9))",
    "min(range(10**9))",
    # non-numeric values and structures
    "'a' * 10**9",
    "[1] * 10**9",
    "b'abc'",
    "f'{1+1}'",
    "f'{().__class__}'",
    "'a' 'b'",
    "1j",
    "1j ** 2",
    "None",
    "True + 1",
    "...",
    "[1][0]",
    "{1: 2}",
    "{**{}}",
    "max([1, 2])",
    "max(())",
    # operators outside the allow-list
    "not 1",
    "1 if 1 else 2",
    "1 < 2",
    "1 and 2",
    "~1",
    "1 | 2",
    "1 << 10**9",
    "2 @ 3",
    # resource bombs
    "9**9**9**9",
    "9**9**9",
    "10**10**10",
    "2**2**2**2**2",
    "(10**3000)**4",
    "pow(10, 10**8)",
    "pow(pow(2, 5000), 3)",
    "pow(2, 10**9, 10**400)",
    "pow(2.5, 2, 7)",
    "factorial(10**6)",
    "factorial(1000) * factorial(1000)",
    "2**9999 * 2**9999",
    "round(1, -10**6)",
    "1e308 * 10",
    "99999999999999999999.0 ** 99999",
    "10.0 ** 400",
    "(-8) ** (1/3)",
    "(-" * 110 + "1" + ")" * 110,
    "(" * 250 + "1" + ")" * 250,
    "-" * 300 + "1",
    "sqrt(" * 120 + "1" + ")" * 120,
    "1" + "+1" * 240,
    "a.b.c",
]


@pytest.mark.parametrize("expression", ESCAPES)
def test_escape_or_bomb_is_refused_quickly(expression: str) -> None:
    started = time.monotonic()
    result = calc(expression)
    elapsed = time.monotonic() - started
    assert "result" not in result, result
    assert result["error"].startswith(("Invalid:", "Division by zero")), result
    assert elapsed < SAFETY_BOUND_S


def _fill(term: str, op: str = "+") -> str:
    """Repeat `term` joined by `op` as often as fits in 500 characters."""
    return op.join([term] * ((500 + len(op)) // (len(term) + len(op))))


@pytest.mark.parametrize(
    "expression",
    [
        _fill("pow(3,2**9999,2**80-1)"),
        _fill("pow(3,2**63,2**1023+1)"),
        _fill("factorial(1000)//factorial(998)"),
        _fill("2**9999//3**6000"),
        _fill("2**9999/3**6000"),
        _fill("round(2**9990,-400)"),
        _fill("log(factorial(1000))"),
    ],
)
def test_most_expensive_allowed_expressions_finish_quickly(expression: str) -> None:
    started = time.monotonic()
    result = calc(expression)
    assert "result" in result, result
    assert time.monotonic() - started < SAFETY_BOUND_S


def test_three_argument_pow_is_refused_when_too_costly() -> None:
    assert "exponent too large" in calc("pow(3, 2**1023, 2**1023 + 1)")["error"]


def test_escape_corpus_is_large() -> None:
    assert len(set(ESCAPES)) >= 50


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.e+-*/%()_ ,abcdfgilmnoprstqx'[]:=!<>", max_size=120))
def test_arbitrary_text_returns_json_quickly(expression: str) -> None:
    started = time.monotonic()
    out = tools.calculate({"expression": expression})
    assert time.monotonic() - started < SAFETY_BOUND_S
    result = _strict_json(out)
    assert ("result" in result) != ("error" in result)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_arbitrary_unicode_returns_json(expression: str) -> None:
    result = _strict_json(tools.calculate({"expression": expression}))
    assert ("result" in result) != ("error" in result)


def test_plugin_code_never_names_dynamic_code_builtins() -> None:
    forbidden = {"eval", "exec", "compile", "__import__", "open", "__builtins__"}
    for source in PLUGIN_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text("utf-8"))):
            if isinstance(node, ast.Name):
                assert node.id not in forbidden, f"{source.name} uses {node.id}"


# --- unit_convert --------------------------------------------------------------------------------


def test_guide_example_fahrenheit_to_celsius() -> None:
    assert convert(100, "F", "C") == {"input": "100 F", "result": 37.7778, "output": "37.7778 C"}


def test_guide_example_kilometres_to_miles() -> None:
    assert convert(5, "km", "mi")["result"] == pytest.approx(3.10686, abs=1e-5)


def test_guide_example_terabytes_to_gigabytes() -> None:
    result = convert(1.5, "TB", "GB")
    assert result["result"] == 1536
    assert result["input"] == "1.5 TB"


@pytest.mark.parametrize(
    ("value", "from_unit", "to_unit", "expected"),
    [
        (1, "mi", "ft", 5280),
        (12, "in", "ft", 1),
        (250, "cm", "m", 2.5),
        (1, "kg", "lb", 2.204623),
        (16, "oz", "lb", 1),
        (1500, "g", "kg", 1.5),
        (0, "C", "K", 273.15),
        (300, "K", "F", 80.33),
        (-40, "C", "F", -40),
        (2048, "KB", "MB", 2),
        (1, "GB", "B", 1024**3),
        (2, "hr", "min", 120),
        (1500, "ms", "s", 1.5),
        (1, "day", "hr", 24),
        (7, "m", "m", 7),
    ],
)
def test_every_unit_family_converts(
    value: float, from_unit: str, to_unit: str, expected: float
) -> None:
    assert convert(value, from_unit, to_unit)["result"] == pytest.approx(expected)


def test_temperature_is_rounded_to_four_places() -> None:
    assert convert(1, "F", "C")["result"] == -17.2222


def test_ratios_are_rounded_to_six_places() -> None:
    assert convert(1, "ft", "mi")["result"] == 0.000189


def test_units_match_case_insensitively_and_are_shown_canonically() -> None:
    assert convert(1, "KM", "M") == {"input": "1 km", "result": 1000.0, "output": "1000.0 m"}


def test_numeric_string_value_is_accepted() -> None:
    assert convert(" 100 ", "F", "C")["input"] == "100 F"


def test_mismatched_units_list_what_is_supported() -> None:
    error = convert(5, "km", "kg")["error"]
    assert error.startswith("Cannot convert km → kg. Supported units: ")
    for family, units in EXPECTED_UNITS.items():
        assert f"{family} ({', '.join(units)})" in error


def test_unknown_unit_is_an_error() -> None:
    assert convert(5, "furlong", "m")["error"].startswith("Cannot convert furlong → m.")


@pytest.mark.parametrize("value", [True, False, "abc", "1e400", "nan", "inf", [1], {"v": 1}])
def test_non_numeric_value_is_an_error(value: object) -> None:
    assert convert(value, "m", "km")["error"].startswith("Value must be")


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"value": 1, "from_unit": "m"},
        {"value": 1, "from_unit": " ", "to_unit": "km"},
        {"value": 1, "from_unit": 3, "to_unit": "km"},
    ],
)
def test_missing_arguments_are_an_error(args: dict[str, Any]) -> None:
    assert json.loads(tools.unit_convert(args)) == {"error": "Need value, from_unit, and to_unit"}


def test_temperature_below_absolute_zero_is_an_error() -> None:
    assert convert(-300, "C", "K")["error"] == "-300 C is below absolute zero"


def test_absolute_zero_itself_converts() -> None:
    assert convert(-459.67, "F", "K")["result"] == 0


def test_out_of_range_result_is_an_error() -> None:
    assert convert(1e308, "TB", "B")["error"] == "Result is out of range"


# --- schemas, manifest, registration ------------------------------------------------------------


@pytest.mark.parametrize("schema", [schemas.CALCULATE, schemas.UNIT_CONVERT])
def test_schema_meets_the_declaration_checklist(schema: dict[str, Any]) -> None:
    assert set(schema) == {"name", "description", "parameters"}
    assert "return" in schema["description"]  # says input -> output
    parameters = schema["parameters"]
    assert parameters["type"] == "object"
    assert set(parameters["required"]) <= set(parameters["properties"])
    for spec in parameters["properties"].values():
        assert spec["description"]


def test_unit_parameters_enumerate_every_supported_unit() -> None:
    every_unit = [unit for units in EXPECTED_UNITS.values() for unit in units]
    properties = schemas.UNIT_CONVERT["parameters"]["properties"]
    assert properties["from_unit"]["enum"] == every_unit
    assert properties["to_unit"]["enum"] == every_unit


def test_manifest_declares_what_register_provides() -> None:
    manifest = yaml.safe_load((PLUGIN_DIR / "plugin.yaml").read_text("utf-8"))
    assert manifest["name"] == "calculator"
    assert str(manifest["version"]) == "1.0.0"
    assert manifest["description"]
    assert manifest["provides_tools"] == ["calculate", "unit_convert"]
    assert manifest["provides_hooks"] == ["post_tool_call"]


class RecordingContext:
    """Stands in for the host's plugin context and records what register() asks for."""

    def __init__(self) -> None:
        self.tools: dict[str, dict[str, Any]] = {}
        self.hooks: list[tuple[str, Callable[..., object]]] = []
        self.skills: dict[str, Path] = {}

    def register_tool(
        self,
        name: str,
        toolset: str,
        schema: dict[str, Any],
        handler: Callable[..., str],
        **kwargs: Any,
    ) -> None:
        self.tools[name] = {"toolset": toolset, "schema": schema, "handler": handler}

    def register_hook(self, hook_name: str, callback: Callable[..., object]) -> None:
        self.hooks.append((hook_name, callback))

    def register_skill(self, name: str, path: Path, description: str = "") -> None:
        self.skills[name] = path


def test_register_adds_both_tools_to_the_calculator_toolset() -> None:
    ctx = RecordingContext()
    plugin.register(ctx)
    assert {n: t["toolset"] for n, t in ctx.tools.items()} == {
        "calculate": "calculator",
        "unit_convert": "calculator",
    }
    assert all(t["schema"]["name"] == n for n, t in ctx.tools.items())
    assert json.loads(ctx.tools["calculate"]["handler"]({"expression": "2**16"}))["result"] == 65536


def test_register_subscribes_post_tool_call() -> None:
    ctx = RecordingContext()
    plugin.register(ctx)
    assert [name for name, _ in ctx.hooks] == ["post_tool_call"]


def test_register_adds_the_bundled_skill() -> None:
    ctx = RecordingContext()
    plugin.register(ctx)
    assert list(ctx.skills) == ["math-checks"]
    text = ctx.skills["math-checks"].read_text("utf-8")
    front = yaml.safe_load(text.split("---")[1])
    assert front["name"] == "math-checks"
    assert front["description"]


def test_register_works_without_register_skill() -> None:
    class OldContext(RecordingContext):
        register_skill = None  # type: ignore[assignment]

    ctx = OldContext()
    plugin.register(ctx)
    assert set(ctx.tools) == {"calculate", "unit_convert"}


def test_call_log_hook_keeps_only_recent_calls() -> None:
    ctx = RecordingContext()
    plugin.register(ctx)
    hook = ctx.hooks[0][1]
    for i in range(plugin.CALL_LOG_SIZE + 50):
        hook(tool_name=f"tool{i}", args={}, result="{}", task_id="s1", duration_ms=3)
    calls = plugin.recent_calls()
    assert len(calls) == plugin.CALL_LOG_SIZE
    assert calls[-1] == {
        "tool": f"tool{plugin.CALL_LOG_SIZE + 49}",
        "session": "s1",
        "duration_ms": 3,
    }


# --- the guide's original, extracted from the seed ----------------------------------------------

GUIDE_SEED = guide_seed.find_guide_seed()
needs_seed = pytest.mark.skipif(GUIDE_SEED is None, reason=guide_seed.MISSING_REASON)


@pytest.fixture(scope="module")
def guide_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert GUIDE_SEED is not None
    folder: Path = guide_seed.extract_guide_calculator(GUIDE_SEED, tmp_path_factory.mktemp("guide"))
    return folder


@pytest.fixture(scope="module")
def guide_tools(guide_dir: Path) -> ModuleType:
    _load_package("hermesd_test_guide_calculator", guide_dir)
    return importlib.import_module("hermesd_test_guide_calculator.tools")


@needs_seed
def test_guide_extraction_writes_the_four_files(guide_dir: Path) -> None:
    assert sorted(p.name for p in guide_dir.iterdir()) == sorted(guide_seed.GUIDE_FILES)


@needs_seed
@pytest.mark.parametrize("name", ["schemas.py", "tools.py", "__init__.py"])
def test_guide_python_files_compile(guide_dir: Path, name: str) -> None:
    compile((guide_dir / name).read_text("utf-8"), name, "exec")


@needs_seed
def test_guide_manifest_matches_ours(guide_dir: Path) -> None:
    guide = yaml.safe_load((guide_dir / "plugin.yaml").read_text("utf-8"))
    ours = yaml.safe_load((PLUGIN_DIR / "plugin.yaml").read_text("utf-8"))
    for key in ("name", "version", "provides_tools", "provides_hooks"):
        assert guide[key] == ours[key]


@needs_seed
def test_guide_calculator_runs_its_own_example(guide_tools: ModuleType) -> None:
    assert json.loads(guide_tools.calculate({"expression": "2**16"}))["result"] == 65536


@needs_seed
@pytest.mark.parametrize(
    "expression",
    [
        "2**16",
        "sqrt(144)",
        "pi * 5**2",
        "sqrt(2*pi)",
        "round(2.567, 2)",
        "log10(1000) + e",
        "factorial(12) // 7 % 5",
        "max(1, 2) - min(3, 4) / 2",
        "1/0",
        "floor(2.5) * ceil(2.5)",
    ],
)
def test_bundled_calculator_agrees_with_the_guide(guide_tools: ModuleType, expression: str) -> None:
    # Benign inputs only: the guide's tools.calculate is eval-based.
    theirs = json.loads(guide_tools.calculate({"expression": expression}))
    ours = calc(expression)
    assert set(ours) == set(theirs)
    if "result" in ours:
        assert ours["result"] == pytest.approx(theirs["result"])
    else:
        assert ours == theirs


@needs_seed
@pytest.mark.parametrize(
    ("value", "from_unit", "to_unit"),
    [
        (100, "F", "C"),
        (5, "km", "mi"),
        (1.5, "TB", "GB"),
        (3, "lb", "kg"),
        (90, "min", "hr"),
        (20, "C", "K"),
    ],
)
def test_bundled_converter_agrees_with_the_guide(
    guide_tools: ModuleType, value: float, from_unit: str, to_unit: str
) -> None:
    args = {"value": value, "from_unit": from_unit, "to_unit": to_unit}
    theirs = json.loads(guide_tools.unit_convert(args))
    ours = convert(value, from_unit, to_unit)
    assert set(ours) == set(theirs)
    # The guide rounds mi and lb to 6 significant figures; we use the exact definitions.
    assert ours["result"] == pytest.approx(theirs["result"], rel=1e-5)
    assert ours["input"] == theirs["input"]
