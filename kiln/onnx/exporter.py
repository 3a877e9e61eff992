"""``kiln.onnx.export``: an exported kiln program written as an ONNX model.

The model is captured with ``kiln.export.export`` (in eval mode, as PyTorch's exporter does),
ops without an ONNX translation are decomposed (``run_decompositions`` of just those ops) until
every op has one — an op with neither is an error naming it and the user's line — and the graph
is translated node by node (``translations.py``): weights become initializers, user tensors the
graph inputs, ``cond`` an ``If``. ``onnx.checker`` (with shape inference) checks the result.

Dynamic axes: the declared input and output axes get symbolic dims (``dim_param``). The model is
exported with a ``Dim`` for each dynamic input axis (one per axis name), so the kiln graph has
symbolic sizes and the ONNX graph computes every size that depends on them from its inputs'
shapes (``Shape``, integer arithmetic, ``Range``, ``ConstantOfShape``): it serves every size.
Code that ties a dynamic axis to a constant is an error naming the axis and the user's line.
An example whose dynamic axis has size 0 or 1 cannot be traced symbolically (those sizes
specialize); then the exporter proves instead that the ONNX graph does not depend on the
sizes: it exports again with every dynamic axis resized and requires the same ONNX graph.
"""

from __future__ import annotations

import enum
import os
from typing import IO, Any

from ..nn.modules.module import Module
from ..runtime.symbolic import ConstraintViolationError, SymInt
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten
from .builder import GraphBuilder, OnnxExportError, onnx_type, where
from .translations import TRANSLATIONS

__all__ = ["export", "DEFAULT_OPSET", "TrainingMode"]


class TrainingMode(enum.IntEnum):
    """PyTorch's ``torch.onnx.TrainingMode``: the mode the model is exported in."""

    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


DEFAULT_OPSET = 17
_MIN_OPSET = 17
_IN_EXPORT = [False]


def in_export() -> bool:
    return _IN_EXPORT[0]


def _split_args(args, kwargs) -> tuple[tuple, dict]:
    """PyTorch's conventions: one tensor, or a tuple whose last item may be a dict of kwargs."""
    if isinstance(args, Tensor):
        return (args,), dict(kwargs or {})
    args = tuple(args)
    if args and isinstance(args[-1], dict) and not kwargs:
        return args[:-1], dict(args[-1])
    return args, dict(kwargs or {})


def _capture(model, args: tuple, kwargs: dict, training: TrainingMode, dynamic_shapes=None):
    """The exported program, captured in the mode ``training`` asks for (the model's own mode
    is restored after)."""
    from ..export.capture import export as kiln_export

    was = model.training if isinstance(model, Module) else None
    if was is not None and training is not TrainingMode.PRESERVE:
        model.train(training is TrainingMode.TRAINING)
    try:
        return kiln_export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
    finally:
        if was is not None:
            model.train(was)


def _graphs(graph):
    """``graph`` and every cond branch graph in it, depth first."""
    yield graph
    for node in graph.nodes:
        if node.op == "call_function" and getattr(node.target, "name", None) == "cond":
            yield from _graphs(node.args[1].graph)
            yield from _graphs(node.args[2].graph)


def _translatable(ep):
    """``ep`` with every op that has no translation decomposed (repeatedly), or an error."""
    for _ in range(16):
        missing = {}
        for graph in _graphs(ep.graph):
            for node in graph.nodes:
                if node.op != "call_function" or not hasattr(node.target, "name"):
                    continue
                if node.target.name not in TRANSLATIONS:
                    missing.setdefault(node.target, node)
        if not missing:
            return ep
        stuck = [node for op, node in missing.items() if op.decomposition is None]
        if stuck:
            raise OnnxExportError(
                f"{where(stuck[0])}: op {stuck[0].target.name!r} has no ONNX translation (and no "
                "decomposition into ops that have one)"
            )
        ep = ep.run_decompositions(set(missing))
    raise OnnxExportError("decomposing the graph for ONNX did not converge")


def _dynamic_axes(dynamic_axes, names: list[str]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if name not in names:
            raise ValueError(
                f"dynamic_axes names {name!r}, which is no input or output name: {names}"
            )
        if isinstance(axes, dict):
            out[name] = {int(a): str(d) for a, d in axes.items()}
        else:
            out[name] = {int(a): f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    return out


def _dims_for_axes(
    args: tuple, kwargs: dict, leaves: list, input_names: list, axes: dict, ranges: dict
):  # fmt: skip
    """``dynamic_shapes`` for ``export``: a ``Dim`` per dynamic input axis (inputs sharing an
    axis name share it; ``ranges``: ``{Dim name: (min, max)}`` found so far), in the positional
    form; None when an example's axis is 0 or 1 (such a size cannot be traced symbolically) or
    no input axis is dynamic."""
    from ..export.dims import Dim
    from ..utils.pytree import tree_unflatten

    by_name: dict = {}
    per_leaf = []
    for name, t in zip(input_names, leaves):
        dims = {}
        for axis, label in axes.get(name, {}).items():
            if t.shape[axis] < 2:
                return None
            ident = "".join(c if c.isalnum() else "_" for c in label)
            ident = ident if ident and ident.isidentifier() else f"d_{ident}"
            lo, hi = ranges.get(ident, (None, None))
            dims[axis] = by_name.setdefault(label, Dim(ident, min=lo, max=hi))
        per_leaf.append(dims or None)
    if not any(per_leaf):
        return None
    flat, spec = tree_flatten((args, kwargs))
    it = iter(per_leaf)
    specs = [next(it) if isinstance(leaf, Tensor) else None for leaf in flat]
    spec_args, spec_kwargs = tree_unflatten(specs, spec)
    if spec_kwargs:
        return None
    return tuple(spec_args)


def _capture_symbolic(model, args, kwargs, training, leaves, input_names, axes):
    """The program with a ``Dim`` per dynamic axis. A dynamic axis the model bounds (a slice of
    a fixed-size buffer: ``seq <= 16``) gets that range, as PyTorch's automatic dims do (ONNX
    records no ranges); code that fixes an axis to one size is an error."""
    ranges: dict = {}
    for _ in range(8):
        dims = _dims_for_axes(args, kwargs, leaves, input_names, axes, ranges)
        try:
            return _capture(model, args, kwargs, training, dims)
        except ConstraintViolationError as e:
            refined = getattr(e, "refined", None)
            if refined is None or ranges.get(refined[0]) == refined[1]:
                raise OnnxExportError(
                    f"dynamic_axes: the model specializes a dynamic axis: {e}"
                ) from None
            ranges[refined[0]] = refined[1]
    raise OnnxExportError("dynamic_axes: the ranges of the dynamic axes did not settle")


def _build(ep, input_names, output_names, axes: dict, opset: int, export_params: bool):
    """The ONNX model of ``ep`` (checked), with the given names and symbolic dims."""
    import onnx
    from onnx import helper

    from ..export.signature import InputKind, OutputKind

    builder = GraphBuilder(TRANSLATIONS, opset)
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    inputs, k = [], 0
    for node, spec in zip(placeholders, ep.graph_signature.input_specs):
        val = node.meta["val"]
        if spec.kind is InputKind.USER_INPUT:
            name = builder.reserve(input_names[k])
            k += 1
        elif not node.users:
            continue  # state the graph does not read (eval-mode batch norm's step counter)
        elif export_params:
            builder.values[node] = builder.tensor_initializer(ep.state_tensor(spec), spec.target)
            continue
        else:
            name = builder.reserve(spec.target)
        labels = axes.get(name, {})
        for i, size in enumerate(val.shape):  # a symbol's dim_param: its first axis name
            symbol = size.expr.as_symbol() if size.__class__ is SymInt else None
            if symbol is not None and i in labels:
                builder.dim_params.setdefault(symbol, labels[i])
        dims = [labels.get(i, size) for i, size in enumerate(builder.onnx_dims(val.shape))]
        inputs.append(helper.make_tensor_value_info(name, onnx_type(val.dtype), dims))
        builder.values[node] = name
        builder.bind_symbols(name, val)
    results = builder.run(ep.graph)
    builder.current = None
    outputs, user = [], 0
    for spec, name, kiln_out in zip(ep.graph_signature.output_specs, results,
                                    ep.graph.output_node.args[0]):  # fmt: skip
        if spec.kind is not OutputKind.USER_OUTPUT:
            continue  # eval-mode programs write no buffers; ONNX has no place for it
        if name is None:
            raise OnnxExportError(f"output {user} of the model has no ONNX value")
        wanted = builder.reserve(output_names[user])
        user += 1
        builder.nodes.append(helper.make_node("Identity", [name], [wanted], name=f"{wanted}_out"))
        outputs.append((wanted, kiln_out.meta["val"]))
    value_infos = [helper.make_tensor_value_info(n, onnx_type(v.dtype), None) for n, v in outputs]
    graph = helper.make_graph(builder.nodes, "main_graph", inputs, value_infos,
                              builder.initializers)  # fmt: skip
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="kiln",
                              ir_version=helper.find_min_ir_version_for(opsets))  # fmt: skip
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes = {o.name: o.type.tensor_type.shape for o in inferred.graph.output}
    for out, (name, val) in zip(model.graph.output, outputs):
        dims = out.type.tensor_type.shape
        known = shapes.get(name)
        for i, size in enumerate(val.shape):
            dim = dims.dim.add()
            if i in axes.get(name, {}):
                dim.dim_param = axes[name][i]
            elif size.__class__ is SymInt:
                dim.dim_param = builder.onnx_dims([size])[0]
            elif builder.dim_params:  # a symbolic graph: its other sizes are static
                dim.dim_value = size
            elif known is not None and i < len(known.dim) and known.dim[i].HasField("dim_param"):
                dim.dim_param = known.dim[i].dim_param
            else:
                dim.dim_value = size
    onnx.checker.check_model(model, full_check=True)
    return model


def _resized(t: Tensor, axes: dict[int, str]) -> Tensor:
    """``t`` with each dynamic axis one longer (or shorter): its own values, repeated."""
    from ..ops.public import cat

    for axis in axes:
        size = t.shape[axis]
        if size > 2:
            t = t.narrow(axis, 0, size - 1)
        else:
            t = cat([t, t.narrow(axis, 0, 1)], axis)
    return t


def _first_difference(a, b) -> str:
    for x, y in zip(a.graph.node, b.graph.node):
        if x.SerializeToString() != y.SerializeToString():
            return (
                f"ONNX node {x.name} ({x.op_type}"
                + (f", from {x.doc_string}" if x.doc_string else "")
                + ")"
            )
    by_name = {i.name: i for i in b.graph.initializer}
    for init in a.graph.initializer:
        other = by_name.get(init.name)
        if other is None or other.SerializeToString() != init.SerializeToString():
            users = [n for n in a.graph.node if init.name in n.input]
            user = users[0] if users else None
            what = f" read by ONNX node {user.name} ({user.op_type}, from {user.doc_string})" \
                if user is not None else ""  # fmt: skip
            return f"the constant {init.name}{what}"
    return "the number of nodes"


def export(
    model,
    args: Any = (),
    f: str | os.PathLike | IO[bytes] | None = None,
    *,
    kwargs: dict | None = None,
    export_params: bool = True,
    verbose: bool | None = None,
    training: TrainingMode = TrainingMode.EVAL,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    opset_version: int | None = None,
    dynamic_axes: dict | None = None,
    keep_initializers_as_inputs: bool = False,
    do_constant_folding: bool = True,
    dynamo: bool = False,
    **unsupported: Any,
):
    """Write ``model(*args)`` to ``f`` as an ONNX model (PyTorch's ``torch.onnx.export``).

    Returns the ``onnx.ModelProto`` written. ``opset_version`` 17 or newer. ``dynamic_axes``:
    ``{name: {axis: "dim_name"}}`` or ``{name: [axes]}`` for inputs and outputs (see the module
    docstring for what kiln can prove about them).
    """
    try:
        import onnx
    except ImportError:
        raise ImportError(
            "kiln.onnx.export needs the onnx package: pip install onnx (kiln's 'onnx' extra)"
        ) from None
    if unsupported:
        raise TypeError(f"kiln.onnx.export does not support {sorted(unsupported)}")
    if keep_initializers_as_inputs:
        raise NotImplementedError("keep_initializers_as_inputs=True is not supported")
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    if not _MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(
            f"opset_version {opset} is not supported: kiln writes opsets {_MIN_OPSET} to "
            f"{onnx.defs.onnx_opset_version()}"
        )
    training = TrainingMode(training)
    args, kwargs = _split_args(args, kwargs)
    leaves = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)]
    _IN_EXPORT[0] = True
    try:
        ep = _capture(model, args, kwargs, training)
        n_out = len(ep.graph_signature.user_outputs)
        input_names = list(input_names or [])
        input_names += [s for s in ep.graph_signature.user_inputs[len(input_names) :]]
        output_names = list(output_names or [])
        output_names += [f"output_{i}" if n_out > 1 else "output"
                         for i in range(len(output_names), n_out)]  # fmt: skip
        if len(input_names) != len(leaves) or len(output_names) != n_out:
            raise ValueError(
                f"{len(input_names)} input names for {len(leaves)} tensor inputs, "
                f"{len(output_names)} output names for {n_out} outputs"
            )
        axes = _dynamic_axes(dynamic_axes, input_names + output_names)
        dims = _dims_for_axes(args, kwargs, leaves, input_names, axes, {})
        if dims is not None:
            ep = _capture_symbolic(model, args, kwargs, training, leaves, input_names, axes)
        ep = _translatable(ep)
        onnx_model = _build(ep, input_names, output_names, axes, opset, export_params)
        input_axes = {i: axes[name] for i, name in enumerate(input_names) if name in axes}
        if input_axes and dims is None:
            probe = [_resized(t, input_axes[i]) if i in input_axes else t
                     for i, t in enumerate(leaves)]  # fmt: skip
            probe_args, probe_kwargs = _replace_tensors(args, kwargs, probe)
            try:
                other = _translatable(_capture(model, probe_args, probe_kwargs, training))
            except Exception as e:
                raise OnnxExportError(
                    f"dynamic_axes: the model fails at other sizes of its dynamic axes ({e})"
                ) from e
            second = _build(other, input_names, output_names, axes, opset, export_params)
            if _canonical(onnx_model) != _canonical(second):
                raise OnnxExportError(
                    f"dynamic_axes: the exported graph depends on the size of a dynamic axis "
                    f"({_first_difference(onnx_model, second)} changes with it); an example "
                    "with that axis of size 2 or more exports it symbolically instead"
                )
    finally:
        _IN_EXPORT[0] = False
    if verbose:
        print(onnx.helper.printable_graph(onnx_model.graph))
    if f is not None:
        onnx.save_model(onnx_model, f)
    return onnx_model


def _canonical(model) -> tuple:
    graph = model.graph
    inits = sorted((i.name, i.SerializeToString()) for i in graph.initializer)
    return tuple(n.SerializeToString() for n in graph.node), tuple(inits)


def _replace_tensors(args: tuple, kwargs: dict, tensors: list) -> tuple[tuple, dict]:
    from ..utils.pytree import tree_unflatten

    leaves, spec = tree_flatten((args, kwargs))
    it = iter(tensors)
    new = [next(it) if isinstance(leaf, Tensor) else leaf for leaf in leaves]
    return tree_unflatten(new, spec)
