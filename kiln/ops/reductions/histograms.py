"""``histogramdd``: the joint histogram of points in D dimensions.

The input's last dim holds a point's D coordinates (its other dims are points). Bins are given
per dim as a count (edges spaced evenly over ``range`` or over the data's extent, made with
``linspace`` in the input's dtype, as PyTorch makes them) or as a tensor of increasing edges.
A point falls in the bin whose left edge is at or below it, the last edge closing the last bin;
points outside every range are left out. The result's values depend on data only, so it runs on
the CPU data (under capture it raises, a graph break), binning in float64 like ``histogram``.
"""

from __future__ import annotations

import numpy as np

from ...runtime.dtypes import torch_type_name
from ..core.common import Tensor, wrap
from ..core.registry import return_type, torch_function
from ..creation.factories import linspace

__all__: list[str] = []

_histogramdd_result = return_type("histogramdd", ("hist", "bin_edges"))


def _check_input(input: Tensor, weight: Tensor | None) -> None:
    if not input.dtype.is_floating_point:
        raise NotImplementedError(
            f"\"histogramdd\" not implemented for '{torch_type_name(input.dtype)}'"
        )
    if input.ndim < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    if weight is not None:
        if weight.dtype is not input.dtype:
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor "
                f"should have the same dtype, but got input({input.dtype}), and "
                f"weight({weight.dtype})"
            )
        if tuple(weight.shape) != tuple(input.shape[:-1]):
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided it should have the same shape "
                f"as the input tensor excluding its innermost dimension, but got input with shape "
                f"{tuple(input.shape)} and weight with shape {tuple(weight.shape)}"
            )


def _even_edges(points: np.ndarray, input: Tensor, counts: list, range_) -> list[Tensor]:
    """Edges spaced evenly per dim: over ``range`` pairs, else over the data's extent (a dim
    whose points are all equal gets a bin width of one around them; no points: [0, 1])."""
    dims = points.shape[1]
    if range_ is not None and len(range_) != 2 * dims:
        raise RuntimeError(
            f"torch.histogramdd: for a {dims}-dimensional histogram range should have "
            f"{2 * dims} elements, but got {len(range_)}"
        )
    edges = []
    for d in range(dims):
        if counts[d] <= 0:
            raise RuntimeError(
                f"torch.histogramdd(): bins must be > 0, but got {counts[d]} for dimension {d}"
            )
        if range_ is not None:
            lo, hi = float(range_[2 * d]), float(range_[2 * d + 1])
        elif points.shape[0]:
            lo, hi = float(points[:, d].min()), float(points[:, d].max())
        else:
            lo, hi = 0.0, 1.0
        if lo > hi:
            raise RuntimeError(
                f"torch.histogramdd: min should not exceed max, but got min {lo:g} max {hi:g} "
                f"for dimension {d}"
            )
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise RuntimeError(
                f"torch.histogramdd: range of [{lo:g}, {hi:g}] is not finite for dimension {d}"
            )
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(linspace(lo, hi, counts[d] + 1, dtype=input.dtype, device=input.device))
    return edges


def _given_edges(bins, input: Tensor, dims: int) -> list[Tensor]:
    if len(bins) != dims:
        raise RuntimeError(
            f"torch.histogramdd: expected {dims} sequences of bin edges for each of the {dims} "
            f"dimensions of the input, but got {len(bins)}"
        )
    for d, edge in enumerate(bins):
        if edge.dtype is not input.dtype:
            raise RuntimeError(
                "torch.histogramdd: input tensor and bins tensors should have the same dtype, "
                f"but got input {input.dtype} and bins for dimension {d} {edge.dtype}"
            )
        if edge.ndim != 1 or edge.numel() < 1:
            raise RuntimeError(
                f"torch.histogramdd: bins tensor should have one dimension and at least 1 "
                f"element, but got {edge.ndim} dimensions and {edge.numel()} elements for "
                f"dimension {d}"
            )
    return list(bins)


@torch_function()
def histogramdd(
    input: Tensor,
    bins=10,
    *,
    range: list[float] | None = None,  # noqa: A002 - PyTorch's name
    weight: Tensor | None = None,
    density: bool = False,
):
    """``(hist, bin_edges)``: counts (or summed ``weight``) of the points in each D-dim bin,
    normalised to a density when asked (see the module docstring)."""
    _check_input(input, weight)
    dims = input.shape[-1]
    points = input._read_numpy("histogramdd").reshape(-1, dims)
    if isinstance(bins, Tensor):
        bins = [bins]
    if isinstance(bins, (list, tuple)) and bins and all(isinstance(b, Tensor) for b in bins):
        edges = _given_edges(bins, input, dims)
    else:
        counts = [int(bins)] * dims if isinstance(bins, int) else [int(b) for b in bins]
        if len(counts) != dims:
            raise RuntimeError(
                f"torch.histogramdd: expected {dims} bin counts for each of the {dims} "
                f"dimensions of the input, but got {len(counts)}"
            )
        edges = _even_edges(points, input, counts, range)
    edge_values = [e._read_numpy("histogramdd").astype(np.float64) for e in edges]
    weights = None
    if weight is not None:
        weights = weight._read_numpy("histogramdd").reshape(-1).astype(np.float64)
    hist, _ = np.histogramdd(
        points.astype(np.float64), bins=edge_values, weights=weights, density=False
    )
    if density:
        total = hist.sum()
        widths = np.ix_(*[np.diff(e) for e in edge_values])
        volume = np.ones_like(hist)
        for width in widths:
            volume = volume * width
        with np.errstate(divide="ignore", invalid="ignore"):
            hist = hist / total / volume
    result = wrap(np.ascontiguousarray(hist.astype(input.dtype.np)), input.dtype)
    return _histogramdd_result(result, tuple(edges))
