"""Machine code for the eager Adam/AdamW and SGD updates of a float32 parameter.

``optim/_numpy_step.py`` does a parameter's update on its arrays in about fifteen numpy calls
(the lerp of the first moment in float64, the second moment, the bias-corrected denominator,
the step): for a small model's few dozen parameters that is milliseconds a step, against
PyTorch's fused loop. Here one call does the whole update in one pass, with every rounding the
numpy path makes (the scalars come in already rounded to float32 as it rounds them; the lerp's
product and sum in float64, rounded once), so the result is the numpy path's to the bit and so
the op path's.

Run-time flags choose maximize, the weight-decay form and the lerp's formula by ``select``;
amsgrad passes its running maximum (without it the caller passes the second moment itself,
whose maximum with itself is itself).

SGD's update is memory-bound: the numpy path makes a parameter-sized temporary for each scaled
term (weight decay, the step), and at resnet18's sizes those are fresh pages every step
(arrays past glibc's mmap threshold), so its eager step spent more time faulting pages in than
computing. One pass reads the parameter, gradient and momentum buffer once and writes each once.
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

from ....runtime import dtypes as dt
from .flat_loops import flat_loop, float_ops, load, splat, store
from .jit import compile_module, data_address
from .values import F32, F64, I64, V

__all__ = ["NativeOptimizers", "build"]

_F = dt.float32
_VOID = ir.VoidType()
_F32P = F32.as_pointer()

# flag bits
MAXIMIZE, COUPLED_DECAY, DECOUPLED_DECAY, SMALL = 1, 2, 4, 8
# float32 scalars, in the numpy path's roundings
_SCALARS = (
    "decay",
    "weight_decay",
    "coeff",
    "beta2",
    "one_minus_beta2",
    "correction2",
    "eps",
    "neg_step",
)


def _flag(b: ir.IRBuilder, flags: ir.Value, bit: int, lanes: int) -> ir.Value:
    """Whether run-time flag ``bit`` is set, splatted to ``lanes`` (a ``select`` mask)."""
    on = b.icmp_unsigned("!=", b.and_(flags, ir.Constant(I64, bit)), ir.Constant(I64, 0))
    return splat(b, on, lanes)


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_optimizers")
    args = [I64] + [_F32P] * 5 + [I64] + [F32] * len(_SCALARS)
    fn = ir.Function(module, ir.FunctionType(_VOID, args), "kiln_adam")
    n, p, g, m, v, v_max, flags, *scalars = fn.args

    def body(b: ir.IRBuilder, i: ir.Value, lanes: int) -> None:
        # plain IR arithmetic, no ``contract`` flag: a fused multiply-add would round once where
        # the numpy path rounds twice (``LLVMOps`` gives the NaN-propagating maximum and sqrt)
        ops = float_ops(b, lanes)
        s = {name: splat(b, value, lanes) for name, value in zip(_SCALARS, scalars)}
        wide = ir.VectorType(F64, lanes) if lanes > 1 else F64

        def flag(bit):
            return _flag(b, flags, bit, lanes)

        param, grad = load(b, p, i, lanes), load(b, g, i, lanes)
        grad = b.select(flag(MAXIMIZE), b.fneg(grad), grad)
        grad = b.select(flag(COUPLED_DECAY), b.fadd(grad, b.fmul(param, s["weight_decay"])), grad)
        param = b.select(flag(DECOUPLED_DECAY), b.fmul(param, s["decay"]), param)
        # exp_avg.lerp_(grad, 1 - beta1): (end - start) * coeff + base in float64, rounded once
        first = load(b, m, i, lanes)
        product = b.fmul(b.fpext(b.fsub(grad, first), wide), b.fpext(s["coeff"], wide))
        base = b.select(flag(SMALL), first, grad)
        first = b.fptrunc(b.fadd(product, b.fpext(base, wide)), first.type)
        store(b, first, m, i, lanes)
        second = b.fmul(load(b, v, i, lanes), s["beta2"])
        second = b.fadd(second, b.fmul(b.fmul(grad, s["one_minus_beta2"]), grad))
        store(b, second, v, i, lanes)
        largest = ops.maximum(V(load(b, v_max, i, lanes), _F), V(second, _F))
        store(b, largest.value, v_max, i, lanes)
        denom = b.fadd(b.fdiv(ops.sqrt(largest).value, s["correction2"]), s["eps"])
        param = b.fadd(param, b.fdiv(b.fmul(first, s["neg_step"]), denom))
        store(b, param, p, i, lanes)

    flat_loop(fn, n, body)
    _sgd_function(module, momentum=False)
    _sgd_function(module, momentum=True)
    return module


# SGD's flag bits and float32 scalars (as ``_numpy_step.sgd_update`` rounds them)
SGD_MAXIMIZE, SGD_DECAY, SGD_NEW_BUFFER, SGD_NESTEROV = 1, 2, 4, 8
_SGD_SCALARS = ("weight_decay", "momentum", "one_minus_dampening", "neg_lr")


def _sgd_function(module: ir.Module, momentum: bool) -> None:
    """``kiln_sgd`` (no momentum buffer) or ``kiln_sgd_momentum``: the numpy path's operations
    in its order, each rounded to float32 (no fused multiply-add)."""
    args = [I64] + [_F32P] * 3 + [I64] + [F32] * len(_SGD_SCALARS)
    name = "kiln_sgd_momentum" if momentum else "kiln_sgd"
    fn = ir.Function(module, ir.FunctionType(_VOID, args), name)
    n, p, g, buf, flags, *scalars = fn.args

    def body(b: ir.IRBuilder, i: ir.Value, lanes: int) -> None:
        s = {name: splat(b, value, lanes) for name, value in zip(_SGD_SCALARS, scalars)}

        def flag(bit):
            return _flag(b, flags, bit, lanes)

        param, grad = load(b, p, i, lanes), load(b, g, i, lanes)
        grad = b.select(flag(SGD_MAXIMIZE), b.fneg(grad), grad)
        grad = b.select(flag(SGD_DECAY), b.fadd(grad, b.fmul(param, s["weight_decay"])), grad)
        if momentum:
            # a new buffer is the gradient itself (its memory is not read: ``select`` drops the
            # arithmetic on whatever it held); a dampening of 0 multiplies by 1, exactly
            old = load(b, buf, i, lanes)
            kept = b.fadd(b.fmul(old, s["momentum"]), b.fmul(grad, s["one_minus_dampening"]))
            kept = b.select(flag(SGD_NEW_BUFFER), grad, kept)
            store(b, kept, buf, i, lanes)
            ahead = b.fadd(grad, b.fmul(kept, s["momentum"]))
            grad = b.select(flag(SGD_NESTEROV), ahead, kept)
        store(b, b.fadd(param, b.fmul(grad, s["neg_lr"])), p, i, lanes)

    flat_loop(fn, n, body)


class NativeOptimizers:
    """``adam(...)`` and ``sgd(...)`` over C-contiguous float32 arrays of one size."""

    def __init__(self, compiled):
        self._adam = compiled.cfunc(
            "kiln_adam",
            None,
            ctypes.c_int64,
            *[ctypes.c_void_p] * 5,
            ctypes.c_int64,
            *[ctypes.c_float] * len(_SCALARS),
        )
        sgd_args = (ctypes.c_int64, *[ctypes.c_void_p] * 3, ctypes.c_int64)
        sgd_args += (ctypes.c_float,) * len(_SGD_SCALARS)
        self._sgd = compiled.cfunc("kiln_sgd", None, *sgd_args)
        self._sgd_momentum = compiled.cfunc("kiln_sgd_momentum", None, *sgd_args)

    def adam(
        self, p, g, m, v, v_max, scalars: dict, *, maximize: bool, decay: str, small: bool
    ) -> None:
        """One Adam update in place: ``decay`` "coupled", "decoupled" or "" (none), ``small``
        the lerp's formula for a weight below 0.5; ``scalars`` maps each of ``_SCALARS`` to a
        float32."""
        flags = (MAXIMIZE if maximize else 0) | (SMALL if small else 0)
        flags |= {"coupled": COUPLED_DECAY, "decoupled": DECOUPLED_DECAY}.get(decay, 0)
        addresses = [data_address(a) for a in (p, g, m, v, v_max)]
        self._adam(p.size, *addresses, flags, *[scalars[name] for name in _SCALARS])

    def sgd(
        self,
        p,
        g,
        buf,
        scalars: dict,
        *,
        maximize: bool,
        decay: bool,
        new_buffer: bool,
        nesterov: bool,
    ) -> None:
        """One SGD update in place; ``buf`` the momentum buffer (None without momentum; with
        ``new_buffer`` its memory is only written), ``scalars`` each of ``_SGD_SCALARS`` as a
        float32, ``decay`` whether the weight-decay term is added at all."""
        flags = (SGD_MAXIMIZE if maximize else 0) | (SGD_NEW_BUFFER if new_buffer else 0)
        flags |= (SGD_DECAY if decay else 0) | (SGD_NESTEROV if nesterov else 0)
        words = [scalars[name] for name in _SGD_SCALARS]
        if buf is None:
            self._sgd(p.size, data_address(p), data_address(g), None, flags, *words)
        else:
            addresses = [data_address(a) for a in (p, g, buf)]
            self._sgd_momentum(p.size, *addresses, flags, *words)


def build() -> NativeOptimizers:
    """Compile (or load from the object cache) the optimizer updates."""
    return NativeOptimizers(compile_module(_module(), opt_level=3))
