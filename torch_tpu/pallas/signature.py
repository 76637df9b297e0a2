"""From a JAX function's type annotations to a torch.library schema.

``jax.Array`` parameters become ``Tensor`` arguments; int/float/bool/str (and
lists/tuples/Optionals of them) become static arguments baked into the traced
computation.  The return annotation fixes the output structure, because the
schema must exist before any call shows us a shape.
"""
import collections.abc
import dataclasses
import inspect
import types
import typing

import jax

_SCALARS = {int: "int", float: "float", bool: "bool", str: "str"}


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    type: str                  # schema type: "Tensor", "int", "float[]", "int?" ...
    default: object = inspect.Parameter.empty
    kwarg_only: bool = False

    @property
    def is_tensor(self) -> bool:
        return self.type.startswith("Tensor")


def _is_array_type(tp) -> bool:
    return tp is jax.Array or (isinstance(tp, type) and issubclass(tp, jax.Array))


def _optional_inner(tp):
    """``X`` for ``Optional[X]`` / ``X | None``, else None."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1 and len(typing.get_args(tp)) == 2:
            return rest[0]
    return None


def _schema_type(tp, where: str) -> str:
    if _is_array_type(tp):
        return "Tensor"
    if tp in _SCALARS:
        return _SCALARS[tp]
    inner = _optional_inner(tp)
    if inner is not None:
        return _schema_type(inner, where) + "?"
    origin = typing.get_origin(tp)
    if origin in (list, tuple, collections.abc.Sequence):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if args and all(a == args[0] for a in args):
            elem = _schema_type(args[0], where)
            if not elem.endswith(("?", "[]")):
                return elem + "[]"
    raise ValueError(f"{where}: unsupported annotation {tp!r}; use jax.Array for tensors, "
                     "or int/float/bool/str (or lists/Optionals of them) for static arguments")


def _default_text(value, type_: str) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return repr(value).replace("'", '"')
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_default_text(v, type_) for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    raise ValueError(f"default value {value!r} cannot appear in a torch schema")


def params_of(fn, op_name: str) -> list:
    """The annotated parameters of ``fn``: ValueError when one lacks an annotation."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable string annotations: fall back to the raw ones
        hints = {n: p.annotation for n, p in sig.parameters.items()}
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"jax_op {op_name}: *args/**kwargs are not supported ({p.name})")
        tp = hints.get(p.name, inspect.Parameter.empty)
        if tp is inspect.Parameter.empty:
            raise ValueError(f"jax_op {op_name}: parameter {p.name!r} of {fn.__qualname__} needs a "
                             "type annotation (jax.Array for tensors, or a static type such as int)")
        params.append(Param(p.name, _schema_type(tp, f"jax_op {op_name}, parameter {p.name!r}"),
                            p.default, p.kind is p.KEYWORD_ONLY))
    return params


def returns_of(fn, op_name: str) -> str:
    """Schema return: "Tensor", "(Tensor, Tensor)" or "Tensor[]".  A missing
    annotation means one array (checked when the function is first traced)."""
    try:
        tp = typing.get_type_hints(fn).get("return", jax.Array)
    except Exception:
        tp = jax.Array
    if _is_array_type(tp):
        return "Tensor"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and args and Ellipsis not in args and all(_is_array_type(a) for a in args):
        if len(args) == 1:  # a one-element tuple schema reads as a plain Tensor: keep it a sequence
            return "Tensor[]"
        return "(" + ", ".join(["Tensor"] * len(args)) + ")"
    if origin in (list, tuple, collections.abc.Sequence) and args and _is_array_type(args[0]):
        return "Tensor[]"
    raise ValueError(f"jax_op {op_name}: unsupported return annotation {tp!r}; use jax.Array, "
                     "tuple[jax.Array, ...] or list[jax.Array]")


def schema(params, returns: str) -> str:
    parts, star = [], False
    for p in params:
        if p.kwarg_only and not star:
            parts.append("*")
            star = True
        text = f"{p.type} {p.name}"
        if p.default is not inspect.Parameter.empty:
            text += "=" + _default_text(p.default, p.type)
        parts.append(text)
    return "(" + ", ".join(parts) + ") -> " + returns


def output_count(returns: str):
    """How many outputs the schema fixes (None: a list of any length)."""
    if returns == "Tensor":
        return 1
    if returns == "Tensor[]":
        return None
    return returns.count("Tensor")
