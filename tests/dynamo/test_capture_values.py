"""Capture suite, part 1: tensor code, Python constants, containers, builtins and math.

Each case is a small function compared with eager (values, argument state, exceptions) with the
number of graphs and graph breaks asserted.
"""

from __future__ import annotations

import collections
import functools
import math
import operator

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F

from .helpers import Case, check


def t(*shape, dtype=None):
    return kiln.randn(*shape) if dtype is None else kiln.randn(*shape).to(dtype)


# ---------------------------------------------------------------- tensors
def add_mul(x, y):
    return (x + y) * y - 1


def chained_methods(x):
    return x.exp().sum(dim=1).sqrt()


def operators_all(x, y):
    return x - y, x * y, x / y, -x, abs(x), x**2, 2**x, x @ y.T, x > y, x == y


def reflected_ops(x):
    return 1 - x, 2 / (x.abs() + 1), 3 * x, 1 + x


def functional_calls(x):
    return F.relu(x) + F.gelu(x) + kiln.tanh(x) + kiln.sigmoid(x)


def kiln_namespace(x, y):
    return kiln.cat([x, y], dim=0), kiln.stack([x, y]), kiln.where(x > 0, x, y)


def views_and_indexing(x):
    return x[0], x[:, 1:3], x[..., None], x.view(-1), x.reshape(4, 3), x.T, x.transpose(0, 1)


def tensor_attributes(x):
    return x * x.shape[0] + x.ndim + x.dim() + x.size(1) + x.numel()


def dtype_and_device(x):
    y = x.to(kiln.float64) if x.dtype == kiln.float32 else x
    return y.double() + 1, str(x.device), x.dtype.is_floating_point


def creation_inside(x):
    return x + kiln.ones(x.shape) + kiln.zeros_like(x) + kiln.arange(x.shape[1])


def tensor_literal(x):
    return x * kiln.tensor([1.0, 2.0, 3.0, 4.0])


def inplace_on_input(x):
    x.add_(1)
    x.mul_(2)
    return x


def inplace_on_intermediate(x):
    y = x.clone()
    y += 1
    y[0] = 5.0
    return y


def setitem_input(x):
    x[1] = 0.0
    return x.sum()


def reductions(x):
    return x.sum(), x.mean(0), x.max(dim=1).values, x.argmax(), x.std()


def multi_output_unpack(x):
    values, indices = x.max(dim=1)
    a, b = x.split(2, dim=1)
    return values, indices, a * 2, b


def iterate_tensor_rows(x):
    out = []
    for row in x:
        out.append(row * 2)
    return out


def matmul_chain(a, b, c):
    return (a @ b).relu() @ c


def int_tensor_ops(x):
    return x // 2, x % 3, x & 1, x << 1


def bool_tensor_ops(m):
    return ~m, m & m, m | ~m


def detach_in_graph(x):
    y = x * 2
    return y.detach() + y


def requires_grad_flow(x):
    return (x * 2).sum()


def no_tensor_at_all(a, b):
    return a + b, [a] * 2


# ---------------------------------------------------------------- constants and containers
def constant_args(x, scale, shift=1.0):
    return x * scale + shift


def string_constant(x, mode):
    if mode == "double":
        return x * 2
    return x


def tuple_arg(x, dims):
    return x.permute(*dims)


def list_of_tensors(xs):
    return sum(xs[1:], xs[0])


def dict_of_tensors(d):
    return d["a"] * d["b"], {"sum": d["a"] + d["b"], "n": len(d)}


def nested_containers(data):
    (a, b), rest = data
    return a + b + rest["c"][0]


def build_containers(x):
    lst = [x, x + 1]
    tup = (x * 2,)
    dct = {"k": x - 1}
    st = {1, 2, 3}
    return lst, tup, dct, len(st), 2 in st


def list_methods(x):
    items = []
    items.append(x)
    items.extend([x + 1, x + 2])
    items.insert(0, x * 0)
    last = items.pop()
    items.reverse()
    return items, last, len(items)


def dict_methods(x):
    d = {"a": x}
    d["b"] = x + 1
    d.update(c=x * 2)
    keys = list(d.keys())
    total = sum(d.values())
    popped = d.pop("a")
    return keys, total, popped, d.get("z", 7), "b" in d, list(d.items())


def slicing_lists(x):
    parts = [x, x * 2, x * 3, x * 4]
    return parts[1:3], parts[::-1][0], parts[-1]


def star_unpacking(x):
    first, *middle, last = [x, x + 1, x + 2, x + 3]
    return first + last, middle


def tuple_concat_repeat(x):
    a = (x,) + (x + 1,)
    return a * 2


def tuple_grown_from_empty(x):
    # transformers' ``all_hidden_states = all_hidden_states + (h,)`` over layers
    hidden_states = ()
    scales = (1, 2)
    for layer in range(3):
        x = x * 2 + layer
        hidden_states = hidden_states + (x,)
    hidden_states += (x.sin(),)
    return (x,) + hidden_states[1:], scales + (len(hidden_states),), () + (x.cos(),)


def fstring_of_constants(x, name):
    label = f"{name}-{x.shape[0]}:{3.14159:.2f}"
    return x * len(label), label


def string_methods(x, name):
    parts = "a,b,c".split(",")
    return x * len(parts), name.upper(), "-".join(parts)


def comparisons_of_constants(x, n):
    flags = (n < 3, n == 2, n != 2, n >= 1, 1 < n <= 5, n is None, n in (1, 2))
    return x + sum(flags)


def slice_object(x):
    s = slice(1, 3)
    return x[s], x[:, s]


def none_checks(x, y=None):
    if y is None:
        return x
    return x + y


# ---------------------------------------------------------------- builtins and math
def builtin_len_isinstance(x, xs):
    n = len(xs)
    is_t = isinstance(x, kiln.Tensor)
    is_list = isinstance(xs, (list, tuple))
    return x * n + float(is_t) + float(is_list)


def builtin_min_max_abs(x, a, b):
    return x * max(a, b) + min(a, b) + abs(a - b) + max([a, b, 3])


def builtin_range_enumerate_zip(x, ys):
    total = x
    for i, y in enumerate(ys):
        total = total + y * i
    for a, b in zip(range(3), range(10, 13)):
        total = total + a * b
    return total


def builtin_reversed_sorted(x, values):
    out = [x * v for v in reversed(values)]
    return out, sorted(values), sorted(values, reverse=True)


def builtin_getattr_hasattr(x):
    shape = getattr(x, "shape")
    has = hasattr(x, "dtype")
    missing = getattr(x, "no_such_attribute", 5)
    return x * shape[0] + has + missing


def builtin_conversions(x, n):
    return x * int(n) + float(n) + bool(n), str(n), round(2.567, 2), divmod(7, 2)


def builtin_all_any(x, flags):
    if all(flags):
        return x
    if any(flags):
        return x * 2
    return x * 3


def builtin_type_checks(x, v):
    if type(v) is int:
        return x + v
    return x - 1


def math_on_constants(x, d):
    scale = 1.0 / math.sqrt(d)
    return x * scale + math.pi + math.floor(2.5) + math.log(math.e) + math.exp(0) + math.cos(0)


def operator_module(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.getitem([x, y], 1), operator.neg(y)


def range_object(x, n):
    r = range(n)
    return x * len(r) + r[-1], list(r)


def min_of_tensor_shape(x):
    return x.reshape(min(x.shape), -1)


def builtins_with_key_functions(x, widths):
    tallest = max([x, x[:1], x[:2]], key=lambda p: p.shape[0])
    lowest = min(widths, key=lambda w: -w)
    pairs = sorted([(3, "c"), (1, "a"), (2, "b")], key=lambda kv: kv[0])
    first_of_ties = max(4, 7, 2, key=lambda v: v % 2)
    fallback = max([], default=9, key=lambda v: v)
    return tallest * lowest + first_of_ties + fallback, [name for _, name in pairs]


def device_predicates_are_constants(x):
    if x.is_xpu or x.is_mps or x.is_hpu or x.is_ipu or x.is_xla or x.is_vulkan or x.is_mtia:
        return x - 1
    if x.is_sparse or x.is_sparse_csr or x.is_quantized or x.is_mkldnn or x.is_nested:
        return x - 2
    return x + 1 if (x.is_cpu and not x.is_cuda and not x.is_meta) else x


CASES = [
    Case(add_mul, lambda: (t(3, 4), t(3, 4))),
    Case(chained_methods, lambda: (t(2, 5),)),
    Case(operators_all, lambda: (t(3, 3), t(3, 3))),
    Case(reflected_ops, lambda: (t(4),)),
    Case(functional_calls, lambda: (t(2, 3),)),
    Case(kiln_namespace, lambda: (t(2, 3), t(2, 3))),
    Case(views_and_indexing, lambda: (t(3, 4),)),
    Case(tensor_attributes, lambda: (t(3, 4),)),
    Case(dtype_and_device, lambda: (t(2, 2),)),
    Case(creation_inside, lambda: (t(3, 4),)),
    Case(tensor_literal, lambda: (t(2, 4),)),
    Case(inplace_on_input, lambda: (t(3),)),
    Case(inplace_on_intermediate, lambda: (t(3, 2),)),
    Case(setitem_input, lambda: (t(3, 2),)),
    Case(reductions, lambda: (t(3, 4),)),
    Case(multi_output_unpack, lambda: (t(3, 4),)),
    Case(iterate_tensor_rows, lambda: (t(3, 2),)),
    Case(matmul_chain, lambda: (t(2, 3), t(3, 4), t(4, 5))),
    Case(int_tensor_ops, lambda: (kiln.arange(6),)),
    Case(bool_tensor_ops, lambda: (kiln.tensor([True, False, True]),)),
    Case(detach_in_graph, lambda: (t(3).requires_grad_(),)),
    Case(requires_grad_flow, lambda: (t(3).requires_grad_(),)),
    Case(no_tensor_at_all, lambda: (2, 3), graphs=0),
    Case(constant_args, lambda: (t(3), 2.5)),
    Case(string_constant, lambda: (t(3), "double")),
    Case(tuple_arg, lambda: (t(2, 3, 4), (2, 0, 1))),
    Case(list_of_tensors, lambda: ([t(3), t(3), t(3)],)),
    Case(dict_of_tensors, lambda: ({"a": t(2), "b": t(2)},)),
    Case(nested_containers, lambda: (((t(2), t(2)), {"c": [t(2)]}),)),
    Case(build_containers, lambda: (t(2),)),
    Case(list_methods, lambda: (t(2),)),
    Case(dict_methods, lambda: (t(2),)),
    Case(slicing_lists, lambda: (t(2),)),
    Case(star_unpacking, lambda: (t(2),)),
    Case(tuple_concat_repeat, lambda: (t(2),)),
    Case(tuple_grown_from_empty, lambda: (t(2),)),
    Case(fstring_of_constants, lambda: (t(3), "name")),
    Case(string_methods, lambda: (t(3), "abc")),
    Case(comparisons_of_constants, lambda: (t(3), 2)),
    Case(slice_object, lambda: (t(4, 4),)),
    Case(none_checks, lambda: (t(3),), graphs=0),
    Case(builtin_len_isinstance, lambda: (t(3), [1, 2, 3])),
    Case(builtin_min_max_abs, lambda: (t(3), 2, 5)),
    Case(builtin_range_enumerate_zip, lambda: (t(3), [t(3), t(3)])),
    Case(builtin_reversed_sorted, lambda: (t(3), [3, 1, 2])),
    Case(builtin_getattr_hasattr, lambda: (t(3),)),
    Case(builtin_conversions, lambda: (t(3), 3)),
    Case(builtin_all_any, lambda: (t(3), [True, False])),
    Case(builtin_type_checks, lambda: (t(3), 4)),
    Case(math_on_constants, lambda: (t(3), 16)),
    Case(operator_module, lambda: (t(3), t(3))),
    Case(range_object, lambda: (t(3), 4)),
    Case(min_of_tensor_shape, lambda: (t(2, 6),)),
    Case(builtins_with_key_functions, lambda: (t(3), [2, 5, 1])),
    Case(device_predicates_are_constants, lambda: (t(3),)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_capture_matches_eager(case):
    check(case.fn, *case.make_args(), graphs=case.graphs, breaks=case.breaks)


def sort_with_key(x):
    parts = [x[:1], x, x[:2]]
    parts = sorted(parts, key=lambda p: -p.shape[0])
    ordered = sorted({"b": 2, "a": 1, "c": 0}.items(), key=lambda kv: kv[1])
    return kiln.cat(parts), [k for k, _ in ordered]


def test_sorted_with_a_key_function():
    check(sort_with_key, kiln.randn(3))


def sort_named_tensors(x):
    named = {"weight": x * 2, "bias": x + 1, "alpha": x.sin()}
    ordered = sorted(named.items())
    by_name = sorted([("b", x), ("a", x * 3)], reverse=True)
    return [name for name, _ in ordered], kiln.stack([t for _, t in ordered]), by_name


def tied_tensor_keys(x):
    return sorted([("a", x), ("a", x * 2)])


def test_sorted_pairs_of_names_and_tensors_order_by_the_names():
    check(sort_named_tensors, kiln.randn(3))
    # equal names would compare the tensors (a TypeError in eager): capture breaks there
    compiled = kiln.compile(tied_tensor_keys)
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value"):
        tied_tensor_keys(kiln.randn(3))
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value"):
        compiled(kiln.randn(3))


def numpy_math_on_shapes(x):
    d = x.shape[-1]
    return x / np.sqrt(d) + np.prod(x.shape) + np.float32(0.5) + np.pi


def test_numpy_functions_of_constants_fold():
    check(numpy_math_on_shapes, kiln.randn(2, 4))


def _compiled_with_counter(fn):
    from kiln.dynamo.testing import CompileCounter

    counter = CompileCounter("eager")
    return kiln.compile(fn, backend=counter, fullgraph=True), counter


def test_numpy_array_arguments_become_graph_inputs():
    """A compiled policy fed the environment's observation array: ``as_tensor`` / ``from_numpy``
    / ``tensor`` of it is an input read at each call (as PyTorch does), so new observations
    reuse the graph; another dtype is another graph."""
    net = kiln.nn.Linear(4, 2)

    def act(obs):
        x = kiln.as_tensor(obs, dtype=kiln.float32)
        return net(x).softmax(-1), kiln.from_numpy(obs).sum(), kiln.tensor(obs).mul_(2)

    compiled, counter = _compiled_with_counter(act)
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float32, np.float32, np.float64):
        obs = rng.standard_normal((3, 4)).astype(dtype)
        for got, expected in zip(compiled(obs), act(obs)):
            assert got.dtype == expected.dtype
            np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
        np.testing.assert_array_equal(obs, obs.astype(dtype))  # tensor() copied: obs unchanged
    assert counter.frame_count == 2


def test_numpy_array_attributes_are_read_at_each_call():
    """A filterbank kept on a module as an ndarray is not baked in: writes to it between calls
    are seen, and an in-place op on ``from_numpy`` of it writes through, as eagerly."""

    class Mel(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.filterbank = np.linspace(0, 1, 8, dtype=np.float32).reshape(4, 2)
            self.counts = np.zeros(2, dtype=np.int64)

        def forward(self, power):
            kiln.from_numpy(self.counts).add_(1)
            return power @ kiln.from_numpy(self.filterbank)

    mel = Mel()
    compiled, counter = _compiled_with_counter(mel)
    power = kiln.rand(3, 4)
    first = compiled(power)
    np.testing.assert_allclose(first.numpy(), (power @ kiln.from_numpy(mel.filterbank)).numpy())
    mel.filterbank *= 2
    np.testing.assert_allclose(compiled(power).numpy(), 2 * first.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(mel.counts, [2, 2])
    assert counter.frame_count == 1


_Point = collections.namedtuple("_Point", "x y")


def python_idioms(x):
    total = functools.reduce(operator.add, [x, x * 2, x * 3])
    p = _Point(1, 2)._replace(y=5)
    fields = p._asdict()
    return total * p.y + fields["x"], functools.reduce(lambda a, b: a * b, [2, 3], 1)


def test_reduce_and_namedtuple_helpers_are_captured():
    check(python_idioms, kiln.randn(3))


def leaf_and_data(x, w):
    y = x * w
    y.data.add_(1)
    return y, x.is_leaf, y.is_leaf, w.data.is_leaf, w.detach().is_leaf


def test_is_leaf_and_data_are_captured():
    w = kiln.randn(3).requires_grad_(True)
    check(leaf_and_data, kiln.randn(3), w)
