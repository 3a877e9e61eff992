"""Order statistics and summaries: cummax/cummin, mode, quantile/nanquantile, cov/corrcoef,
histogram and unique_consecutive.

cummax/cummin are ops (numpy ``accumulate`` kernels, an O(n^2) masked-reduction decomposition,
and a derivative that sends each gradient to the index that produced the value); among equal
values the latest index wins, and NaN propagates, as in PyTorch. mode is an op with a sort-based
kernel (no decomposition: the compiler runs it eagerly). quantile, cov and corrcoef are
composites over sort/gather/lerp/matmul. histogram and unique_consecutive read data: eager
kernels only (unique_consecutive's output shape depends on the values).
"""

from __future__ import annotations

import warnings

import numpy as np

from ...amp.autocast_mode import autocast_policy
from ...runtime import dtypes as dt
from ...runtime.symbolic import statically_known_true
from ..core.common import Tensor, TensorOrScalar, c_contiguous, fake, wrap, wrap_dim
from ..core.complex_support import complex_not_implemented
from ..core.out_arguments import writes_out
from ..core.registry import OPS, defop, return_type, tensor_method, torch_function
from ..creation.factories import arange, full
from ..indexing.gather_scatter import gather, scatter_add
from ..indexing.subscript import DataDependentOutputError
from ..linalg.matmul import mm
from ..pointwise.unary_binary import where
from ..random.fills import C_FLOAT_NAMES, C_TYPE_NAMES
from .reduce import amax, amin, known_any, scatter_back, sum, torch_type_name
from .sorting import may_hold_nan, sort
from .stl_order import REPLAY_LIMIT, std_sort

__all__: list[str] = []

_int64 = dt.int64
_bool = dt.bool_

# ------------------------------------------------------------------------------ cummax / cummin


def _cum_extreme_schema(self: Tensor, dim: int): ...


def _lowest(d: dt.dtype, largest: bool):
    """The largest (``largest``) or smallest value of ``d``: the masked-out filler of the
    decomposition (cummax fills with the smallest, cummin with the largest)."""
    if d is _bool:
        return largest
    if d.is_floating_point:
        return float("inf") if largest else float("-inf")
    info = np.iinfo(d.np)
    return int(info.max) if largest else int(info.min)


def _cum_extreme_kernel(op, ufunc):
    def kernel(x, dim):
        d = wrap_dim(dim, x.ndim)
        a = x._data
        if not a.ndim:
            return op.returns(wrap(a.copy(), x._dtype), wrap(np.zeros((), np.int64), _int64))
        a = c_contiguous(a)  # PyTorch's results are contiguous, as the meta's
        values = ufunc.accumulate(a, axis=d) if a.shape[d] else a.copy()
        # the latest position holding the running extreme (or a NaN) names it
        marks = (a == values) | (a != a)
        positions = np.arange(a.shape[d]).reshape((-1,) + (1,) * (a.ndim - 1 - d))
        indices = np.maximum.accumulate(np.where(marks, positions, 0), axis=d)
        return op.returns(wrap(values, x._dtype), wrap(indices.astype(np.int64), _int64))

    return kernel


def _cum_extreme_meta(op):
    def meta(x, dim):
        wrap_dim(dim, x.ndim)
        return op.returns(fake(x._shape, x._dtype, x), fake(x._shape, _int64, x))

    return meta


def _cum_extreme_grad(c, g, _g_indices=None):
    x, dim = c.args
    if not x.ndim:
        return (g, None)
    return (scatter_add(g.new_zeros(x.shape), wrap_dim(dim, x.ndim), c.out[1], g), None)


def _cum_extreme_decomp(op, largest: bool):
    # values[i] = extreme over j <= i (an O(n^2) masked reduction over the (n, n) triangle, as
    # the scans in scans.py); the index is the latest j <= i that set a running extreme or holds a
    # NaN. The returned values are gathered at that index so the gradient reaches exactly that
    # element, as the kernel's derivative does (amax's derivative would split it among ties).
    def decomposition(x, dim):
        if not x.ndim:
            return op.returns(x.clone(), full((), 0, dtype=_int64, device=x.device))
        d = wrap_dim(dim, x.ndim)
        n = x.shape[d]
        if n == 0:
            return op.returns(x.clone(), full(x.shape, 0, dtype=_int64, device=x.device))
        row = x.movedim(d, -1)
        positions = arange(0, n, 1, dtype=_int64, device=x.device)
        upto = positions.unsqueeze(1) >= positions.unsqueeze(0)  # [i, j]: j <= i
        reduce = amax if largest else amin
        plain = row.detach()
        extremes = reduce(where(upto, plain.unsqueeze(-2), _lowest(x.dtype, not largest)), -1)
        marks = (plain == extremes) | (plain != plain)
        indices = amax(where(upto & marks.unsqueeze(-2), positions, 0), -1)
        values = gather(row, -1, indices)
        return op.returns(values.movedim(-1, d), indices.movedim(-1, d))

    return decomposition


cummax, cummin = (
    defop(
        _cum_extreme_schema,
        name=name,
        kind="scan",
        returns=("values", "indices"),
        complex_refused=complex_not_implemented(f"{name}_cpu"),
    )
    for name in ("cummax", "cummin")
)
cummax.result_layout = cummin.result_layout = "contiguous"  # as PyTorch's
for _op, _ufunc, _largest in ((cummax, np.maximum, True), (cummin, np.minimum, False)):
    _op.register_kernel(_cum_extreme_kernel(_op, _ufunc))
    _op.register_meta(_cum_extreme_meta(_op))
    _op.register_derivative(_cum_extreme_grad, save_output=(1,), save_inputs=())
    _op.register_decomposition(_cum_extreme_decomp(_op, _largest))


# ------------------------------------------------------------------------------ mode


@defop(kind="sort", returns=("values", "indices"))
def mode(self: Tensor, dim: int = -1, keepdim: bool = False): ...


def _check_mode_dtype(x, *rest) -> None:
    """PyTorch's kernel has no complex version; a scalar is its own mode, without it."""
    if x._dtype.is_complex and x.ndim:
        raise NotImplementedError(f"\"mode_cpu\" not implemented for '{torch_type_name(x._dtype)}'")


def _mode_rows(rows: np.ndarray):
    """Most frequent value of each row (the smallest among equally frequent ones) and the last
    position where it occurs."""
    order = np.argsort(rows, axis=1, kind="stable")
    ordered = np.take_along_axis(rows, order, 1)
    values = np.empty(rows.shape[0], rows.dtype)
    indices = np.empty(rows.shape[0], np.int64)
    # which of equal values names the position is std::sort's doing beyond 16 elements, and
    # with NaNs anywhere: replayed unless the input is large
    replay = np.ones(rows.shape[0], bool) if rows.size <= REPLAY_LIMIT else None
    if replay is None:
        replay = np.isnan(rows).any(axis=1) if may_hold_nan(rows) else ()
    for r in range(rows.shape[0]):
        if len(replay) and replay[r]:
            values[r], indices[r] = _mode_by_std_sort(rows[r].tolist())
            continue
        s = ordered[r]
        starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
        lengths = np.diff(np.append(starts, s.size))
        best = int(np.argmax(lengths))
        values[r] = s[starts[best]]
        indices[r] = order[r, starts[best] + lengths[best] - 1]
    return values, indices


def _mode_by_std_sort(values: list):
    """PyTorch's scan after ``std::sort`` by value (replayed): the last of the longest run wins,
    the first such run in sorted order; NaN equals nothing, so each NaN is a run of its own and
    one the sort leaves first can be the mode."""
    seq = [(v, i) for i, v in enumerate(values)]
    std_sort(seq, lambda a, b: a < b)  # (it compares the values)
    best, best_count, count = seq[0], 0, 0
    for k, pair in enumerate(seq):
        count += 1
        if k == len(seq) - 1 or pair[0] != seq[k + 1][0]:
            if count > best_count:
                best, best_count = pair, count
            count = 0
    return best


@mode.register_kernel
def _mode_kernel(x, dim, keepdim):
    _check_mode_dtype(x)
    d = wrap_dim(dim, x.ndim)
    a = x._data
    if not a.ndim:
        return mode.returns(wrap(a.copy(), x._dtype), wrap(np.zeros((), np.int64), _int64))
    if a.shape[d] == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    moved = np.moveaxis(a, d, -1)
    values, indices = _mode_rows(moved.reshape(-1, a.shape[d]))
    shape = moved.shape[:-1]
    values, indices = values.reshape(shape), indices.reshape(shape)
    if keepdim:
        values, indices = np.expand_dims(values, d), np.expand_dims(indices, d)
    return mode.returns(wrap(values, x._dtype), wrap(indices, _int64))


@mode.register_meta
def _mode_meta(x, dim=-1, keepdim=False):
    d = wrap_dim(dim, x.ndim)
    if not x.ndim:
        return mode.returns(fake((), x._dtype, x), fake((), _int64, x))
    if x.shape[d] == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    shape = tuple(1 if i == d else s for i, s in enumerate(x.shape) if keepdim or i != d)
    return mode.returns(fake(shape, x._dtype, x), fake(shape, _int64, x))


def _mode_grad(c, g, _g_indices=None):
    x, dim, keepdim = c.args
    if not x.ndim:
        return (g, None, None)
    d = wrap_dim(dim, x.ndim)
    indices = c.out[1]
    if not keepdim:
        g, indices = g.unsqueeze(d), indices.unsqueeze(d)
    return (scatter_back(g, indices, d, x.shape), None, None)


mode.check_in_meta(_check_mode_dtype)
mode.register_derivative(_mode_grad, save_output=True, save_inputs=())


# ------------------------------------------------------------------------------ quantile

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _check_quantile(input: Tensor, q, interpolation: str) -> None:
    if input.dtype not in (dt.float32, dt.float64):
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(
            "quantile() interpolation must be one of linear, lower, higher, midpoint or "
            f"nearest, but got {interpolation}"
        )
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise RuntimeError("quantile() q must be a scalar or 1D tensor")
        if q.dtype is not input.dtype:
            raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
        if known_any((q < 0) | (q > 1)):
            raise RuntimeError("quantile() q values must be in the range [0, 1]")
    elif not 0 <= q <= 1:
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")
    if statically_known_true("==", input.numel(), 0):  # a symbolic size is never 0
        raise RuntimeError("quantile() input tensor must be non-empty")


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan: bool) -> Tensor:
    _check_quantile(input, q, interpolation)
    if dim is None:
        row, d = input.reshape(-1), 0
    else:
        d = wrap_dim(dim, input.ndim)
        row = input.movedim(d, -1) if input.ndim else input.reshape(1)
    n = row.shape[-1]
    q_vec = q.reshape(-1) if isinstance(q, Tensor) else full((1,), q, dtype=input.dtype)
    ordered = sort(row, -1)[0]  # NaN sorts last
    nans = sum(row != row, -1, True)
    if ignore_nan:  # rank among the non-NaN values; an all-NaN slice picks a NaN
        rank = (q_vec * (n - nans - 1).to(input.dtype)).clamp(min=0)
    else:  # any NaN makes the quantile NaN: point at the last (NaN) element
        last = q_vec * (n - 1)  # n symbolic under dynamic shapes: float(n) would pin it
        rank = where(nans > 0, last.new_ones(()) * (n - 1), last)
    rank = rank.expand(row.shape[:-1] + (q_vec.shape[0],))
    if interpolation == "nearest":
        low = high = rank.round()
    else:
        low, high = rank.floor(), rank.ceil()
    low_values = gather(ordered, -1, low.to(_int64))
    if interpolation in ("lower", "nearest"):
        out = low_values
    else:
        high_values = gather(ordered, -1, high.to(_int64).clamp(max=n - 1))
        if interpolation == "higher":
            out = high_values
        else:
            weight = 0.5 if interpolation == "midpoint" else rank - low
            out = low_values.lerp(high_values, weight)
    if keepdim:
        if dim is None:
            out = out.reshape((1,) * input.ndim + (q_vec.shape[0],))
        elif input.ndim:
            out = out.unsqueeze(d)
    if isinstance(q, Tensor) and q.ndim == 1:
        return out.movedim(-1, 0)
    return out.squeeze(-1)


@torch_function()
@writes_out(exact_dtype=True, records_write=True)
@tensor_method()
@autocast_policy(cpu="fp32")
def quantile(
    input: Tensor,
    q: float | Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    interpolation: str = "linear",
) -> Tensor:
    """The ``q``-th quantiles along ``dim`` (all elements when None); NaN if a slice has NaN.
    A 1-D ``q`` adds a leading dim, one entry per quantile."""
    return _quantile(input, q, dim, keepdim, interpolation, ignore_nan=False)


@torch_function()
@writes_out(exact_dtype=True, records_write=True)
@tensor_method()
@autocast_policy(cpu="fp32")
def nanquantile(
    input: Tensor,
    q: float | Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    interpolation: str = "linear",
) -> Tensor:
    """``quantile`` ignoring NaNs (NaN only for slices with no other value)."""
    return _quantile(input, q, dim, keepdim, interpolation, ignore_nan=True)


# ------------------------------------------------------------------------------ cov / corrcoef


def _check_weights(name: str, w: Tensor, observations: int, integral: bool) -> None:
    if w.ndim > 1:
        raise RuntimeError(
            f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
            f"{w.ndim} dimensions"
        )
    if w.numel() != observations:
        raise RuntimeError(
            f"cov(): expected {name} to have the same numel as there are observations in the "
            f"input but got {w.numel()} != {observations}"
        )
    kind_ok = (
        (not w.dtype.is_floating_point and w.dtype is not _bool)
        if integral
        else (w.dtype.is_floating_point)
    )
    if not kind_ok:
        want = "integral" if integral else "floating point"
        raise RuntimeError(
            f"cov(): expected {name} to have {want} dtype but got {name} with "
            f"{torch_type_name(w.dtype)} dtype"
        )
    if known_any(w < 0):
        raise RuntimeError(f"cov(): {name} cannot be negative")


@torch_function()
@tensor_method()
def cov(
    input: Tensor,
    *,
    correction: int = 1,
    fweights: Tensor | None = None,
    aweights: Tensor | None = None,
) -> Tensor:
    """Covariance of the variables in the rows of ``input`` (observations in the columns),
    optionally weighted by frequency (``fweights``) and importance (``aweights``)."""
    if input.ndim > 2:
        raise RuntimeError(
            "cov(): expected input to have two or fewer dimensions but got an input with "
            f"{input.ndim} dimensions"
        )
    if input.dtype is _bool:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = x.to(dt.get_default_dtype())
    observations = x.shape[1]
    weights = None
    if fweights is not None:
        _check_weights("fweights", fweights, observations, integral=True)
        weights = fweights
    if aweights is not None:
        _check_weights("aweights", aweights, observations, integral=False)
        weights = aweights if weights is None else weights * aweights
    if weights is None:
        mean = x.mean(1, keepdim=True)
        norm = observations - correction
    else:
        total = sum(weights)
        mean = sum(x * weights, 1, True) / total
        if correction == 0:
            norm = total
        elif aweights is None:
            norm = total - correction
        else:
            norm = total - correction * sum(weights * aweights) / total
    if isinstance(norm, (int, float)):
        if norm <= 0:
            warnings.warn(
                "cov(): degrees of freedom is <= 0. Correction should be strictly less than the "
                "number of observations.",
                UserWarning,
                stacklevel=2,
            )
            norm = 0
    else:
        norm = norm.clamp(min=0)
    centered = x - mean
    scaled = centered if weights is None else centered * weights
    # the product with the conjugate: a complex variable's variance is real and non-negative.
    # PyTorch squeezes every result: one variable in a (1, N) input gives a 0-d covariance too
    return (mm(centered, scaled.t().conj().to(centered.dtype)) / norm).squeeze()


@torch_function()
@tensor_method()
def corrcoef(input: Tensor) -> Tensor:
    """Pearson correlation coefficients of the rows of ``input``, clipped to [-1, 1] (a complex
    coefficient's real and imaginary parts each, as PyTorch clips them)."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    variances = c.diagonal()
    stddev = (variances.real if c.dtype.is_complex else variances).sqrt()
    c = c / stddev.unsqueeze(1) / stddev.unsqueeze(0)
    if c.dtype.is_complex:
        return OPS["complex"](c.real.clamp(-1, 1), c.imag.clamp(-1, 1))
    return c.clamp(-1, 1)


# ------------------------------------------------------------------------------ histogram


@defop(kind="reduction", differentiable=False, returns=("hist", "bin_edges"))
def histogram(
    self: Tensor,
    bins: TensorOrScalar = 100,
    *,
    range: list[float] | None = None,  # noqa: A002
    weight: Tensor | None = None,
    density: bool = False,
): ...


def _check_histogram(x, bins, range_, weight) -> None:
    # PyTorch's kernels take floats; 16-bit ones except where the edges come from the data
    # (a bin count without a range, over a non-empty input)
    edges_from_data = not isinstance(bins, Tensor) and range_ is None and x.numel() != 0
    if not x._dtype.is_floating_point or (
        x._dtype in (dt.float16, dt.bfloat16) and edges_from_data
    ):
        raise NotImplementedError(
            f"\"histogramdd\" not implemented for '{torch_type_name(x._dtype)}'"
        )
    if weight is not None and weight._dtype is not x._dtype:
        names = {**C_TYPE_NAMES, **C_FLOAT_NAMES}
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor "
            f"should have the same dtype, but got input({names.get(x._dtype, x._dtype.name)}), "
            f"and weight({names.get(weight._dtype, weight._dtype.name)})"
        )
    if isinstance(bins, Tensor):
        if bins.ndim != 1 or bins.numel() < 1:
            raise RuntimeError("torch.histogramdd: bins tensor should have one dimension")
    elif bins <= 0:
        raise RuntimeError(f"torch.histogramdd(): bins must be > 0, but got {bins} for dimension 0")
    if range_ is not None and range_[0] > range_[1]:
        raise RuntimeError(
            f"torch.histogramdd: min should not exceed max, but got min {range_[0]:g} max "
            f"{range_[1]:g} for dimension 0"
        )


@histogram.register_kernel
def _histogram_kernel(x, bins, range_, weight, density):
    _check_histogram(x, bins, range_, weight)
    a = x._data.reshape(-1).astype(np.float64)
    if isinstance(bins, Tensor):
        edges = bins._data.astype(np.float64)
    else:
        if range_ is not None:
            lo, hi = float(range_[0]), float(range_[1])
        elif a.size:
            lo, hi = float(a.min()), float(a.max())
        else:
            lo, hi = 0.0, 1.0
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, int(bins) + 1).astype(x._dtype.np).astype(np.float64)
    w = None if weight is None else weight._data.reshape(-1).astype(np.float64)
    hist, _ = np.histogram(a, edges, weights=w, density=density)
    return histogram.returns(wrap(hist, x._dtype), wrap(edges, x._dtype))


@histogram.register_meta
def _histogram_meta(x, bins=100, range_=None, weight=None, density=False):
    _check_histogram(x, bins, range_, weight)
    n = bins.shape[0] - 1 if isinstance(bins, Tensor) else int(bins)
    return histogram.returns(fake((n,), x._dtype, x), fake((n + 1,), x._dtype, x))


# ------------------------------------------------------------------------------ unique_consecutive


@defop(kind="sort", differentiable=False, complex_refused=complex_not_implemented("unique"))
def _unique_consecutive(self: Tensor, dim: int | None = None): ...


_unique_consecutive.returns = return_type("unique_consecutive", ("values", "inverse", "counts"))


@_unique_consecutive.register_kernel
def _unique_consecutive_kernel(x, dim):
    a = x._data
    if dim is None:
        flat = a.reshape(-1)
        if flat.size:
            starts = np.concatenate(([True], flat[1:] != flat[:-1]))
        else:
            starts = np.zeros(0, bool)
        values = flat[starts]
        inverse_shape = a.shape
    else:
        d = wrap_dim(dim, a.ndim)
        moved = np.moveaxis(a, d, 0).reshape(a.shape[d] if a.ndim else 1, -1)
        if moved.shape[0]:
            changed = np.any(moved[1:] != moved[:-1], axis=1)
            starts = np.concatenate(([True], changed))
        else:
            starts = np.zeros(0, bool)
        # laid out as PyTorch's: the kept slices one after another, the dim moved back
        kept = np.ascontiguousarray(np.compress(starts, np.moveaxis(a, d, 0), axis=0))
        values = np.moveaxis(kept, 0, d)
        inverse_shape = starts.shape
    inverse = np.cumsum(starts) - 1
    counts = np.diff(np.append(np.flatnonzero(starts), starts.size))
    return _unique_consecutive.returns(
        wrap(values, x._dtype),
        wrap(inverse.reshape(inverse_shape), _int64),
        wrap(counts, _int64),
    )


@_unique_consecutive.register_meta
def _unique_consecutive_meta(x, dim=None):
    raise DataDependentOutputError("unique_consecutive has a data-dependent output shape")


@torch_function()
@tensor_method()
def unique_consecutive(
    input: Tensor, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
):
    """Collapse each run of equal consecutive elements (or slices along ``dim``) to one;
    optionally with each element's run number and the run lengths."""
    values, inverse, counts = _unique_consecutive(input, dim)
    if not (return_inverse or return_counts):
        return values
    return (values,) + ((inverse,) if return_inverse else ()) + ((counts,) if return_counts else ())
