"""Forward-mode derivatives (``Op.jvp``) of the ops forward AD meets most.

Every other op gets its tangent from its backward by the double-vjp trick
(``forward_grad._double_vjp``), which runs the op again and two backward passes; these
rules compute ``J . t`` directly. A rule is ``jvp(args, tangents, out) -> tangent``:
``tangents`` lines up with the op's canonical ``args`` (None where an argument carries no
tangent, a number included), ``out`` is the op's result; a rule returning NotImplemented
leaves the call to the general way. Rules run with the dual level
suspended and under the caller's grad mode, so backward AD records them like any other ops.
"""

from __future__ import annotations

from .dispatch import dispatch
from .registry import OPS

__all__ = ["linear_in_first"]


def _sum(*terms):
    """The sum of the terms that are not None (None if all are)."""
    total = None
    for term in terms:
        if term is not None:
            total = term if total is None else total + term
    return total


def _scaled(t, alpha):
    if t is None or alpha == 1:
        return t
    return t * alpha


def linear_in_first(op) -> None:
    """``op`` is linear in its first argument (sum, mean, clone, advanced indexing, average
    pooling, embedding's weight, nll_loss's input): the tangent is the op applied to the first
    one's tangent, where the others carry none."""

    def jvp(args, tangents, out):
        if any(t is not None for t in tangents[1:]):
            return NotImplemented  # (nll_loss's weight) not linear there: the general way
        return dispatch(op, (tangents[0],) + tuple(args[1:]))

    op.register_jvp(jvp)


@OPS["add"].register_jvp
def _add(args, tangents, out):
    return _sum(tangents[0], _scaled(tangents[1], args[2]))


@OPS["sub"].register_jvp
def _sub(args, tangents, out):
    other = tangents[1]
    return _sum(tangents[0], None if other is None else -_scaled(other, args[2]))


@OPS["mul"].register_jvp
def _mul(args, tangents, out):
    a, b = args[0], args[1]
    ta, tb = tangents[0], tangents[1]
    return _sum(None if ta is None else ta * b, None if tb is None else a * tb)


@OPS["div"].register_jvp
def _div(args, tangents, out):
    a, b, rounding_mode = args
    if rounding_mode is not None:  # piecewise constant: a zero tangent, as PyTorch's
        return out * 0
    ta, tb = tangents[0], tangents[1]
    return _sum(None if ta is None else ta / b, None if tb is None else -(out * tb) / b)


@OPS["neg"].register_jvp
def _neg(args, tangents, out):
    return -tangents[0]


def _product_rule(op):
    def jvp(args, tangents, out):
        a, b = args[0], args[1]
        ta, tb = tangents[0], tangents[1]
        return _sum(
            None if ta is None else dispatch(op, (ta, b)),
            None if tb is None else dispatch(op, (a, tb)),
        )

    op.register_jvp(jvp)


for _name in ("mm", "bmm", "matmul"):
    _product_rule(OPS[_name])


@OPS["linear"].register_jvp
def _linear(args, tangents, out):
    x, weight, _ = args
    tx, tw, tb = tangents
    linear = OPS["linear"]
    return _sum(
        None if tx is None else dispatch(linear, (tx, weight, None)),
        None if tw is None else dispatch(linear, (x, tw, None)),
        tb,
    )


@OPS["convolution"].register_jvp
def _convolution(args, tangents, out):
    """Bilinear in input and weight, plus the bias per output channel."""
    x, weight, _, *geometry = args
    tx, tw, tb = tangents[0], tangents[1], tangents[2]
    convolution = OPS["convolution"]
    bias = None
    if tb is not None:
        bias = tb.reshape((1, -1) + (1,) * (out.ndim - 2))
    return _sum(
        None if tx is None else dispatch(convolution, (tx, weight, None, *geometry)),
        None if tw is None else dispatch(convolution, (x, tw, None, *geometry)),
        bias,
    )


@OPS["exp"].register_jvp
def _exp(args, tangents, out):
    return tangents[0] * out


@OPS["tanh"].register_jvp
def _tanh(args, tangents, out):
    return tangents[0] * (1 - out * out)


@OPS["sigmoid"].register_jvp
def _sigmoid(args, tangents, out):
    return tangents[0] * (out * (1 - out))


@OPS["relu"].register_jvp
def _relu(args, tangents, out):
    return tangents[0] * (out > 0)


@OPS["softmax"].register_jvp
def _softmax(args, tangents, out):
    """y = softmax(x): t_y = y * (t - <t, y>) along ``dim``."""
    tangent, dim = tangents[0].to(out.dtype), args[1]
    return out * (tangent - (tangent * out).sum(dim, keepdim=True))


@OPS["log_softmax"].register_jvp
def _log_softmax(args, tangents, out):
    """y = log_softmax(x): t_y = t - <t, exp(y)> along ``dim``."""
    tangent, dim = tangents[0].to(out.dtype), args[1]
    return tangent - (tangent * out.exp()).sum(dim, keepdim=True)


def _normalized_tangent(tx, normalized, sigma, dims):
    """The tangent of (x - mean) / sigma with the statistics of x over ``dims`` (layer and
    batch norm): (t - mean(t) - xhat * mean(t * xhat)) / sigma."""
    moved = tx - tx.mean(dims, keepdim=True)
    return (moved - normalized * (tx * normalized).mean(dims, keepdim=True)) / sigma


@OPS["layer_norm"].register_jvp
def _layer_norm(args, tangents, out):
    """y = xhat * w + b with xhat = (x - mean) / sigma over the normalized dims:
    t_xhat = (t - mean(t) - xhat * mean(t * xhat)) / sigma."""
    x, normalized_shape, weight, _, eps = args
    tx, tw, tb = tangents[0], tangents[2], tangents[3]
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    centered = x - x.mean(dims, keepdim=True)
    sigma = ((centered * centered).mean(dims, keepdim=True) + eps).sqrt()
    normalized = centered / sigma
    terms = []
    if tx is not None:
        moved = _normalized_tangent(tx, normalized, sigma, dims)
        terms.append(moved if weight is None else moved * weight)
    if tw is not None:
        terms.append(normalized * tw)
    return _sum(*terms, tb)


@OPS["_native_batch_norm"].register_jvp
def _batch_norm(args, tangents, out):
    """The output's tangent (the batch statistics are not differentiable outputs), from the
    batch's statistics in training (or without running ones), else from the running ones."""
    x, weight, _, running_mean, running_var, training, _, eps = args
    tx, tw, tb = tangents[0], tangents[1], tangents[2]
    if tangents[3] is not None or tangents[4] is not None:
        return NotImplemented
    dims = (0,) + tuple(range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    if training or running_mean is None:
        centered = x - x.mean(dims, keepdim=True)
        sigma = ((centered * centered).mean(dims, keepdim=True) + eps).sqrt()
        normalized = centered / sigma
        moved = None if tx is None else _normalized_tangent(tx, normalized, sigma, dims)
    else:
        sigma = (running_var + eps).sqrt().reshape(channel)
        normalized = (x - running_mean.reshape(channel)) / sigma
        moved = None if tx is None else tx / sigma
    terms = []
    if moved is not None:
        terms.append(moved if weight is None else moved * weight.reshape(channel))
    if tw is not None:
        terms.append(normalized * tw.reshape(channel))
    if tb is not None:
        terms.append(tb.reshape(channel))
    return (_sum(*terms).to(out[0].dtype), None, None)


@OPS["copy_"].register_jvp
def _copy(args, tangents, out):
    """The written tensor's new tangent: the source's, cast and broadcast (None: zero)."""
    self, source_tangent = args[0], tangents[1]
    if source_tangent is None:
        return None
    return source_tangent.to(self.dtype).expand(self.shape)


@OPS["_euclidean_cdist"].register_jvp
def _euclidean_cdist(args, tangents, out):
    """d_ij = |x1_i - x2_j|: its tangent is <x1_i - x2_j, t1_i - t2_j> / d_ij (0 where d is 0,
    as the backward's), from the exact differences (the product form cancels)."""
    x1, x2 = args
    t1, t2 = tangents
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    moved = _sum(
        None if t1 is None else t1.unsqueeze(-2), None if t2 is None else -t2.unsqueeze(-3)
    )
    along = (differences * moved).sum(-1)
    return OPS["where"](out == 0, 0.0, along / out)


def _max_pooled(args, tangents, out):
    """The tangent at each window's maximum: the input's tangent gathered at the indices
    (positions in each flattened plane, as PyTorch's)."""
    values, indices = out
    planes = indices.ndim - len(args[1])  # (kernel_size or output_size: one per spatial dim)
    flat_tangent = tangents[0].flatten(planes)
    gathered = flat_tangent.gather(-1, indices.flatten(planes)).reshape(values.shape)
    return (gathered, None)


for _name in ("_max_pool", "_adaptive_max_pool"):
    OPS[_name].register_jvp(_max_pooled)

for _name in ("sum", "mean", "clone", "index", "_avg_pool", "embedding", "nll_loss"):
    linear_in_first(OPS[_name])
