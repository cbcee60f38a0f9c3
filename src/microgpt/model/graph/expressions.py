"""The symbolic sizes of a graph document: `4*d`, `d // heads`, `stream_dim`, read once and evaluated in a scope.

A size is a whole number, or a string of names, whole numbers, + - * // and parentheses. Names are the
dimensions in scope: `vocab` and `T` (bound by the run: the tokenizer and --seq-len), the document's `dims`,
and the parameters of each group a node sits in. A value that is a list (a group's `heads: [16, 16]`) is
passed through as it is; a name may stand for one.
"""

from __future__ import annotations

import ast
import operator
from functools import lru_cache

from microgpt.core.errors import ConfigError

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
MAX_EXPRESSION = 200  # characters: a size is short; a longer string is a mistake, not a size
MAX_SIZE = 2**31  # a float32 row this wide is 8 GiB: no size of a model here comes near (and a float holds it)


def evaluate(value, scope: dict, where: str):
    """The value of a parameter: a number or list as given, a name's value, or an arithmetic string's.

    Raises ConfigError naming `where` (the node path and parameter) for an unknown name or a malformed string.
    """
    if not isinstance(value, str):
        return _bounded(value, value, where)
    if len(value) > MAX_EXPRESSION:
        raise ConfigError(f"{where}: {value[:40]!r}... is {len(value)} characters long; a size is a short "
                          "expression such as 4*d")
    tree = _parsed(value.strip())
    if tree is None:
        raise ConfigError(f"{where}: {value!r} is not a size; write a whole number, a dimension's name or an "
                          "expression such as 4*d or d // 2")
    return _bounded(_value(tree.body, scope, where, value), value, where)


def _bounded(result, text, where: str):
    """The value, or a ConfigError where a whole number in it is past MAX_SIZE."""
    for number in result if isinstance(result, list) else [result]:
        if isinstance(number, int) and not isinstance(number, bool) and abs(number) > MAX_SIZE:
            raise ConfigError(f"{where}: {str(text)[:40]!r} is {'a size' if number == result else 'a list'} past "
                              f"{MAX_SIZE:,}; no layer is that wide")
    return result


@lru_cache(maxsize=4096)  # a document repeats its few sizes at every node; an editor checks it after each edit
def _parsed(text: str) -> ast.Expression | None:
    """The expression's tree (only read, never changed), or None where it is not Python syntax."""
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError:
        return None


def _value(node, scope: dict, where: str, text: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in scope:
            known = ", ".join(sorted(scope)) or "none"
            raise ConfigError(f"{where}: {text!r} names {node.id!r}, which is not bound here (bound: {known}); bind "
                              "it in the document's dims or the enclosing group's params")
        return scope[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left, scope, where, text), _value(node.right, scope, where, text)
        if not (isinstance(left, int) and isinstance(right, int)):
            raise ConfigError(f"{where}: {text!r} does arithmetic on a list; only whole numbers add and multiply")
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            raise ConfigError(f"{where}: {text!r} divides by zero")
        return _OPERATORS[type(node.op)](left, right)
    raise ConfigError(f"{where}: {text!r} is not a size; only whole numbers, names, + - * // and parentheses "
                      "are allowed")


def word(value, scope: dict):
    """A parameter that takes a word (attention's mask "gap", a prior's kind): a name bound in scope (a group's
    param) stands for its value; any other string is the word itself."""
    if isinstance(value, str) and value in scope:
        return scope[value]
    return value


def group_value(value, scope: dict, where: str):
    """A group's param: a size as `evaluate` reads it, or, where the string is one unbound name, a word that
    the group's nodes pass on (mask: gap)."""
    try:
        return evaluate(value, scope, where)
    except ConfigError:
        if isinstance(value, str) and value.isidentifier() and value not in scope:
            return value
        raise
