"""A safe arithmetic evaluator: parse to an AST, check its shape, walk an allow-list of nodes.

Owns turning an expression string into a number without ever handing user text to eval/exec/
compile. Only numeric constants, allow-listed names, unary +/-, the arithmetic operators and calls
to allow-listed functions by plain name with positional arguments are accepted; anything else is
refused with a reason. Must not format results or know about JSON; that is tools.py.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable

from .bounds import (
    MAX_DEPTH,
    MAX_EXPRESSION_CHARS,
    MAX_NODES,
    EvaluationError,
    Number,
    check_number,
    checked_mul,
    checked_pow,
)
from .functions import CONSTANTS, FUNCTIONS

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: checked_mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: checked_pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_REFUSED: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "indexing",
    ast.Lambda: "lambda",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.JoinedStr: "f-strings",
    ast.NamedExpr: "assignment",
    ast.Starred: "unpacking",
    ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Set: "sets",
    ast.Dict: "dicts",
}


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression; raise EvaluationError, ZeroDivisionError, or similar."""
    return _walk(parse(expression).body)


# The model's expressions are compiled under this name; the compiler's SyntaxWarnings about
# them ("invalid decimal literal" for 1if 1 else 2) would land in the daemon's log.
_SOURCE = "<calculator expression>"
warnings.filterwarnings("ignore", category=SyntaxWarning, module=_SOURCE)


def parse(expression: str) -> ast.Expression:
    """Parse an expression and check its size and nesting, without evaluating anything."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise EvaluationError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, filename=_SOURCE, mode="eval")
    except SyntaxError as exc:
        raise EvaluationError(f"syntax error: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError):
        raise EvaluationError("expression cannot be parsed") from None
    _check_shape(tree)
    return tree


def _check_shape(tree: ast.Expression) -> None:
    # Iterative, so a pathological tree is measured without recursing into it.
    nodes = 0
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.expr):
            nodes += 1
            if nodes > MAX_NODES:
                raise EvaluationError(f"expression has more than {MAX_NODES} parts")
            if depth > MAX_DEPTH:
                raise EvaluationError(f"expression nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _walk(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.Name):
        return _name(node.id)
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise EvaluationError(f"operator {type(node.op).__name__} not allowed")
        return check_number(unary(_walk(node.operand)))
    if isinstance(node, ast.BinOp):
        binary = _BINARY.get(type(node.op))
        if binary is None:
            raise EvaluationError(f"operator {type(node.op).__name__} not allowed")
        # Operands first: 9**9**9**9 is refused at its innermost power, before anything big exists.
        left, right = _walk(node.left), _walk(node.right)
        return check_number(binary(left, right))
    if isinstance(node, ast.Call):
        return _call(node)
    raise EvaluationError(f"{_REFUSED.get(type(node), type(node).__name__)} not allowed")


def _constant(value: object) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvaluationError(f"{type(value).__name__} values not allowed, only numbers")
    if isinstance(value, float) and not math.isfinite(value):
        raise EvaluationError("number too large (floating-point overflow)")
    return check_number(value)


def _name(name: str) -> Number:
    if name in CONSTANTS:
        return CONSTANTS[name]
    if name in FUNCTIONS:
        raise EvaluationError(f"{name} is a function; call it as {name}(...)")
    raise EvaluationError(f"unknown name '{name}'")


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name):
        raise EvaluationError("only functions called by plain name are allowed")
    function = FUNCTIONS.get(node.func.id)
    if function is None:
        raise EvaluationError(f"unknown function '{node.func.id}'")
    if node.keywords:
        raise EvaluationError("keyword arguments not allowed")
    args = [_walk(arg) for arg in node.args]
    return check_number(function(*args))
