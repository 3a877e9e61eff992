"""The one dispatch function every op call goes through.

Order of concerns, outermost first:
0. autocast: inside ``kiln.autocast``, an op with a cast policy gets its inputs cast first;
   profiling: while ``kiln.profiler.profile`` records in this thread, the call is timed (with
   its shapes) around the rest of dispatch, and the recorder calls back with ``recorded=True``;
   forward AD: while a dual level is open, the call goes to ``forward_grad`` (which comes back
   with ``dual_done``) to give its results tangents; closed, that is one flag test;
1. composite ops (no kernel of their own) run their decomposition, unless a mode wants them whole;
2. autograd: if grad mode is on and an input requires grad, run the op below autograd and record
   an ``OpBackward`` node on the outputs (in-place ops rebase history; see ``_inplace_autograd``);
3. modes: the innermost dispatch mode (graph tracing, fake propagation) gets the call;
4. kernels: by device of the first tensor argument; view and in-place bookkeeping.

Grad mode, the mode stack and autocast are the calling thread's (``runtime.state``), looked up
once per call. The fast path (no grad needed, no mode, CPU) is a handful of attribute reads and
one call. Tensor operators and the in-place methods numpy can write directly take that path
before reaching ``dispatch`` (``operator_method``, ``writing_method``; ``out=`` likewise in
``out_arguments``): a new concern added above must be added to their conditions too.
"""

from __future__ import annotations

from weakref import ref as _weak_ref

from ...autograd import engine
from ...autograd.forward_ad import DUAL_ACTIVE
from ...autograd.graph import Node, OpBackward, leaf_edge, op_node_class
from ...runtime.device import cpu, meta
from ...runtime.memory_format import (
    contiguous_format,
    format_strides,
    is_non_overlapping_and_dense,
    memory_format,
    suggest_memory_format,
)
from ...runtime.state import per_thread
from ...runtime.storage import check_no_internal_overlap
from ...runtime.tensor import INFERENCE_SEEN, Tensor, mark_inference
from . import forward_grad, registry
from .common import broadcast_shapes, copied_in_order, preserved_layout, zero_grad

__all__ = [
    "dispatch",
    "dispatch_self_only",
    "self_only_method",
    "DispatchMode",
    "run_below_autograd",
    "view_replay",
    "CopySlices",
    "operator_method",
    "writing_method",
    "partially_overlapping",
    "fills_one_number",
    "PARTIAL_OVERLAP",
]


def dispatch(op, args: tuple, recorded: bool = False, dual_done: bool = False):
    state = per_thread.state  # this thread's grad mode, modes and autocast: read once
    if op.inplace:
        if INFERENCE_SEEN[0] and getattr(args[0], "_inference", False):
            if not args[0]._inference_writable:
                _check_inference_update(state)
        storage = getattr(args[0], "_storage", None)
        if storage is not None:  # else no view of it was ever made: no input can share it
            for p in op.tensor_positions:  # _check_no_partial_overlap's test, inlined
                if getattr(args[p], "_storage", None) is storage and args[p] is not args[0]:
                    _check_no_partial_overlap(op, args, storage)
                    break
        if op.functional is not None and op.functional.overlap_refused:
            _check_no_overlap(op.functional.overlap_refused, args, storage)
        if args[0]._data is None and not args[0].is_sparse and not fills_one_number(op, args[1:]):
            # the kernels' refusal of an expanded self, where capture runs no kernel (sparse
            # tensors have no strides)
            check_no_internal_overlap(args[0]._shape, args[0].stride())
    if state.autocast is not None and op in state.autocast.policies:
        return state.autocast.run(op, args)  # casts the arguments, then dispatches again
    if state.profiler is not None and not recorded:  # off: this one check is all it costs
        return state.profiler.record_op(op, args)
    if DUAL_ACTIVE[0] and not dual_done:  # a forward-AD level is open: tangents ride along
        return forward_grad.dual_dispatch(op, args, dispatch)
    modes = state.mode_stack
    kernel = op.kernel
    if kernel is None and op.decomposition is not None:
        if not (modes and modes[-1].wants(op)) or _needs_composite_autograd(op, args, state):
            return run_decomposition(op, args)
    # one pass over the tensor arguments: does autograd apply, and is this the CPU fast path?
    on_cpu = True
    needs_grad = False
    grad = state.grad_enabled
    for p in op.tensor_positions:
        a = args[p]
        if a.__class__ is Tensor or isinstance(a, Tensor):
            if a._device is not cpu or a._data is None:
                if a.is_sparse:  # only data-less tensors pay for this test
                    return _sparse_dispatch(op, args)
                on_cpu = False
            if grad and a._requires_grad:
                needs_grad = True
    if op.list_positions:  # most ops have none: skip making an iterator over ()
        for p in op.list_positions:
            for a in args[p]:
                if isinstance(a, Tensor):
                    if grad and a._requires_grad:
                        needs_grad = True
                    if a._device is not cpu or a._data is None:
                        if a.is_sparse:
                            return _sparse_dispatch(op, args)
                        on_cpu = False
    if needs_grad:
        return _autograd(op, args, state, on_cpu, modes)
    if modes:
        return modes[-1].dispatch(op, args)
    if state.inference_mode and not grad:
        return _inference_outputs(op, args, _run_kernel(op, args))
    if on_cpu and kernel is not None:
        try:
            out = kernel(*args)
        except ValueError as error:
            _raise_broadcast_error(op, args, error)
            raise
        if op.is_view:
            mark_view(out, args[0], op, args)
        elif op.inplace:
            storage = args[0]._storage
            if storage is None:
                storage = args[0]._get_storage()
            storage.version += 1
        return out
    return _run_kernel(op, args)


def dispatch_self_only(op, args: tuple):
    """``dispatch(op, args)`` for an op whose only tensor parameter is ``self``
    (``op.self_only``: ``exp``, ``sum``, ``view``), with ``dispatch``'s decisions taken here
    for the common call: ``self`` a CPU tensor with data, no mode, autocast, profiler, forward
    AD or inference mode in this thread, an out-of-place op with a kernel. Such a call is the
    kernel's alone (and a view's bookkeeping), or autograd's recording of it where ``self``
    requires grad; a composite's (``reshape``) is its decomposition's, as in ``dispatch``
    without a mode; every other call goes through ``dispatch``. One thread-state test and one
    tensor's, where ``dispatch`` loops over the op's tensor and list parameters."""
    state = per_thread.state
    if (
        op.inplace
        or state.mode_stack
        or DUAL_ACTIVE[0]
        or state.autocast is not None
        or state.profiler is not None
    ):
        return dispatch(op, args)
    kernel = op.kernel
    if kernel is None:
        if op.decomposition is not None:
            return run_decomposition(op, args)  # a composite without a mode: dispatch's choice
        return dispatch(op, args)
    x = args[0]
    if state.inference_mode or x.__class__ is not Tensor or x._device is not cpu or x._data is None:
        return dispatch(op, args)
    if state.grad_enabled and x._requires_grad:
        return _autograd(op, args, state, True, state.mode_stack)  # as dispatch would
    try:
        out = kernel(*args)
    except ValueError as error:
        _raise_broadcast_error(op, args, error)
        raise
    if op.is_view:
        mark_view(out, x, op, args)
    return out


def self_only_method(op):
    """``Tensor.exp`` and its kin, for an op whose only tensor parameter is ``self``: a call
    without keywords goes straight to ``dispatch_self_only`` (``Op.__call__`` in between cost
    a frame and a forwarded ``*args, **kwargs``); with keywords (``out=``), through the op."""
    bind = op.bind

    def method(self, *args, **kwargs):
        if kwargs:
            return op(self, *args, **kwargs)
        return dispatch_self_only(op, bind(self, *args))

    method.__name__ = op.name
    method.__doc__ = op.doc
    return method


def operator_method(op, reverse: bool = False, operand_types: tuple = (Tensor,)):
    """``Tensor.__add__`` and its kin: ``dispatch(op, op.bind(self, other))`` (swapped when
    ``reverse``), with ``dispatch``'s decisions taken here for the common call: CPU tensors with
    data (or a number), no mode, autocast, profiler or inference mode in this thread. Such a
    call is the kernel's alone, or autograd's recording of it where an operand requires grad
    (``_autograd``, as ``dispatch`` would call it), so the dispatcher's frame and its generic
    loops are skipped; every other call goes through ``dispatch``. An ``other`` not among
    ``operand_types`` gives NotImplemented (Python's operator protocol)."""
    bind = op.bind
    dual_active = DUAL_ACTIVE  # a closure cell: read faster than the module global
    if op.inplace or op.is_view:
        raise ValueError(f"operator_method: {op.name} is not an out-of-place op")

    def method(self, other):
        if not isinstance(other, operand_types):
            return NotImplemented
        args = bind(other, self) if reverse else bind(self, other)
        state = per_thread.state
        kernel = op.kernel
        if (
            kernel is None
            or state.mode_stack
            or dual_active[0]
            or state.autocast is not None
            or state.profiler is not None
            or state.inference_mode
            or self.__class__ is not Tensor
            or self._device is not cpu
            or self._data is None
        ):
            return dispatch(op, args)
        if other.__class__ is Tensor:
            if other._device is not cpu or other._data is None:
                return dispatch(op, args)
            if state.grad_enabled and (self._requires_grad or other._requires_grad):
                return _autograd(op, args, state, True, state.mode_stack)  # as dispatch would
        elif isinstance(other, Tensor):
            return dispatch(op, args)
        elif state.grad_enabled and self._requires_grad:
            return _autograd(op, args, state, True, state.mode_stack)
        try:
            return kernel(*args)
        except ValueError as error:
            _raise_broadcast_error(op, args, error)
            raise

    return method


def writing_method(op, write_into):
    """``Tensor.add_`` and its kin for in-place ops whose functional op can write its result
    straight into ``self`` (``write_into(self, other, *rest) -> bool``, the functional op's
    ``inplace_kernel``): for the common call (``self`` a CPU tensor, nothing needing a gradient
    recorded, no mode, autocast, profiler or inference tensor, no input sharing ``self``'s
    memory) the write and ``dispatch``'s version bump happen here; any other call, or one
    ``write_into`` declines, goes through ``dispatch``."""
    bind = op.bind

    def method(self, *args, **kwargs):
        if kwargs:
            return op(self, *args, **kwargs)
        state = per_thread.state
        if (
            len(args) == 1
            and self.__class__ is Tensor
            and not state.mode_stack
            and not DUAL_ACTIVE[0]
            and state.autocast is None
            and state.profiler is None
            and not state.inference_mode
            and not (INFERENCE_SEEN[0] and self._inference)
        ):
            other = args[0]
            storage = self._storage
            if other.__class__ is Tensor:
                plain = not (
                    (state.grad_enabled and (self._requires_grad or other._requires_grad))
                    or (storage is not None and other._storage is storage and other is not self)
                )
            else:  # a number (write_into declines anything else); a tensor subclass: dispatch
                plain = not (state.grad_enabled and self._requires_grad) and not isinstance(
                    other, Tensor
                )
            if plain and write_into(self, other):
                if storage is None:
                    storage = self._get_storage()
                storage.version += 1
                return self
        return dispatch(op, bind(self, *args))

    method.__name__ = op.name
    method.__doc__ = op.doc
    return method


def _sparse_dispatch(op, args: tuple):
    """An op with a sparse COO argument: its sparse version, or PyTorch's error for it."""
    from ..sparse.functions import sparse_dispatch

    return sparse_dispatch(op, args)


def _inference_outputs(op, args: tuple, out):
    """Mark what an op made under ``inference_mode`` as inference tensors, as PyTorch does: a
    new tensor is one; a view is one when its base is; an in-place op's result stays as it was."""
    if op.inplace:
        return out
    inference = getattr(args[0], "_inference", False) if op.is_view else True
    if inference:
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor):
                mark_inference(t)
    return out


def _check_inference_update(state) -> None:
    if not state.inference_mode:
        raise RuntimeError(
            "Inplace update to inference tensor outside InferenceMode is not allowed.You can "
            "make a clone to get a normal tensor before doing inplace update.See "
            "https://github.com/pytorch/rfcs/pull/17 for more details."
        )


def _raise_broadcast_error(op, args: tuple, error: ValueError) -> None:
    """numpy's broadcasting ValueError from a kernel, raised as PyTorch's RuntimeError naming
    the sizes (``eq(ones(3), ones(4))``): ``except RuntimeError`` in user code must catch it."""
    if op.kind not in _ONE_DEVICE_KINDS or "broadcast" not in str(error):
        return
    shapes = [a._shape for a in _tensor_args(op, args)]
    if len(shapes) > 1:
        broadcast_shapes(*shapes)  # raises PyTorch's message where the shapes disagree
    raise RuntimeError(str(error)) from None


PARTIAL_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to "
    "a single memory location. Please clone() the tensor before performing the operation."
)


def _check_no_partial_overlap(op, args: tuple, storage) -> None:
    """PyTorch's check before an in-place op writes: no input may share some but not all of
    the written memory (``x[1:].add_(x[:-1])``, or the same bytes seen with other strides),
    since the result would depend on the order elements are written in. The very same view
    is fine (``x.add_(x)``), and so is any pair PyTorch cannot judge cheaply (either one not
    dense): it then computes as if the input were read first. Real and fake tensors alike,
    so a compiled function raises where eager code does."""
    out = args[0]
    for p in op.tensor_positions:
        a = args[p]
        if a is out or getattr(a, "_storage", None) is not storage:
            continue  # (views share their base's storage object: see ``mark_view``)
        if partially_overlapping(out, a):
            raise RuntimeError(PARTIAL_OVERLAP)


def fills_one_number(op, rest: tuple) -> bool:
    """``fill_`` of a number writes one value, so PyTorch lets it write through expanded
    (stride-0) dimensions; of a tensor value it goes through TensorIterator, which refuses."""
    return op.name == "fill_" and not isinstance(rest[0], Tensor)


def _check_no_overlap(positions: tuple, args: tuple, storage) -> None:
    """PyTorch's assert_no_overlap for the arguments at ``positions`` (``Op.refuse_overlap``):
    the very memory written, read as a source (``x.index_add_(0, i, x)``), raises too; partial
    overlaps are ``_check_no_partial_overlap``'s, pairs PyTorch cannot judge pass."""
    out = args[0]
    for p in positions:
        a = args[p]
        if a is out:
            raise RuntimeError(PARTIAL_OVERLAP)
        if storage is None or getattr(a, "_storage", None) is not storage:
            continue
        if (
            is_non_overlapping_and_dense(a._shape, a.stride())
            and is_non_overlapping_and_dense(out._shape, out.stride())
            and a.numel()
            and _first_byte(a) == _first_byte(out)
            and a.numel() * a._dtype.itemsize == out.numel() * out._dtype.itemsize
            and tuple(a.stride()) == tuple(out.stride())
        ):
            raise RuntimeError(PARTIAL_OVERLAP)


def partially_overlapping(a: Tensor, b: Tensor) -> bool:
    """PyTorch's ``get_overlap_status(a, b) == Partial`` for two tensors of one storage."""
    if not is_non_overlapping_and_dense(a._shape, a.stride()) or not is_non_overlapping_and_dense(
        b._shape, b.stride()
    ):
        return False
    na, nb = a.numel(), b.numel()
    if not na or not nb:
        return False
    ia, ib = a._dtype.itemsize, b._dtype.itemsize
    a_begin, b_begin = _first_byte(a), _first_byte(b)
    a_end, b_end = a_begin + na * ia, b_begin + nb * ib
    if a_begin == b_begin and a_end == b_end:
        return tuple(a.stride()) != tuple(b.stride())
    return a_begin < b_end and b_begin < a_end


def _first_byte(t: Tensor) -> int:
    """Where ``t``'s first element lies: its address, or for a fake tensor (no memory) its
    offset in its storage, in bytes (either way comparable within one storage)."""
    if t._data is None:
        return t._offset * t._dtype.itemsize
    return t.data_ptr()


def _needs_composite_autograd(op, args: tuple, state) -> bool:
    """A composite without a derivative that autograd must see: only its parts can be recorded."""
    if op.derivative is not None or not op.differentiable or not state.grad_enabled:
        return False
    for p in op.tensor_positions:
        a = args[p]
        if isinstance(a, Tensor) and a._requires_grad:
            return True
    for p in op.list_positions:
        for a in args[p]:
            if isinstance(a, Tensor) and a._requires_grad:
                return True
    return False


def run_below_autograd(op, args: tuple):
    """Run ``op`` as if autograd were not there (modes and kernels only)."""
    modes = per_thread.state.mode_stack
    if modes:
        return modes[-1].dispatch(op, args)
    return _run_kernel(op, args)


# kinds of op whose PyTorch kernels want every tensor on one device (TensorIterator, cat, norms,
# losses); indexing and matrix ops let CPU tensors (indices, operands) join meta ones
_ONE_DEVICE_KINDS = frozenset(
    {"pointwise", "comparison", "shape", "reduction", "scan", "sort", "nn", "loss", "pooling"}
)


def _tensor_args(op, args):
    for p in op.tensor_positions:
        a = args[p]
        if isinstance(a, Tensor):
            yield a
    for p in op.list_positions:
        for a in args[p]:
            if isinstance(a, Tensor):
                yield a


def _first_tensor(op, args):
    return next(_tensor_args(op, args), None)


def _device_chooser(op, args, first: Tensor) -> Tensor:
    """The tensor whose device a call mixing meta tensors with others runs on, after PyTorch's
    check that every tensor is on that device: the first tensor that is not a 0-d CPU tensor (a
    CPU scalar joins a computation on any device without choosing it). Without a check here, a
    meta tensor first in line made the whole call meta, whatever devices the others were on."""
    if op.kind not in _ONE_DEVICE_KINDS or op.inplace:  # PyTorch's in-place meta kernels
        return first  # accept operands from other devices
    tensors = list(_tensor_args(op, args))
    if all(t._device is first._device for t in tensors) or all(
        t._device is not meta for t in tensors
    ):
        return first  # one device, or no meta tensor (CPU and CUDA keep their own checks)
    chooser, elsewhere = device_placement(tensors)
    if elsewhere is not None:
        raise RuntimeError(
            f"Tensor on device {elsewhere._device} is not on the expected device {chooser._device}!"
        )
    return chooser


def device_placement(tensors: list) -> tuple:
    """``(chooser, elsewhere)``: the tensor whose device a call runs on (the first that is not a
    0-d CPU tensor: a CPU scalar joins a computation on any device without choosing it) and
    the first tensor on another device that is not such a scalar (None when there is none)."""
    chooser = next((t for t in tensors if t._shape or t._device is not cpu), tensors[0])
    for t in tensors:
        if t._device is not chooser._device and (t._shape or t._device is not cpu):
            return chooser, t
    return chooser, None


def _run_kernel(op, args):
    first = _first_tensor(op, args)
    if first is not None and (first._device is meta or first._data is not None):
        first = _device_chooser(op, args, first)
    if (
        first is not None
        and first._device is cpu
        and first._data is not None
        and op.kernel is not None
    ):
        _check_same_device(op, args, cpu)
        try:
            out = op.kernel(*args)
        except ValueError as error:
            _raise_broadcast_error(op, args, error)
            raise
        if op.is_view:
            mark_view(out, args[0], op, args)
        elif op.inplace:
            args[0]._get_storage().version += 1
        return out
    dev = cpu if first is None else first._device
    if dev is cpu and (first is None or first._data is not None):
        _check_same_device(op, args, cpu)
        if op.kernel is None:
            raise NotImplementedError(f"kiln op '{op.name}' has no CPU kernel")
        out = op.kernel(*args)
    elif dev is meta:
        if op.meta is None:
            raise NotImplementedError(f"kiln op '{op.name}' has no meta function")
        out = op.meta(*args)
    elif first._data is None:
        raise RuntimeError(
            f"kiln op '{op.name}' got a fake tensor (shape {list(first._shape)}) outside of graph "
            "capture: fake tensors carry no data and can only flow through a tracing mode"
        )
    else:
        from ...runtime import devices

        out = devices.run_kernel(dev, op, args)
    if op.is_view:
        mark_view(out, args[0], op, args)
    elif op.inplace:
        args[0]._get_storage().version += 1
    return out


def _check_same_device(op, args, dev) -> None:
    """CPU kernels read numpy buffers: a tensor from another device must never reach one
    (``copy_`` excepted: it copies between devices, as PyTorch's does, through the devices)."""
    if op.kind == "copy":
        return
    for p in op.tensor_positions:
        a = args[p]
        if isinstance(a, Tensor) and a._device is not dev:
            if meta in (dev, a._device):  # PyTorch's wording for its meta kernels' device check
                raise RuntimeError(
                    f"Tensor on device {a._device} is not on the expected device {dev}!"
                )
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{dev} and {a._device}! (while running {op.name})"
            )


def _watch_view(base: Tensor, view: Tensor) -> None:
    """Remember ``view``, made with grad mode on from a ``base`` that needs no gradient: if an
    in-place write (through another view, or into the base) later gives the base a history,
    this view leads backward through it too (``_wake_views``), as PyTorch's differentiable
    views do (their ``requires_grad`` reads the base's). Views are held by weak references in
    a list (a WeakSet's callbacks doubled a view op's cost), pruned of dead ones whenever its
    length reaches a power of two past 64: a base sliced anew every step stays small."""
    refs = base.__dict__.get("_grad_views")
    if refs is None:
        base._grad_views = [_weak_ref(view)]
        return
    refs.append(_weak_ref(view))
    n = len(refs)
    if n >= 64 and not n & (n - 1):
        refs[:] = [r for r in refs if r() is not None]


def _wake_views(base: Tensor, written: Tensor | None = None) -> None:
    """``base`` has just been given a history by an in-place write: the views of it made while
    it needed no gradient (all but ``written``, the view the write went through) record their
    view ops again from it, so that ``v = buf.view(2, 2); v[0, 1] = w; v * 2`` requires grad
    and leads back to ``w``."""
    refs = base.__dict__.pop("_grad_views", None)
    if not refs:
        return
    for ref in refs:
        view = ref()
        if view is None or view is written or view._requires_grad or view._base is not base:
            continue
        fresh = view_replay(view)(base)
        view.grad_fn = fresh.grad_fn
        view._output_nr = fresh._output_nr
        view._requires_grad = True
        view._view_version = view._storage.version


def mark_view(out, src: Tensor, op, args) -> None:
    """Views share the source's storage (and version counter) and remember how they were made."""
    storage = src._storage
    if storage is None:
        storage = src._get_storage()
    base = src._base
    if base is None:
        base = src
    # with grad mode off, a view of a tensor that requires grad requires grad too (PyTorch's
    # view semantics; with grad mode on, autograd gives it its history after this)
    no_grad_view = src._requires_grad
    # a view of an inference tensor is one, wherever it is made (in place writes to it and
    # saving it for backward are refused outside inference_mode, as for its base)
    inference = src._inference
    if out.__class__ is Tensor:
        out._storage = storage
        out._base = base
        out._view_src = (op, args)  # also what Tensor.stride() reads for empty/size-1 dims
        if no_grad_view and out._dtype.category >= 2:
            out._requires_grad = out._no_grad_view = True
        elif not base._requires_grad and out._dtype.category >= 2 and per_thread.state.grad_enabled:
            # _watch_view, its call saved while no pruning is due: every view op made with
            # grad mode on comes here (a third of a 1.8 us ``x.t()`` was the watch)
            refs = base.__dict__.get("_grad_views")
            if refs is not None and len(refs) < 63:
                refs.append(_weak_ref(out))
            else:
                _watch_view(base, out)
        if inference:
            mark_inference(out)
        return
    metas = None
    for i, o in enumerate(out):
        o._storage = storage
        o._base = base
        o._view_src = (op, args)
        if no_grad_view and o._dtype.category >= 2:
            o._requires_grad = o._no_grad_view = True
        elif not base._requires_grad and o._dtype.category >= 2 and per_thread.state.grad_enabled:
            _watch_view(base, o)
        if inference:
            mark_inference(o)
        if o._device is cpu and o._data is not None and (o._data.size == 0 or 1 in o._shape):
            metas = metas or op.meta(*args)  # numpy's strides there are not PyTorch's
            o._stride = metas[i]._stride


def view_replay(view: Tensor, source: Tensor | None = None):
    """A function that applies to a tensor laid out like ``source`` (by default the view's base)
    the view ops that made ``view`` from ``source``; RuntimeError if ``view`` was not viewed from
    ``source``."""
    chain = []
    t = view
    stop = view._base if source is None else source
    while t is not stop:
        if t._base is None or t._view_src is None:
            raise RuntimeError("internal error: broken view chain")
        op, args = t._view_src
        chain.append((op, args))
        t = args[0]
    chain.reverse()

    def replay(x: Tensor, resolve=None) -> Tensor:
        """``resolve``: maps the recorded arguments to this call's (symbolic sizes to ints)."""
        for op, args in chain:
            rest = tuple(args[1:]) if resolve is None else resolve(tuple(args[1:]))
            out = dispatch(op, (x,) + rest)
            x = out if not isinstance(out, (tuple, list)) else out[_index_in(op, args)]
        return x

    return replay


def _index_in(op, args) -> int:
    raise RuntimeError(f"cannot replay multi-output view op {op.name} (split/unbind) in place")


# ---------------------------------------------------------------------------------- autograd


_NO_EDGE = (None, 0)


def _edge(t: Tensor):
    if not t._requires_grad:
        return (None, 0)
    if t._view_version >= 0 and t._view_version != t._storage.version:
        return fresh_view_edge(t)
    fn = t.grad_fn
    if fn is None:
        return leaf_edge(t)
    return (fn, t._output_nr)


def fresh_view_edge(view: Tensor):
    """The edge of a view whose base was written in place since its history was recorded
    (``v = x[:, 1:3]; v *= 3`` with ``x`` itself a view of a non-leaf: ``x`` must now lead to
    the base's ``CopySlices``): its view ops recorded again from the base."""
    if view._base is None:  # made its own tensor after all (reshape's copy): its history holds
        view._view_version = -1
        fn = view.grad_fn
        return leaf_edge(view) if fn is None else (fn, view._output_nr)
    fresh = view_replay(view)(view._base)
    view.grad_fn = fresh.grad_fn
    view._output_nr = fresh._output_nr
    view._view_version = view._storage.version
    return (view.grad_fn, view._output_nr)


def run_decomposition(op, args):
    """``op``'s decomposition, its results laid out as ``op.result_layout`` says."""
    out = op.decomposition(*args)
    layout = op.result_layout
    if layout is None:
        return out
    x = args[0]
    fmt = contiguous_format
    if callable(layout):  # the format depends on the arguments (3-d average pooling)
        layout = layout(*args)
    if layout == "preserved":
        return _laid_out_like(out, x)
    if layout == "suggested" and isinstance(x, Tensor):
        fmt = memory_format(suggest_memory_format(x._shape, x.stride()))
    if isinstance(out, tuple):  # (a norm's 1-d statistics keep their layout)
        rank = getattr(x, "ndim", None)
        parts = [_in_format(o, fmt) if o.ndim == rank else o for o in out]
        return type(out)(*parts) if hasattr(out, "_fields") else tuple(parts)
    return _in_format(out, fmt)


def _in_format(out: Tensor, fmt) -> Tensor:
    """``out`` with ``fmt``'s strides: channels-last ones exactly, size-1 dims' too (a pooled
    (N, C, 1, 1) image's are PyTorch's (C, 1, C, C), which ``contiguous`` would not restride)."""
    if fmt is contiguous_format:
        return out.contiguous()
    if tuple(out.stride()) == format_strides(tuple(out.shape), fmt):
        return out
    return registry.OPS["clone"](out, memory_format=fmt)


def _laid_out_like(out: Tensor, x: Tensor) -> Tensor:
    """``out`` in the layout ``empty_like(x)`` has (``x``'s strides where dense, else dense in
    its dim order): a permute, a contiguous copy and the inverse permute, which trace as views
    and one clone."""
    strides = preserved_layout(x)
    if strides is None:
        return out.contiguous()
    if tuple(out.stride()) == strides:
        return out
    return copied_in_order(out, strides)


def laid_out_decomposition(op):
    """``op``'s decomposition as a callable that lays its results out as ``op.result_layout``
    says (the decomposition itself where the op declares none)."""
    if op.result_layout is None:
        return op.decomposition
    return lambda *args: run_decomposition(op, args)


def _autograd(op, args, state, on_cpu: bool, modes: list):
    """Run ``op`` below autograd and record its ``OpBackward`` node on the outputs.

    ``state``: the calling thread's ``ThreadState``, ``modes`` its mode stack. ``on_cpu``: every
    tensor argument is a CPU tensor with data (``dispatch`` found out), so without a mode the
    kernel runs directly, as on ``dispatch``'s fast path.
    """
    if modes and modes[-1].decomposes(op):
        return run_decomposition(op, args)  # above autograd: the parts record their own nodes
    if op.inplace:
        return _inplace_autograd(op, args, state)
    if op.derivative is None:
        if op.differentiable:
            raise NotImplementedError(
                f"the derivative for '{op.name}' is not implemented; call it under kiln.no_grad() "
                "or on detached inputs"
            )
        return run_below_autograd(op, args)
    state.grad_enabled = False
    try:
        kernel_saved = None
        if on_cpu and not modes and op.recording_kernel is not None:
            # (with saved-tensor hooks, only tensors the hooks see are saved: no kernel_saved)
            if state.saved_tensors_hooks:
                out = op.kernel(*args)
            else:
                out, kernel_saved = op.recording_kernel(*args)
        elif on_cpu and not modes and op.kernel is not None:
            try:
                out = op.kernel(*args)
            except ValueError as error:
                _raise_broadcast_error(op, args, error)
                raise
            if op.is_view:
                mark_view(out, args[0], op, args)
        else:
            out = run_below_autograd(op, args)
    finally:
        state.grad_enabled = True
    if not op.is_view and (out.__class__ is not Tensor or out._base is not None):
        _own_base(out, args)
    needs = [False] * len(args)
    list_positions = op.list_positions
    if list_positions:
        next_functions = []
        positions = []
        for p in op.edge_arg_positions:
            a = args[p]
            if p in list_positions:
                any_needs = False
                for j, t in enumerate(a):
                    if isinstance(t, Tensor):
                        next_functions.append(_edge(t))
                        positions.append((p, j))
                        any_needs = any_needs or t._requires_grad
                needs[p] = any_needs
            elif isinstance(a, Tensor):
                next_functions.append(_edge(a))
                needs[p] = a._requires_grad
                positions.append((p, -1))
        positions = tuple(positions)
    else:
        # no tensor lists (nearly every op): one edge per tensor argument, and the edge
        # positions are the op's own unless an argument was a number (``x * 2``)
        next_functions = []
        positions = op.tensor_edge_positions
        for p in op.tensor_positions:
            a = args[p]
            if a.__class__ is Tensor or isinstance(a, Tensor):
                if a._requires_grad:
                    if a._view_version >= 0 and a._view_version != a._storage.version:
                        next_functions.append(fresh_view_edge(a))
                    else:
                        fn = a.grad_fn
                        next_functions.append(leaf_edge(a) if fn is None else (fn, a._output_nr))
                    needs[p] = True
                else:
                    next_functions.append(_NO_EDGE)
            else:
                positions = None
        if positions is None:
            positions = tuple((p, -1) for p in op.tensor_positions if isinstance(args[p], Tensor))
    # ``OpBackward(...)`` with ``__init__`` called as a plain function on ``object.__new__``'s
    # instance: the class call's type machinery cost ~0.1 us of a ~2.5 us recording
    node = _new(OpBackward)
    _init_op_node(node, op, args, out, tuple(next_functions), positions, tuple(needs))
    # then PyTorch's name for it (``MulBackward0``) as its class: made as OpBackward, so that
    # the attribute writes in __init__ see one type (CPython specializes them per type; a
    # class per op there cost more than the assignment)
    node_class = op.node_class
    node.__class__ = node_class if node_class is not None else op_node_class(op, args)
    if state.saved_tensors_hooks:
        node.pack_saved(state.saved_tensors_hooks[-1])
    if kernel_saved is not None:
        node.keep_kernel_saved(kernel_saved)
    if op.is_view:
        inherited = getattr(args[0], "_multi_output_view", None) if args else None
        for o in (out,) if out.__class__ is Tensor else out:
            if isinstance(o, Tensor) and o._base is not None:  # (a reshape may copy)
                o._view_version = o._storage.version
                if inherited is not None:  # a view of a split's piece is refused in turn,
                    # named after its own node as PyTorch names it ("Output 0 of Select")
                    o._multi_output_view = (0, type(node).__name__.rstrip("0123456789")[:-8])
    if out.__class__ is Tensor:  # the common case first
        if out._dtype.category >= 2:  # floating or complex
            out._requires_grad = True
            out.grad_fn = node
    elif isinstance(out, tuple):
        for i, o in enumerate(out):
            if isinstance(o, Tensor) and o._dtype.category >= 2:  # floating or complex
                o._requires_grad = True
                o.grad_fn = node
                o._output_nr = i
    elif isinstance(out, list):  # split / unbind / chunk: a list of views
        for i, o in enumerate(out):
            o._requires_grad = True
            o.grad_fn = node
            o._output_nr = i
    elif out._dtype.category >= 2:  # floating or complex
        out._requires_grad = True
        out.grad_fn = node
    return out


def _own_base(out, args: tuple) -> None:
    """A non-view op's results are their own bases to autograd, as PyTorch's: a decomposition run
    below autograd may return a view of a tensor it made (``stack``'s cat then view, ``matmul``'s
    squeezed ``mm``), and such a result kept that intermediate as its base. A write through a
    view of the result then gave the hidden intermediate the new history, and the result itself,
    not a view at autograd's level, kept its stale history (a compiled ``stack`` read after a
    ``fill_`` through its alias passed the overwritten values' gradient to its inputs). A view
    of an argument stays one: the argument's own history must see writes through it."""
    outs = (out,) if out.__class__ is Tensor else out
    if not isinstance(outs, (tuple, list)):
        return
    visible = None
    for o in outs:
        if not isinstance(o, Tensor) or o._base is None:
            continue
        if visible is None:
            visible = set()
            for a in args:
                for t in a if isinstance(a, (tuple, list)) else (a,):
                    if isinstance(t, Tensor):
                        visible.add(id(t._base if t._base is not None else t))
        if id(o._base) not in visible:
            o._base = None


def _view_written(made: tuple, why: str) -> RuntimeError:
    """PyTorch's error for an in-place write on output ``made[0]`` of ``made[1]``, a view whose
    history cannot take it."""
    return RuntimeError(
        f"Output {made[0]} of {made[1]} is a view and is being modified inplace. This view {why}"
    )


def _inplace_autograd(op, args, state):
    self = args[0]
    if self._no_grad_view and self.grad_fn is None:
        raise RuntimeError(
            "A view was created in no_grad mode and is being modified inplace with grad mode "
            "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
            "can clarify your code by moving both the view and the inplace either both inside the "
            "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
            "want the inplace to be tracked)."
        )
    if self._multi_output_view is not None and self.grad_fn is not None:
        raise _view_written(
            self._multi_output_view,
            "is the output of a function that returns multiple views. Such functions do not "
            "allow the output views to be modified inplace. You should replace the inplace "
            "operation by an out-of-place one.",
        )
    if self._requires_grad and self.grad_fn is None:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )
    base = self._base
    if base is not None and base._requires_grad and base.grad_fn is None:
        raise RuntimeError(
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )
    if self._custom_function_view is not None and self.grad_fn is not None:
        raise _view_written(
            self._custom_function_view,
            "was created inside a custom Function (or because an input was returned as-is) and "
            "the autograd logic to handle view+inplace would override the custom backward "
            "associated with the custom Function, leading to incorrect gradients. This behavior "
            "is forbidden. You can fix this by cloning the output of the custom Function.",
        )
    if _functional_saves_self(op.functional, args):
        # the derivative needs self's value from before the write: give it a copy
        args = (dispatch(_clone_op(), (self, None)),) + tuple(args[1:])
    result = dispatch(op.functional, args)
    if not isinstance(result, Tensor):
        raise RuntimeError(f"internal error: in-place {op.name} needs a single-tensor result")
    if result._dtype is not self._dtype:
        # the kernel's cast check (an int tensor's add_ of a float that requires grad): the
        # copy below would cast anything
        from .out_arguments import refuse_unsafe_cast

        refuse_unsafe_cast(result._dtype, self._dtype)
    state.grad_enabled = False
    try:
        run_below_autograd(_copy_op(), (self, result, False))
    finally:
        state.grad_enabled = True
    if not (
        result._requires_grad or self._requires_grad or (base is not None and base._requires_grad)
    ):
        return self
    if base is None:
        if result._requires_grad:
            self.grad_fn = result.grad_fn
            self._output_nr = result._output_nr
        else:  # overwritten by values that need no grad: the old history gets zero gradient
            self.grad_fn = CopyBackwards(_edge(self))
            self._output_nr = 0
        woke = not self._requires_grad
        self._requires_grad = True
        if woke:
            _wake_views(self)
        return self
    replay = view_replay(self)
    node = CopySlices(_edge(base), _edge(result), base, replay)
    base.grad_fn = node
    base._output_nr = 0
    woke = not base._requires_grad
    base._requires_grad = True
    if woke:
        _wake_views(base, self)
    fresh = replay(base)  # records the view ops from the new base: the view's new history
    self.grad_fn = fresh.grad_fn
    self._output_nr = fresh._output_nr
    self._requires_grad = True
    self._view_version = self._storage.version
    return self


engine.fresh_view_edge[0] = fresh_view_edge
_new = object.__new__
_init_op_node = OpBackward.__init__

_COPY = []
_CLONE = []


def _clone_op():
    if not _CLONE:
        _CLONE.append(registry.get_op("clone"))
    return _CLONE[0]


def _functional_saves_self(op, args) -> bool:
    if op.derivative is None:
        return op.kernel is None  # composite: its parts may save self
    saves = op.saves_inputs
    if saves is None:
        return True
    if callable(saves):
        needs = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        saves = saves(args, needs)
    return 0 in saves


def _copy_op():
    if not _COPY:
        _COPY.append(registry.get_op("copy_"))
    return _COPY[0]


class CopyBackwards(Node):
    """History of a tensor fully overwritten in place by values that do not require grad."""

    __slots__ = ("out_meta",)

    def __init__(self, old_edge):
        super().__init__((old_edge,))

    def apply(self, grad_outputs: tuple) -> tuple:
        return (zero_grad(grad_outputs[0]),)


class CopySlices(Node):
    """History of a base after an in-place op on one of its views.

    The new base equals the old base outside the view's region and the in-place result inside
    it, so its gradient splits into the masked gradient (to the old base) and the view of the
    gradient (to the result). Both halves are kiln ops, so higher-order gradients work.
    """

    __slots__ = ("_base_shape", "_base_dtype", "_replay", "_mask", "out_meta")

    def __init__(self, base_edge, result_edge, base: Tensor, replay):
        super().__init__((base_edge, result_edge))
        self._base_shape = base._shape
        self._base_dtype = base._dtype
        self._replay = replay
        self._mask = None
        self.out_meta = ((base._shape, base._dtype),)

    def apply(self, grad_outputs: tuple) -> tuple:
        from ...autograd.grad_mode import no_grad
        from ..creation.api import ones
        from ..pointwise.unary_binary import where

        (g,) = grad_outputs
        if self._mask is None:  # True outside the view's region
            with no_grad():
                # in the gradient's dtype: the replayed views may need it (view_as_real)
                ones_outside = ones(self._base_shape, dtype=g.dtype)
                self._replay(ones_outside).fill_(0)
                self._mask = ones_outside != 0
        grad_result = self._replay(g) if self.next_functions[1][0] is not None else None
        # selected, not multiplied by the mask: the overwritten region gets exactly zero even
        # where ``g`` is inf or NaN, as PyTorch's zeroed slice does
        grad_base = where(self._mask, g, 0) if self.next_functions[0][0] is not None else None
        return (grad_base, grad_result)


class DispatchMode:
    """Base class for modes: push with ``with mode:``; ``dispatch(op, args)`` gets every op call.

    A mode runs ops below itself with ``self.below(op, args)`` (the mode is popped meanwhile).
    ``wants(op)`` lets a mode receive composite ops whole instead of their decompositions;
    ``decomposes(op)`` makes an op that needs autograd run as its decomposition, above autograd
    (its own derivative unused), as a composite would.
    """

    def dispatch(self, op, args):
        return self.below(op, args)

    def wants(self, op) -> bool:
        return False

    def decomposes(self, op) -> bool:
        return False

    def below(self, op, args):
        modes = per_thread.state.mode_stack
        popped = modes.pop()
        try:
            if (
                op.kernel is None
                and op.decomposition is not None
                and not (modes and modes[-1].wants(op))
            ):
                return run_decomposition(op, args)
            return run_below_autograd(op, args)
        finally:
            modes.append(popped)

    def __enter__(self):
        per_thread.state.mode_stack.append(self)
        return self

    def __exit__(self, *exc):
        popped = per_thread.state.mode_stack.pop()
        assert popped is self, "dispatch modes must be exited in LIFO order"


registry._install_dispatch(dispatch, dispatch_self_only)
