"""Code that eager refuses is refused compiled too: capture runs every op's meta on fake
tensors, and the metas make the kernels' checks that need no tensor values (an in-place
result's shape and dtype, a boolean mask's dtype, an empty reduction, a setitem's value
shape...). Without them a compiled program returned a result where PyTorch and kiln's eager
mode raise. Checked against PyTorch's exception type where PyTorch is installed."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


def _set_rows(lib, x):
    y = x.clone()
    y[lib.tensor([0, 1])] = lib.arange(15.0).reshape(3, 5)
    return y


CASES = {
    "in-place result grows self": lambda lib, x: x[:1].clone().add_(x),
    "int add_ of a float": lambda lib, x: lib.zeros(3, dtype=lib.int64).add_(1.5),
    "int mul_ by a float tensor": lambda lib, x: lib.ones(3, dtype=lib.int64).mul_(
        lib.tensor([1.5])
    ),
    "int exp_": lambda lib, x: lib.tensor([4, 2]).exp_(),
    "int div_": lambda lib, x: lib.tensor([5, 2]).div_(2),
    "setitem value shape": _set_rows,
    "index_put_ value shape": lambda lib, x: x.clone().index_put_(
        (lib.tensor([0, 1]),), lib.ones(3)
    ),
    "index_put_ value dtype": lambda lib, x: x.clone().index_put_(
        (lib.tensor([0]),), lib.tensor([1.5], dtype=lib.float64)
    ),
    "max of nothing": lambda lib, x: lib.zeros(0).max() + 1,
    "argmax of nothing": lambda lib, x: lib.zeros(0).argmax() + 1,
    "amax over an empty dim": lambda lib, x: lib.zeros(3, 0).amax(1),
    "max(dim) over an empty dim": lambda lib, x: lib.zeros(3, 0).max(1).values,
    "negated bool": lambda lib, x: -(x > 5),
    "int where condition": lambda lib, x: lib.where((x - 3).int(), x, -1.0),
    "uint8 masked_fill mask": lambda lib, x: x.masked_fill(lib.ones(4, 5, dtype=lib.uint8), 0.0),
    "clamp without bounds": lambda lib, x: x.clamp(),
    "bitwise and of floats": lambda lib, x: x & 1,
    "shift of floats": lambda lib, x: x << 1,
}


def _error(fn, *args):
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        return error
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_code_refuses_what_eager_and_pytorch_refuse(name):
    case = CASES[name]
    expected = _error(case, torch, torch.arange(20.0).reshape(4, 5))
    assert expected is not None, "PyTorch accepts this: not a refusal case"
    x = kiln.arange(20.0).reshape(4, 5)
    eager = _error(case, kiln, x)
    compiled = _error(kiln.compile(lambda x: case(kiln, x)), x)
    assert isinstance(eager, type(expected)), (eager, expected)
    assert isinstance(compiled, type(expected)), (compiled, expected)
    assert str(compiled).splitlines()[0] == str(eager).splitlines()[0]


def test_valid_neighbours_of_the_refused_cases_still_compile():
    """The checks refuse only what eager refuses: leading 1s of a setitem value, a float
    ``add_`` of an int tensor, ``clamp`` with one bound, a uint8 ``where`` condition."""

    def fn(lib, x):
        y = x.clone()
        y[lib.tensor([0])] = lib.ones(1, 1, 5)
        y.add_(lib.ones(5, dtype=lib.int64))
        return lib.where((x > 3).to(lib.uint8), y.clamp(max=7.0), -y) + lib.ones(3, 0).amax(0).sum()

    x = kiln.arange(20.0).reshape(4, 5)
    expected = fn(torch, torch.arange(20.0).reshape(4, 5)).numpy()
    kiln.testing.assert_close(kiln.compile(lambda x: fn(kiln, x))(x), kiln.from_numpy(expected))


# an index read from a tensor outside its dimension: eager raises (IndexError or RuntimeError,
# as PyTorch's eager op does); compiled kernels set an error flag the wrapper raises from (the
# exception type eager raises), naming the user's line, instead of returning what a clamped
# load read
OUT_OF_RANGE = {
    "x[idx] past the end": lambda lib, x: x[lib.tensor([4])] * 2,
    "x[idx] before the start": lambda lib, x: x[lib.tensor([-9])] * 2,
    "index_fill": lambda lib, x: x.clone().index_fill(0, lib.tensor([7]), 1.0),
    "gather": lambda lib, x: lib.gather(x, 0, lib.tensor([[9]])) + 1,
    "gather of a negative index": lambda lib, x: lib.gather(x, 1, lib.tensor([[4], [-1]])) + 1,
    "scatter": lambda lib, x: x.scatter(0, lib.tensor([[9]]), 1.0),
    "scatter_add of a negative index": lambda lib, x: x.scatter_add(
        0, lib.tensor([[-1, 0]]), lib.ones(1, 2)
    ),
    "index_add": lambda lib, x: x.index_add(0, lib.tensor([5]), lib.ones(1, 5)),
    "index_add of a negative index": lambda lib, x: x.index_add(
        0, lib.tensor([-1]), lib.ones(1, 5)
    ),
    "scatter of a negative index": lambda lib, x: x.scatter(0, lib.tensor([[-1]]), 1.0),
    "index_select along dim 0": lambda lib, x: x.index_select(0, lib.tensor([4])),
    "take": lambda lib, x: lib.take(x, lib.tensor([20, -21])),
    "embedding": lambda lib, x: lib.nn.functional.embedding(lib.tensor([4, 1]), x),
    "index_select": lambda lib, x: x.index_select(1, lib.tensor([5])),
    "index_put_": lambda lib, x: x.clone().index_put_((lib.tensor([7]),), lib.tensor(1.0)),
    # computed from the index without reading through it: checked by ``_checked_index``
    "embedding of a negative index": lambda lib, x: lib.nn.functional.embedding(
        lib.tensor([-1]), x
    ),
    "index_select of a negative index": lambda lib, x: x.index_select(1, lib.tensor([-1])),
    "one_hot": lambda lib, x: lib.nn.functional.one_hot(lib.tensor([3]), 3) + x.sum().long(),
    "cross_entropy target": lambda lib, x: lib.nn.functional.cross_entropy(
        x, lib.tensor([0, 1, 2, 9])
    ),
    "nll_loss negative target": lambda lib, x: lib.nn.functional.nll_loss(
        x, lib.tensor([0, 1, 2, -3])
    ),
    "masked_scatter of too few values": lambda lib, x: x.masked_scatter(x > -10, lib.ones(3)),
}


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_compiled_gathers_refuse_indices_out_of_range(name):
    case = OUT_OF_RANGE[name]
    expected = _error(case, torch, torch.arange(20.0).reshape(4, 5))
    x = kiln.arange(20.0).reshape(4, 5)
    eager = _error(case, kiln, x)
    compiled = _error(kiln.compile(lambda x: case(kiln, x)), x)
    assert type(eager) is type(expected), (eager, expected)
    assert type(compiled) is type(expected), (compiled, expected)
    assert "index out of bounds" in str(compiled)
    assert "test_compiled_refusals.py" in str(compiled)  # the user's line


def _gather_at_first_line(x, idx):
    return x[idx] * 2


def _gather_at_second_line(x, idx):
    return x[idx] * 2


def test_index_errors_name_the_line_of_the_graph_that_ran(tmp_path, monkeypatch):
    """Two functions with the same graph at different lines share cache entries (the key leaves
    lines out, in the AOT and the compiled-graph caches, and across processes), but each one's
    error names its own line, not the line of the function that stored the entry."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    x, bad = kiln.arange(5.0), kiln.tensor([7])
    for fn in (_gather_at_first_line, _gather_at_second_line):
        error = _error(kiln.compile(fn), x, bad)
        assert isinstance(error, IndexError), error  # as eager's x[idx] and PyTorch's
        line = fn.__code__.co_firstlineno + 1
        assert f"test_compiled_refusals.py:{line})" in str(error), (fn.__name__, str(error))


def test_compiled_gathers_of_valid_indices_still_run():
    """Negative indices count from the end where PyTorch lets them (``x[idx]``, ``take``),
    the last valid index is in range, and a batch of valid gathers sets no flag."""

    def fn(lib, x):
        rows = x[lib.tensor([-1, 0, 3])]
        picked = lib.gather(x, 1, lib.tensor([[4], [0], [1], [2]]))
        loss = lib.nn.functional.cross_entropy(x, lib.tensor([0, -100, 4, 2]))  # one ignored
        taken = lib.take(x, lib.tensor([19, -20])).sum()
        scattered = x.masked_scatter(x > 15, lib.arange(4.0) + 100)  # exactly enough values
        return rows.sum(0) + picked.sum() + taken + loss + scattered.sum(0)

    x = kiln.arange(20.0).reshape(4, 5)
    expected = fn(torch, torch.arange(20.0).reshape(4, 5)).numpy()
    kiln.testing.assert_close(kiln.compile(lambda x: fn(kiln, x))(x), kiln.from_numpy(expected))


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_rows_gathered_through_one_index_per_row(dtype):
    """An embedding row is read through one token id per row: compiled code loads it a vector at
    a time (the id shared by the lanes) and still flags an id outside the table, of either index
    dtype, while valid ids give PyTorch's rows and gradients."""
    table = np.arange(10 * 67, dtype=np.float32).reshape(10, 67) / 100

    def fn(lib, weight, ids):
        return (lib.nn.functional.embedding(ids, weight) * 2).sum(-1)

    ids = np.array([[3, 9, 0], [9, 1, 4]])
    weight = kiln.tensor(table, requires_grad=True)
    out = kiln.compile(lambda w, i: fn(kiln, w, i))(
        weight, kiln.tensor(ids).to(getattr(kiln, dtype))
    )
    out.sum().backward()
    t_weight = torch.tensor(table, requires_grad=True)
    expected = fn(torch, t_weight, torch.tensor(ids).to(getattr(torch, dtype)))
    expected.sum().backward()
    kiln.testing.assert_close(out, kiln.from_numpy(expected.detach().numpy()))
    kiln.testing.assert_close(weight.grad, kiln.from_numpy(t_weight.grad.numpy()))
    for bad in (10, -1):
        wrong = kiln.tensor([[3, bad]]).to(getattr(kiln, dtype))
        compiled = _error(kiln.compile(lambda w, i: fn(kiln, w, i)), weight.detach(), wrong)
        assert isinstance(compiled, IndexError), compiled  # as PyTorch's embedding
        assert "index out of bounds" in str(compiled)
