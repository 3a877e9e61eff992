"""The operator registry: one ``Op`` per operator, holding every piece the stack needs.

An op is declared once with a schema (a Python signature whose annotations say which arguments
are tensors). Calls are bound to a canonical positional tuple by a generated function, so the
kernel, the meta function, the derivative and the decomposition all see the same arguments, and
graph nodes record them the same way. Pieces are attached by decorators in the files that define
each family of ops (tables, not ``if name == ...`` chains):

    @defop(kind="pointwise")
    def add(self: Tensor, other: TensorOrScalar, *, alpha: Scalar = 1): ...

    @add.register_kernel       # CPU kernel over numpy
    @add.register_meta         # shapes/dtypes/strides without data
    @add.register_derivative   # backward, written in kiln ops
    @add.register_decomposition

What the rest of the stack needs to know about an op is declared here too, as ``defop``
arguments, never in tables keyed by op name elsewhere: ``autocast`` (what ``kiln.autocast`` does
to its inputs, per device type; see ``amp.autocast_mode``); ``complex_refused``, ``holomorphic``
and ``complex_derivative`` (what it does with complex inputs; see ``complex_support``, which the
registration decorators apply); ``grad_fn_name`` (PyTorch's name for its autograd node, see
``grad_fn_naming``); ``aliases`` (PyTorch's other names for it, as ``kiln.<alias>`` and
``Tensor.<alias>``) and ``inplace_method`` (whether ``Tensor.<name>_`` exists beyond the pointwise
ops, which all have one). An op whose first parameter is ``self`` is the Tensor method of its
name (``core.methods``).
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable

from . import complex_support

__all__ = [
    "Op",
    "defop",
    "OPS",
    "get_op",
    "list_ops",
    "METHODS",
    "tensor_method",
    "NAMESPACE",
    "torch_function",
]

OPS: dict[str, Op] = {}
# Tensor methods written as Python functions (argument parsing around ops); installed on Tensor
METHODS: dict[str, Callable] = {}


# ``kiln.<name>`` functions written in Python (argument parsing around ops)
NAMESPACE: dict[str, Callable] = {}


def torch_function(*names: str):
    """Register a function as ``kiln.<name>`` for each name given (default: its own name)."""

    def deco(fn):
        for n in names or (fn.__name__.lstrip("_"),):
            NAMESPACE[n] = fn
        return fn

    return deco


def tensor_method(*names: str):
    """Register a function as ``Tensor.<name>`` for each name given (default: its own name)."""

    def deco(fn):
        for n in names or (fn.__name__.lstrip("_"),):
            METHODS[n] = fn
        return fn

    return deco


# parameters annotated with "Tensor..." carry tensors; "TensorList"/"list[Tensor...]" lists of them


class Op:
    """An operator: schema, kernels, meta, derivative, decomposition and flags."""

    __slots__ = (
        "name",
        "signature",
        "bind",
        "param_names",
        "tensor_positions",
        "list_positions",
        "edge_arg_positions",
        "tensor_edge_positions",
        "tensor_positions_lead",
        "self_only",
        "differentiable",
        "kernel",
        "meta",
        "derivative",
        "jvp",
        "decomposition",
        "kind",
        "is_prim",
        "is_view",
        "inplace",
        "functional",
        "inplace_variant",
        "inplace_kernel",
        "out_kernel",
        "recording_kernel",
        "saves_inputs",
        "saves_input_layouts",
        "saves_output",
        "ignored_grads",
        "returns",
        "result_type",
        "nondeterministic_seeded",
        "autocast",
        "complex_refused",
        "holomorphic",
        "complex_derivative",
        "grad_fn_name",
        "node_class",
        "aliases",
        "inplace_method",
        "recomputable",
        "out_exact_dtype",
        "overlap_refused",
        "doc",
        "overloadpacket",
        "__weakref__",
        "__dict__",
    )

    # defined by user code (``kiln.library``): kiln's caches cannot vouch for what it computes
    user_defined = False
    # capture may record it as a graph node (an op mutating inputs it cannot say which runs
    # eagerly, behind a graph break)
    capturable = True

    def __init__(self, name: str, schema: Callable, kind: str, prim: bool, view: bool):
        self.name = name
        self.signature = inspect.signature(schema)
        self.param_names = tuple(self.signature.parameters)
        self.bind = _make_binder(name, self.signature)
        tensor_positions, list_positions = [], []
        for i, p in enumerate(self.signature.parameters.values()):
            ann = (
                p.annotation
                if isinstance(p.annotation, str)
                else getattr(p.annotation, "__name__", "")
            )
            if "TensorList" in ann or "list[Tensor" in ann:
                list_positions.append(i)
            elif "Tensor" in ann:
                tensor_positions.append(i)
        self.tensor_positions = tuple(tensor_positions)
        self.list_positions = tuple(list_positions)
        self.edge_arg_positions = tuple(sorted(tensor_positions + list_positions))
        # an autograd node's (argument position, -1) per edge when every tensor parameter got
        # a tensor (lists excepted): made once here rather than per recorded call
        self.tensor_edge_positions = tuple((p, -1) for p in self.tensor_positions)
        # the tensor parameters come first (``add(self, other, *, alpha)``): a derivative's
        # leading gradients are then the node's edges' gradients as they stand
        self.tensor_positions_lead = self.tensor_positions == tuple(range(len(tensor_positions)))
        # ``self`` is the only tensor parameter (``exp``, ``sum``, ``view``): dispatch's
        # one-tensor path (``dispatch.dispatch_self_only``) decides such a call
        self.self_only = self.tensor_positions == (0,) and not self.list_positions
        self.differentiable = True
        self.kernel = None
        self.meta = None
        self.derivative = None
        # ``jvp(args, tangents, out) -> tangent``: the forward-mode derivative (``tangents``
        # lines up with ``args``, None where an argument has none); None: forward AD gets it
        # from ``derivative`` by the double-vjp trick (``forward_grad``)
        self.jvp = None
        self.decomposition = None
        self.kind = kind
        self.is_prim = prim
        self.is_view = view
        self.inplace = False  # mutates its first argument
        self.functional = None  # for an in-place op: its out-of-place twin
        self.inplace_variant = None
        # ``kernel(self, *rest) -> bool``: writes the in-place variant's result straight into
        # ``self``'s buffer where it can (True), else leaves it to the compute-then-copy path
        self.inplace_kernel = None
        # ``kernel(out, *args) -> bool``: writes a call's result straight into its ``out=``
        # tensor where it can (True: the result has ``out``'s dtype and shape), else leaves it
        # to the compute-then-copy path (``out_arguments.call_with_out``)
        self.out_kernel = None
        # ``kernel(*args) -> (out, saved)``: what autograd runs instead of ``kernel`` when it
        # records a node for an eager CPU call; ``saved`` (anything, or None) is kept on the node
        # for the derivative as ``ctx.kernel_saved``, so a forward can hand its backward an
        # intermediate (softmax probabilities) that would otherwise be recomputed
        self.recording_kernel = None
        # ``rebuild(saved) -> Tensor``: where ``saved`` holds what the output is computed from,
        # the node keeps ``saved`` alone and rebuilds the output only if the derivative asks
        # for it (log_softmax keeps exp(x - max), not also the log-probabilities)
        self.output_from_kernel_saved = None
        # where PyTorch's result has a fixed layout that the op's decomposition (pointwise ops
        # keeping the input's) need not give: "contiguous", or "suggested" (the input's
        # suggested memory format); a traced decomposition's results are laid out so, as the
        # meta's and the kernel's (a later ``view`` of them must work compiled too); or a
        # function of the op's arguments returning one of those
        self.result_layout = None
        self.saves_inputs = None  # None: all tensor inputs; else a tuple of positions
        # the unsaved inputs keep their strides and storage offset too (``as_strided``'s
        # gradient needs its input's layout, never its values, which an in-place write through
        # the view changes)
        self.saves_input_layouts = False
        self.saves_output = False
        # output positions whose gradient the derivative never reads: the engine passes None
        # there instead of making zeros for an output nothing used (batch norm's statistics)
        self.ignored_grads = frozenset()
        self.returns = None  # namedtuple class for multi-output ops
        self.result_type = None
        self.nondeterministic_seeded = False
        # device type -> autocast policy ("lower", "fp32", ...; see amp.autocast_mode), or None
        self.autocast = None
        # complex inputs: (exception type, message) PyTorch refuses them with; whether the real
        # derivative formula is holomorphic; a formula of its own for complex gradients
        self.complex_refused = None
        self.holomorphic = False
        self.complex_derivative = None
        # PyTorch's name for its grad_fn node (a string or a function of the call's arguments);
        # None: ``<Name>Backward0``
        self.grad_fn_name = None
        # the autograd node class of every call (``MulBackward0``) where the name does not
        # depend on the arguments; filled on first use (``autograd.graph.op_node_class``)
        self.node_class = None
        self.aliases = ()  # PyTorch's other names for the op (``absolute`` for ``abs``)
        self.inplace_method = False  # Tensor.<name>_ for a non-pointwise op (``index_put_``)
        # whether the min-cut partitioner may recompute it in the backward instead of saving
        # its result; None: the partitioner's rule by kind (pointwise, views, creation)
        self.recomputable = None
        # ``out=`` must have the result's dtype, not one it casts to (PyTorch's abs, neg,
        # rounding ops and bitwise_not check so)
        self.out_exact_dtype = False
        # positions of the arguments its in-place variant may not share any memory with
        # ``self``, not even all of it (PyTorch's assert_no_overlap: ``x.index_add_(0, i, x)``)
        self.overlap_refused = ()
        self.doc = (schema.__doc__ or "").strip()

    def refuse_overlap(self, *names: str) -> None:
        """The in-place variant raises PyTorch's overlap error where the arguments ``names``
        share memory with ``self`` at all (the kernel reads them while it writes ``self``)."""
        self.overlap_refused = tuple(self.param_names.index(name) for name in names)

    def __call__(self, *args, **kwargs):
        if "out" in kwargs:  # ``kiln.mul(a, b, out=c)``: compute, then write into ``out``
            if kwargs["out"] is None:  # (a wrapper passing its own ``out=None`` on)
                del kwargs["out"]
            else:
                return _call_with_out(self, args, kwargs)
        if self.self_only:
            return _dispatch_self_only(self, self.bind(*args, **kwargs))
        return _dispatch(self, self.bind(*args, **kwargs))

    def __repr__(self) -> str:
        return f"kiln.ops.{self.name}"

    @property
    def qualname(self) -> str:
        """PyTorch's ``namespace::name`` of the op (``aten::add``), as the profiler names it."""
        return f"aten::{self.name}"

    def __reduce__(self):
        return (get_op, (self.name,))

    # ---- registration decorators (each returns the function so they can stack)
    def canonicalize_args(self, fn: Callable) -> Callable:
        """Rewrite the bound argument tuple of every call (``fn(args) -> args``) before dispatch:
        spellings PyTorch also accepts become the one the kernels, metas and derivatives know
        (the in-place variant made later inherits it)."""
        plain = self.bind

        def bind(*args, **kwargs):
            return fn(plain(*args, **kwargs))

        self.bind = bind
        self.canonical_args = fn
        return fn

    def register_kernel(self, fn: Callable) -> Callable:
        self.kernel = self._refusing_complex(fn)
        return fn

    def register_recording_kernel(
        self, fn: Callable | None = None, *, output_from_saved: Callable | None = None
    ):
        def deco(f):
            self.recording_kernel = self._refusing_complex(f)
            self.output_from_kernel_saved = output_from_saved
            return f

        return deco(fn) if fn is not None else deco

    def register_meta(self, fn: Callable) -> Callable:
        self.meta = self._refusing_complex(fn)
        return fn

    def check_in_meta(self, check: Callable) -> None:
        """Run ``check(*args)``, argument checks the kernel makes, in front of the meta as well:
        capture and AOT tracing run metas on fake tensors, and a check only the kernel made let
        a compiled program return a result where eager raises (``-bool_tensor``, ``clamp()``)."""
        inner = self.meta

        def meta(*args):
            check(*args)
            return inner(*args)

        self.meta = meta

    def register_derivative(
        self, fn: Callable | None = None, *, save_inputs=None, save_output=False, ignores=(),
        save_input_layouts: bool = False,
    ):  # fmt: skip
        """``ignores``: output positions whose incoming gradient ``fn`` never reads (it gets
        None there when no gradient reached that output). ``save_output``: True saves every
        output for ``fn`` (``c.out``), a tuple of positions only those (the others read as
        None, and in-place changes to them do not fail the backward)."""

        def deco(f):
            if self.complex_derivative is not None:
                self.derivative = complex_support.complex_formula(f, self.complex_derivative)
            elif self.holomorphic:
                self.derivative = complex_support.conjugate_wirtinger(f)
            else:
                self.derivative = f
            self.saves_inputs = save_inputs
            self.saves_input_layouts = save_input_layouts
            self.saves_output = save_output
            self.ignored_grads = frozenset(ignores)
            return f

        return deco(fn) if fn is not None else deco

    def register_jvp(self, fn: Callable) -> Callable:
        self.jvp = fn
        return fn

    def register_decomposition(self, fn: Callable) -> Callable:
        decomposition = self._refusing_complex(fn)
        if self.grad_fn_name is not None and self.kernel is None:
            # a composite records no node of its own: its name goes to its result's node
            from .grad_fn_naming import renaming

            decomposition = renaming(decomposition, self.grad_fn_name)
        self.decomposition = decomposition
        return fn

    def register_complex(
        self, *, kernel=None, meta=None, derivative=None, decomposition=None
    ) -> None:
        """Pieces for a complex first argument, beside the real ones registered before."""
        for attr, piece in (
            ("kernel", kernel),
            ("meta", meta),
            ("derivative", derivative),
            ("decomposition", decomposition),
        ):
            if piece is not None:
                real = getattr(self, attr)
                setattr(
                    self, attr, complex_support.complex_branch(real, piece, attr == "derivative")
                )

    def _refusing_complex(self, fn: Callable) -> Callable:
        if self.complex_refused is None:
            return fn
        return complex_support.refusing(self, fn)

    @property
    def is_composite(self) -> bool:
        """Implemented only by its decomposition (autograd flows through the parts)."""
        return self.kernel is None and self.decomposition is not None


_UNSET = object()
# other spellings PyTorch's parser takes: numpy's (``x.sum(axis=0, keepdims=True)``), and
# ``input=`` for the tensor the schema calls ``self`` (``torch.sum(input=x)``)
_NUMPY_ALIASES = {"self": "input", "dim": "axis", "keepdim": "keepdims"}


def _make_binder(name: str, sig: inspect.Signature) -> Callable:
    """Generate ``def bind(<schema params>): return (<all params>,)`` for fast canonicalization."""
    params = []
    names = []
    defaults = {}
    seen_kwonly = False
    aliased = [n for n in _NUMPY_ALIASES if n in sig.parameters]
    # a required ``dim`` may come as ``axis=``: it and the required parameters after it get a
    # placeholder default, checked once the aliases are resolved
    optional_from = min(
        (list(sig.parameters).index(n) for n in aliased), default=len(sig.parameters)
    )
    required = []
    for i, p in enumerate(sig.parameters.values()):
        if p.kind is inspect.Parameter.VAR_POSITIONAL or p.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"op {name}: schemas cannot take *args/**kwargs")
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not seen_kwonly:
            params.append("*")
            seen_kwonly = True
        if p.default is inspect.Parameter.empty and i >= optional_from:
            params.append(f"{p.name}=_unset")
            required.append(p.name)
        elif p.default is inspect.Parameter.empty:
            params.append(p.name)
        else:
            key = f"_d_{p.name}"
            defaults[key] = p.default
            params.append(f"{p.name}={key}")
        names.append(p.name)
    # PyTorch's parser takes numpy's spellings too: ``x.sum(axis=0, keepdims=True)``
    aliases = [(_NUMPY_ALIASES[n], n) for n in aliased]
    body = ""
    if aliases:
        params.extend(([] if seen_kwonly else ["*"]) + [f"{a}=_unset" for a, _ in aliases])
        body = "".join(f"    if {a} is not _unset:\n        {n} = {a}\n" for a, n in aliases)
        body += "".join(
            f"    if {n} is _unset:\n        raise TypeError('{name}() missing 1 required "
            f'positional arguments: "{"input" if n == "self" else n}"\')\n'
            for n in required
        )
    tup = "(" + "".join(f"{n}, " for n in names) + ")"
    function_name = "bind_" + name.replace(".", "_")  # (a custom op's name: ``mylib.foo``)
    src = f"def {function_name}({', '.join(params)}):\n{body}    return {tup}\n"
    namespace = dict(defaults, _unset=_UNSET)
    exec(compile(src, f"<kiln op schema {name}>", "exec"), namespace)
    return namespace[function_name]


# kiln.return_types.<name>: the named tuples multi-output ops return (picklable by that path)
RETURN_TYPES: dict[str, type] = {}


def _return_type_repr(self) -> str:
    fields = ",\n".join(f"{k}={v!r}" for k, v in zip(self._fields, self))
    return f"kiln.return_types.{type(self).__qualname__}(\n{fields})"


def return_type(op_name: str, fields) -> type:
    """A named tuple printed as PyTorch prints ``torch.return_types.max``."""
    public = op_name.lstrip("_")
    base = collections.namedtuple(public, fields)
    cls = type(public, (base,), {"__slots__": (), "__repr__": _return_type_repr})
    cls.__module__ = "kiln.return_types"
    RETURN_TYPES.setdefault(public, cls)
    return cls


def defop(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    kind: str = "pointwise",
    prim: bool = False,
    view: bool = False,
    returns: tuple | None = None,
    differentiable: bool = True,
    autocast: dict | None = None,
    complex_refused: tuple | None = None,
    holomorphic: bool = False,
    complex_derivative: Callable | None = None,
    grad_fn_name: str | Callable | None = None,
    aliases: tuple = (),
    inplace_method: bool = False,
    recomputable: bool | None = None,
    out_exact_dtype: bool = False,
):
    """Declare an op from a schema function; the function body is never run.

    ``autocast`` maps device types to the op's autocast policy (``{"cuda": "fp32"}``);
    ``complex_refused``, ``holomorphic`` and ``complex_derivative`` say what the op does with
    complex inputs (``complex_support``); ``grad_fn_name`` is PyTorch's name for its autograd
    node where it is not ``<Name>Backward0`` (``grad_fn_naming``); ``aliases`` are its other
    names; ``inplace_method`` gives a non-pointwise op a ``Tensor.<name>_`` variant;
    ``recomputable`` overrides the partitioner's by-kind rule (a seeded random draw, a copy);
    ``out_exact_dtype``: an ``out=`` tensor must have the result's dtype.
    """

    def deco(schema):
        op_name = name or schema.__name__
        if op_name in OPS:
            raise ValueError(f"op {op_name} is defined twice")
        op = Op(op_name, schema, kind, prim, view)
        op.differentiable = differentiable
        op.autocast = autocast
        op.complex_refused = complex_refused
        op.holomorphic = holomorphic
        op.complex_derivative = complex_derivative
        op.grad_fn_name = grad_fn_name
        op.aliases = tuple(aliases)
        op.inplace_method = inplace_method
        op.recomputable = recomputable
        op.out_exact_dtype = out_exact_dtype
        if returns:
            op.returns = return_type(op_name, returns)
        OPS[op_name] = op
        return op

    return deco(fn) if fn is not None else deco


def get_op(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise AttributeError(f"kiln has no op named {name!r}") from None


def list_ops(kind: str | None = None, prims_only: bool = False) -> list[str]:
    """Names of the registered ops, optionally of one kind or only the prims."""
    return sorted(
        n
        for n, op in OPS.items()
        if (kind is None or op.kind == kind) and (not prims_only or op.is_prim)
    )


def _dispatch(op, args):  # replaced by kiln.ops.core.dispatch at import (breaks an import cycle)
    raise RuntimeError("kiln.ops.core.dispatch not initialised")


def _install_dispatch(fn: Callable, self_only: Callable) -> None:
    """``dispatch`` and its one-tensor path, which import this module."""
    global _dispatch, _dispatch_self_only
    _dispatch = fn
    _dispatch_self_only = self_only


def _call_with_out(op: Op, args: tuple, kwargs: dict):
    """``out_arguments.call_with_out``, which imports this module: bound on the first call, so
    later calls with ``out=`` skip the import statement."""
    global _call_with_out
    from .out_arguments import call_with_out

    _call_with_out = call_with_out
    return call_with_out(op, args, kwargs)
