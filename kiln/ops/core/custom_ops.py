"""Ops defined by user code: the machinery behind ``kiln.library`` (PyTorch's ``torch.library``).

A custom op is an ordinary ``Op`` in the registry, so every layer treats it as it treats
kiln's own: eager calls dispatch to its kernel (the user's function, run below autograd), its
fake function is its meta (shapes for capture and AOT tracing), and its ``register_autograd``
pair becomes its derivative. Having no decomposition and no lowering, a compiled graph keeps it
as one node and the inductor runs its kernel as an extern call. ``kiln.ops.<namespace>.<name>``
finds it, as ``torch.ops.mylib.foo`` does.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ...autograd.function import FunctionCtx
from ...runtime.state import per_thread
from ...runtime.tensor import Tensor
from . import registry
from .custom_schema import CustomSchema, infer_custom_schema, parse_schema
from .registry import OPS, Op

__all__ = [
    "CustomOpDef",
    "custom_op",
    "register_fake",
    "register_autograd",
    "register_kernel",
    "Library",
    "OpNamespace",
    "namespace",
    "lookup",
    "remove",
    "get_ctx",
    "FakeImplCtx",
]

# namespace name -> its ``kiln.ops.<namespace>`` object
_NAMESPACES: dict[str, OpNamespace] = {}


def _split_name(qualname: str) -> tuple[str, str]:
    namespace_name, sep, name = qualname.partition("::")
    if not sep or not namespace_name or not name or "." in name:
        raise ValueError(
            f"Expected the op name in the form 'namespace::name' (like 'mylib::foo'), got "
            f"{qualname!r}"
        )
    return namespace_name, name


class OpNamespace(types.ModuleType):
    """``kiln.ops.<namespace>``: the custom ops defined in one namespace, as its attributes (a
    module, so that capture reads ``kiln.ops.mylib.foo`` as it reads ``kiln.nn.functional``)."""

    def __init__(self, name: str):
        super().__init__(f"kiln.ops.{name}")
        self._ops: dict[str, CustomOpDef] = {}

    def add(self, short: str, op: CustomOpDef) -> None:
        self._ops[short] = op
        setattr(self, short, op)

    def remove(self, short: str) -> CustomOpDef:
        delattr(self, short)
        return self._ops.pop(short)

    def __getattr__(self, name: str):
        raise AttributeError(
            f"'_OpNamespace' '{self.__name__.rpartition('.')[2]}' object has no attribute '{name}'"
        )

    def __repr__(self) -> str:
        return self.__name__


def namespace(name: str) -> OpNamespace | None:
    """The namespace object of ``kiln.ops.<name>``, None where no op was defined in it."""
    return _NAMESPACES.get(name)


def lookup(qualname: str) -> CustomOpDef:
    """The custom op named ``namespace::name``; RuntimeError where none is defined."""
    namespace_name, name = _split_name(qualname)
    found = _NAMESPACES.get(namespace_name)
    if found is None or name not in found._ops:
        raise RuntimeError(f"operator {qualname} does not exist")
    return found._ops[name]


def _call_user(fn: Callable, schema: inspect.Signature, args: tuple):
    """Call ``fn`` with the canonical argument tuple, keyword-only parameters by keyword."""
    positional, keywords = [], {}
    for value, p in zip(args, schema.parameters.values()):
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            keywords[p.name] = value
        else:
            positional.append(value)
    return fn(*positional, **keywords)


class CustomOpDef(Op):
    """A user-defined op (what ``custom_op`` returns and ``kiln.ops.mylib.foo`` is). Calling
    it dispatches like any op; ``register_fake``, ``register_autograd`` and ``register_kernel``
    attach its pieces with PyTorch's signatures."""

    user_defined = True

    def __init__(self, qualname: str, schema: CustomSchema, doc: str = ""):
        namespace_name, short = _split_name(qualname)

        def signature_holder(): ...

        signature_holder.__signature__ = schema.signature
        signature_holder.__doc__ = doc
        super().__init__(f"{namespace_name}.{short}", signature_holder, "custom", False, False)
        self._qualname = qualname
        self.schema = schema
        self.implementations: dict[str, Callable] = {}
        self.fake = None
        self.saves_output = True  # ``setup_context`` is handed the output
        self.derivative = self._no_formula
        self.meta = self._no_fake
        self.grad_fn_name = f"GeneratedBackwardFor_{namespace_name}_{short}_defaultBackward"

    @property
    def qualname(self) -> str:
        return self._qualname

    # PyTorch's names: ``foo._name``, ``torch.ops.mylib.foo.default``
    @property
    def _name(self) -> str:
        return self.qualname

    @property
    def default(self) -> CustomOpDef:
        return self

    @property
    def _opoverload(self) -> CustomOpDef:
        return self

    @property
    def capturable(self) -> bool:
        """An op mutating its inputs runs eagerly in compiled code (behind a graph break):
        functionalization has no out-of-place twin of it."""
        return not self.schema.mutated

    def __repr__(self) -> str:
        return f"<CustomOpDef({self.qualname})>"

    def __call__(self, *args, **kwargs):
        try:
            bound = self.bind(*args, **kwargs)
        except TypeError as error:  # PyTorch's argument parser raises RuntimeError
            raise RuntimeError(
                f"{self.qualname}() got arguments it does not take: {error}. Declaration: "
                f"{self.qualname}{self.schema.text}"
            ) from None
        for position in self.tensor_positions:
            value = bound[position]
            if value is not None and not isinstance(value, Tensor):
                raise RuntimeError(
                    f"{self.qualname}() expected a Tensor for argument "
                    f"'{self.param_names[position]}' but got {type(value).__name__}. "
                    f"Declaration: {self.qualname}{self.schema.text}"
                )
        return registry._dispatch(self, bound)

    def __reduce__(self):
        return (lookup, (self.qualname,))

    # ---- the pieces, with PyTorch's signatures
    def register_kernel(self, device_types: str | Sequence[str] | None, fn: Callable | None = None):
        """The implementation for ``device_types`` ("cpu", or None for every device)."""

        def deco(impl):
            kinds = (
                [device_types]
                if device_types is None or isinstance(device_types, str)
                else device_types
            )
            for kind in kinds:
                self.implementations[kind] = impl
            self.kernel = self._run_implementation
            return impl

        return deco(fn) if fn is not None else deco

    def register_fake(self, fn: Callable | None = None, /, *, _stacklevel: int = 1):
        """Shapes and dtypes without data: the op's meta, what capture and AOT tracing run."""

        def deco(fake):
            self.fake = fake
            self.meta = lambda *args: _call_user(fake, self.schema.signature, args)
            return fake

        return deco(fn) if fn is not None else deco

    def register_vmap(self, func: Callable | None = None, /):
        """Accepted and kept: ``kiln.vmap`` runs a function once per batch entry, so the op
        needs no batching rule (the results are the rule's)."""

        def deco(rule):
            self.vmap_rule = rule
            return rule

        return deco(func) if func is not None else deco

    def register_autograd(
        self, backward: Callable, /, *, setup_context: Callable | None = None
    ) -> None:
        """``backward(ctx, *grads)`` returns a gradient per input; ``setup_context(ctx,
        inputs, output)`` saves what it needs on ``ctx``. kiln runs ``setup_context`` when the
        gradient is taken, from the inputs and output the node kept: the pair stays a function
        of them, as PyTorch requires."""
        if self.schema.mutated:
            raise RuntimeError(
                f"{self.qualname}: register_autograd is not supported for ops that mutate their "
                "inputs in kiln; write the op without mutation or use autograd.Function"
            )
        # as PyTorch's: ``inputs`` holds the positional arguments; keyword-only ones go to
        # ``setup_context`` as ``keyword_only_inputs`` and get no gradient from ``backward``
        keyword_only = [
            p.name
            for p in self.schema.signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        count = len(self.param_names) - len(keyword_only)

        def derivative(node, *grads):
            ctx = FunctionCtx()
            ctx.needs_input_grad = node.needs_input_grad[:count]
            args = node.args
            if setup_context is not None:
                if keyword_only:
                    named = dict(zip(keyword_only, args[count:]))
                    setup_context(ctx, args[:count], node.out, keyword_only_inputs=named)
                else:
                    setup_context(ctx, args, node.out)
            result = backward(ctx, *grads)
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            if len(result) != count:
                raise RuntimeError(
                    f"{self.qualname}: the backward returned {len(result)} gradients, expected "
                    f"{count}: one per positional input (None for those that are not tensors)"
                )
            return result + (None,) * len(keyword_only)

        self.derivative = derivative

    # ---- how it runs
    def _run_implementation(self, *args):
        impl = self.implementations.get("cpu", self.implementations.get(None))
        if impl is None:
            raise NotImplementedError(f"{self.qualname} has no kernel registered for device cpu")
        state = per_thread.state
        enabled = state.grad_enabled
        state.grad_enabled = False  # PyTorch runs the implementation below autograd
        try:  # (inputs seen as not requiring grad, as below PyTorch's autograd key)
            out = _call_user(impl, self.schema.signature, tuple(_detached(a) for a in args))
        finally:
            state.grad_enabled = enabled
        self._check_no_alias(args, out)
        for name in self.schema.mutated:
            value = args[self.param_names.index(name)]
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, Tensor):
                    t._get_storage().version += 1
        return out

    def _check_no_alias(self, args: tuple, out) -> None:
        """PyTorch's rule: a result is never an input nor a view of one (autograd would
        record the op's history on the caller's tensor)."""
        inputs = [t for t in _flat_tensors(args) if t._data is not None]
        outputs = [t for t in _flat_tensors((out,)) if t._data is not None]
        for i, result in enumerate(outputs):
            others = inputs + outputs[:i]
            if any(np.may_share_memory(result._data, other._data) for other in others):
                raise RuntimeError(
                    f"{self.qualname}: The output of this custom operator (1) must not also be "
                    "an input to this custom operator and (2) may not alias any inputs to this "
                    "custom operator or other returns. Please instead return a clone of the "
                    "offending output tensor(s) (e.g. return x.clone())."
                )

    def _no_fake(self, *args):
        raise NotImplementedError(  # (a RuntimeError; capture breaks the graph at it)
            f"There was no fake impl registered for {self!r}. This is necessary for "
            "kiln.compile/export/fx tracing to work. Please use `register_fake` to add one."
        )

    def _no_formula(self, node, *grads):
        raise RuntimeError(
            f"Trying to backward through {self.name}.default but no autograd formula was "
            "registered. Please use register_autograd to add one."
        )


class FakeImplCtx:
    """What ``get_ctx()`` gives a fake function: sizes only the kernel's data decides."""

    def new_dynamic_size(self, *, min: int = 0, max: int | None = None):
        """A size the fake cannot know (``nonzero``'s row count): a fresh symbol while
        capturing, in ``[min, max]``."""
        from ..indexing.subscript import data_dependent_size

        size = data_dependent_size("a custom op's data-dependent size", max)
        if min > 0:
            from ...runtime.symbolic import check

            check(size >= min)
        return size


def get_ctx() -> FakeImplCtx:
    """``torch.library.get_ctx()``, for a fake function."""
    return FakeImplCtx()


def _flat_tensors(values) -> list[Tensor]:
    found = []
    for value in values:
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_flat_tensors(value))
    return found


def _detached(value):
    if isinstance(value, Tensor):
        return value.detach() if value._requires_grad else value
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value


def _define(qualname: str, schema: CustomSchema, doc: str = "") -> CustomOpDef:
    """Register the op (a name defined again replaces the old op, as PyTorch's custom_op)."""
    namespace_name, short = _split_name(qualname)
    op = CustomOpDef(qualname, schema, doc)
    OPS[op.name] = op
    _NAMESPACES.setdefault(namespace_name, OpNamespace(namespace_name)).add(short, op)
    return op


def custom_op(
    name: str,
    fn: Callable | None = None,
    /,
    *,
    mutates_args: Iterable[str] | str,
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
):
    """PyTorch's ``torch.library.custom_op``: ``fn`` (type-annotated) becomes op ``name``."""

    def deco(impl):
        if schema is None:
            inferred = infer_custom_schema(impl, mutates_args)
        else:
            inferred = parse_schema(schema)[1]
        op = _define(name, inferred, impl.__doc__ or "")
        op.register_kernel(device_types, impl)
        return op

    return deco(fn) if fn is not None else deco


def _resolve(op) -> CustomOpDef:
    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, str):
        return lookup(op)
    raise TypeError(f"expected a custom op or its 'namespace::name', got {type(op).__name__}")


def register_fake(op, fn: Callable | None = None, /, *, lib=None, _stacklevel: int = 1):
    """``torch.library.register_fake``: the fake function of op ``op`` (an op or its name)."""
    return _resolve(op).register_fake(fn)


def register_autograd(
    op, backward: Callable, /, *, setup_context: Callable | None = None, lib=None
) -> None:
    """``torch.library.register_autograd``: the backward (and setup) of op ``op``."""
    _resolve(op).register_autograd(backward, setup_context=setup_context)


def register_kernel(
    op, device_types: str | Sequence[str] | None, fn: Callable | None = None, /, *, lib=None
):
    """``torch.library.register_kernel``: an implementation of op ``op`` for devices."""
    return _resolve(op).register_kernel(device_types, fn)


# PyTorch's dispatch keys ``Library.impl`` takes, as device types
_DISPATCH_KEYS = {"CPU": "cpu", "CUDA": "cuda", "CompositeExplicitAutograd": None,
                  "CompositeImplicitAutograd": None, "Meta": "meta", "": None}  # fmt: skip


class Library:
    """PyTorch's older ``torch.library.Library(ns, "DEF" | "FRAGMENT" | "IMPL")``: ``define``
    schemas, then ``impl`` kernels per dispatch key (``"Meta"`` registers the fake)."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = ""):
        if kind not in ("DEF", "FRAGMENT", "IMPL"):
            raise ValueError(f"Unsupported kind: {kind}")
        self.ns = ns
        self.kind = kind
        self.dispatch_key = dispatch_key
        self._defined: list[str] = []

    def define(self, schema: str, alias_analysis: str = "", *, tags=()) -> str:
        name, parsed = parse_schema(schema)
        if name is None:
            raise RuntimeError(f"a schema given to Library.define needs an op name: {schema!r}")
        qualname = name if "::" in name else f"{self.ns}::{name}"
        if qualname in self._defined or any(
            qualname == getattr(op, "qualname", None) and op.kernel is not None
            for op in OPS.values()
        ):
            raise RuntimeError(
                f"Tried to register an operator ({qualname}{parsed.text}) with the same name and "
                "overload name multiple times. Each overload's schema should only be registered "
                "with a single call to def()."
            )
        _define(qualname, parsed)
        self._defined.append(qualname)
        return name

    def impl(self, op_name, fn: Callable, dispatch_key: str = "", *, with_keyset=False) -> None:
        key = dispatch_key or self.dispatch_key
        if key not in _DISPATCH_KEYS and key != "Autograd":
            raise ValueError(f"unknown dispatch key {key!r}")
        name = op_name if isinstance(op_name, str) else op_name.qualname
        op = lookup(name if "::" in name else f"{self.ns}::{name}")
        if key == "Meta":
            op.register_fake(fn)
        else:
            op.register_kernel(_DISPATCH_KEYS.get(key), fn)

    def _destroy(self) -> None:
        for qualname in self._defined:
            remove(qualname)
        self._defined = []


def remove(qualname: str) -> None:
    """Forget custom op ``namespace::name`` (a test's ops, a ``Library`` destroyed)."""
    namespace_name, short = _split_name(qualname)
    op = _NAMESPACES[namespace_name].remove(short)
    OPS.pop(op.name, None)
