"""Schemas of user-defined ops (``kiln.library``): inferred from type hints or parsed from text.

PyTorch describes an op by a schema string, ``mylib::foo(Tensor x, float a=1.0) -> Tensor``:
``custom_op`` infers it from the function's annotations, ``Library.define`` reads it as text.
Both end here as a ``CustomSchema``: the ``inspect.Signature`` kiln's ``Op`` takes (its string
annotations mark the tensor and tensor-list parameters), the number of results, the mutated
arguments and PyTorch's text of the schema (for error messages and ``opcheck``).
"""

from __future__ import annotations

import ast
import collections.abc
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...runtime.device import device as Device
from ...runtime.dtypes import dtype as DType
from ...runtime.tensor import Tensor

__all__ = ["CustomSchema", "infer_schema", "parse_schema"]

# PyTorch's schema type for each annotation it accepts; optional and list forms are derived
_BASE_TYPES: dict = {
    Tensor: "Tensor",
    int: "SymInt",
    float: "float",
    bool: "bool",
    str: "str",
    DType: "ScalarType",
    Device: "Device",
}
_SCALAR = "Scalar"  # int | float | bool
_SCHEMA_WORDS = frozenset(
    {"Tensor", "SymInt", "int", "float", "bool", "str", "Scalar", "ScalarType", "Device",
     "Layout", "MemoryFormat", "Generator", "SymFloat", "SymBool", "Any"}
)  # fmt: skip


@dataclass(frozen=True)
class CustomSchema:
    """An op's schema: the Python signature, results and mutated arguments, and PyTorch's text."""

    signature: inspect.Signature
    text: str  # ``(Tensor x, float a=1.0) -> Tensor``, without the op's name
    results: int  # 0 (returns None), 1, or the length of a tuple; -1: a list of tensors
    tuple_result: bool
    mutated: tuple[str, ...]


def _list_item(annotation) -> object | None:
    origin = typing.get_origin(annotation)
    if origin in (list, collections.abc.Sequence, typing.Sequence):
        (item,) = typing.get_args(annotation) or (None,)
        return item
    return None


def _optional_of(annotation) -> object | None:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0]
    return None


def _is_scalar_union(annotation) -> bool:
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and set(typing.get_args(annotation)) == {
        int,
        float,
        bool,
    }


def _schema_type(annotation) -> str | None:
    """PyTorch's schema type of a parameter annotation, None when it accepts no such type."""
    if annotation in _BASE_TYPES:
        return _BASE_TYPES[annotation]
    if _is_scalar_union(annotation):
        return _SCALAR
    inner = _optional_of(annotation)
    if inner is not None:
        if _is_scalar_union(inner):
            return None
        base = _schema_type(inner)
        return None if base is None or base.endswith("?") else base + "?"
    item = _list_item(annotation)
    if item is not None:
        if item is Tensor:
            return "Tensor[]"
        if _optional_of(item) is Tensor:
            return "Tensor?[]"
        if item in (int, float, bool):
            return _BASE_TYPES[item] + "[]"
        if _is_scalar_union(item):
            return "Scalar[]"
    return None


def _return_types(annotation, where: str) -> tuple[str, int, bool]:
    if annotation is None or annotation is type(None):
        return "()", 0, False
    if typing.get_origin(annotation) is tuple:
        parts = [_return_types(a, where)[0] for a in typing.get_args(annotation)]
        return "(" + ", ".join(parts) + ")", len(parts), True
    if _list_item(annotation) is Tensor:
        return "Tensor[]", -1, False
    for kind in (Tensor, int, float, bool):
        if annotation is kind:
            return _BASE_TYPES[kind], 1, False
    raise ValueError(f"infer_schema(func): Return has unsupported type {annotation}. {where}")


def _annotation_for_op(schema_type: str) -> str:
    """The string annotation kiln's ``Op`` reads: ``TensorList`` marks a list of tensors."""
    return "TensorList" if schema_type.startswith("Tensor") and "[]" in schema_type else schema_type


# names a string annotation may use without the module defining them (PyTorch's list)
_ANNOTATION_NAMES = {"Tensor": Tensor, "Optional": typing.Optional, "Sequence": typing.Sequence,
                     "List": list, "Tuple": tuple, "Union": typing.Union,
                     "typing": typing}  # fmt: skip


def _resolved_hints(fn: Callable) -> dict:
    """The annotations as types: strings (``from __future__ import annotations``) evaluated in
    the function's module, with ``Tensor`` and typing's names there as PyTorch allows."""
    namespace = dict(_ANNOTATION_NAMES, **getattr(fn, "__globals__", {}))
    namespace.setdefault("Tensor", Tensor)
    hints = {}
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - the user's own text
            except Exception:
                pass  # left as text: refused below as a type no schema has
        hints[name] = annotation
    return hints


def infer_schema(
    prototype_function: Callable,
    /,
    *,
    mutates_args: Iterable[str] | str,
    op_name: str | None = None,
) -> str:
    """PyTorch's ``torch.library.infer_schema``: the schema text of a type-annotated function."""
    text = infer_custom_schema(prototype_function, mutates_args).text
    return f"{op_name}{text}" if op_name else text


def infer_custom_schema(fn: Callable, mutates_args: Iterable[str] | str) -> CustomSchema:
    """The schema of ``fn`` from its annotations, refusing (ValueError, PyTorch's wording) what
    PyTorch refuses: a parameter or the return without an annotation, or of a type no schema
    has, ``*args``/``**kwargs``, or a mutated argument the function does not take."""
    sig = inspect.signature(fn)
    where = f"Got func with signature {sig})"
    hints = _resolved_hints(fn)
    params, texts, keyword_only = [], [], False
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ValueError(f"infer_schema(func): We don't support varargs or varkwargs. {where}")
        if p.annotation is inspect.Parameter.empty:
            raise ValueError(
                f"infer_schema(func): Parameter {p.name} must have a type annotation. {where}"
            )
        annotation = hints.get(p.name, p.annotation)
        kind = _schema_type(annotation)
        if kind is None:
            raise ValueError(
                f"infer_schema(func): Parameter {p.name} has unsupported type {annotation}. {where}"
            )
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            texts.append("*")
            keyword_only = True
        default = "" if p.default is inspect.Parameter.empty else f"={p.default!r}"
        texts.append(f"{kind} {p.name}{default}")
        params.append(p.replace(annotation=_annotation_for_op(kind)))
    if sig.return_annotation is inspect.Signature.empty:
        raise ValueError(
            f"infer_schema(func): No return type annotation was provided. Please add one. {where}"
        )
    returns, results, as_tuple = _return_types(hints.get("return", sig.return_annotation), where)
    mutated = _mutated_names(mutates_args, [p.name for p in params], where)
    return CustomSchema(
        inspect.Signature(params), f"({', '.join(texts)}) -> {returns}", results, as_tuple, mutated
    )


def _mutated_names(mutates_args, names: list[str], where: str) -> tuple[str, ...]:
    if mutates_args == "unknown":
        return tuple(names)
    if isinstance(mutates_args, str):
        mutates_args = (mutates_args,)
    mutated = tuple(mutates_args)  # (None: TypeError, as PyTorch's)
    for name in mutated:
        if name not in names:
            raise ValueError(
                f"infer_schema(func): {name} in mutates_args were not found in the custom op's "
                f"signature. mutates_args should contain the names of all args that the custom op "
                f"mutates. {where}"
            )
    return mutated


_ARG = re.compile(r"^(?P<type>[A-Za-z]+(?:\([a-z]!?\))?(?:\?)?(?:\[\d*\])?\??)\s+(?P<name>\w+)"
                  r"(?:\s*=\s*(?P<default>.+))?$")  # fmt: skip


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _default_value(text: str, schema: str):
    words = {"True": True, "False": False, "None": None}
    if text in words:
        return words[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise RuntimeError(f"invalid default value {text!r} in schema: {schema}") from None


def _unknown_type(schema: str, word: str) -> RuntimeError:
    start = schema.find(word)
    marker = " " * start + "~" * len(word) + " <--- HERE"
    return RuntimeError(
        "\nunknown type specifier. Common valid schema types include Tensor, SymInt, int, float, "
        f"bool, Scalar\n{schema}\n{marker}\n"
    )


def parse_schema(schema: str) -> tuple[str | None, CustomSchema]:
    """``(name, schema)`` from PyTorch's schema text, ``foo(Tensor(a!) x, *, int n=2) ->
    Tensor`` (the name may be absent: ``custom_op(..., schema="(Tensor x) -> Tensor")``).
    Unknown types raise RuntimeError pointing at them, as PyTorch's parser does."""
    match = re.fullmatch(r"\s*([\w.:]*)\s*\((.*)\)\s*->\s*(.+?)\s*", schema)
    if match is None:
        raise RuntimeError(f"expected a schema of the form 'name(args) -> returns', got {schema!r}")
    name, arg_text, returns = match.groups()
    params, mutated, keyword_only = [], [], False
    for part in _split_top_level(arg_text):
        if part == "*":
            keyword_only = True
            continue
        arg = _ARG.match(part)
        if arg is None:
            raise RuntimeError(f"cannot parse argument {part!r} of schema: {schema}")
        kind = arg["type"]
        word = re.match(r"[A-Za-z]+", kind).group(0)
        if word not in _SCHEMA_WORDS:
            raise _unknown_type(schema, word)
        if "!" in kind:
            mutated.append(arg["name"])
        clean = re.sub(r"\([a-z]!?\)", "", kind)
        default = inspect.Parameter.empty
        if arg["default"] is not None:
            default = _default_value(arg["default"].strip(), schema)
        kind_of_parameter = (
            inspect.Parameter.KEYWORD_ONLY
            if keyword_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        params.append(
            inspect.Parameter(
                arg["name"],
                kind_of_parameter,
                default=default,
                annotation=_annotation_for_op(clean),
            )
        )
    outs = returns.strip()
    if outs.startswith("("):
        items = _split_top_level(outs[1:-1])
        results, as_tuple = len(items), bool(items)
    else:
        results, as_tuple = (-1 if outs.endswith("[]") else 1), False
    text = schema[schema.index("(") :].strip()
    return name or None, CustomSchema(
        inspect.Signature(params), text, results, as_tuple, tuple(mutated)
    )
