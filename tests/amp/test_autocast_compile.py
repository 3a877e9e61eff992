"""Autocast under ``kiln.compile``: a ``with autocast`` region is captured into the graph (its
casts become nodes), results equal eager, and the global autocast state is guarded, so a
function compiled outside a region recompiles inside one instead of reusing the wrong graph."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.dynamo.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    kiln.dynamo.reset()
    yield
    kiln.dynamo.reset()


def _data(*shape, k: float = 1.0) -> kiln.Tensor:
    n = int(np.prod(shape))
    return kiln.tensor(np.cos(np.arange(n) * 0.37 * k).reshape(shape).astype(np.float32))


def _assert_equal(actual, expected):
    """Same dtypes; 16-bit values bit-equal; float32 values equal but for the order in which a
    compiled reduction adds (a few ulps)."""
    for a, e in zip(actual, expected):
        assert a.dtype is e.dtype
        rtol = 3e-7 if a.dtype is kiln.float32 else 0
        np.testing.assert_allclose(
            a.detach().float().numpy(), e.detach().float().numpy(), rtol=rtol, atol=0
        )


def regions(x, w):
    """Ops inside, outside and in a disabled region nested in an enabled one."""
    y = x @ w
    with kiln.autocast("cpu"):
        z = (x @ w).relu()
        with kiln.autocast("cpu", enabled=False):
            u = z.float() @ w.T
        m = kiln.cat([z, y])
    return y, z, u, m, F.mse_loss(z.float(), y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_region_inside_compiled_function_is_one_graph_equal_to_eager(backend):
    x, w = _data(3, 4), _data(4, 4, k=1.3)
    counter = CompileCounter(backend)
    compiled = kiln.compile(regions, backend=counter, fullgraph=True)
    _assert_equal(compiled(x, w), regions(x, w))
    _assert_equal(compiled(x, w), regions(x, w))
    assert counter.frame_count == 1
    assert not kiln.is_autocast_enabled("cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_call_inside_a_region_equals_eager(backend):
    x, w = _data(3, 4), _data(4, 4, k=1.3)
    compiled = kiln.compile(regions, backend=backend)
    with kiln.autocast("cpu", dtype=kiln.float16):
        expected = regions(x, w)
        _assert_equal(compiled(x, w), expected)


def test_global_autocast_state_is_guarded():
    counter = CompileCounter("eager")
    model = kiln.nn.Linear(4, 3)
    compiled = kiln.compile(model, backend=counter)
    x = _data(2, 4)
    assert compiled(x).dtype is kiln.float32
    with kiln.autocast("cpu"):
        assert compiled(x).dtype is kiln.bfloat16
        assert compiled(x).dtype is kiln.bfloat16
    with kiln.autocast("cpu", dtype=kiln.float16):
        assert compiled(x).dtype is kiln.float16
    assert compiled(x).dtype is kiln.float32
    assert counter.frame_count == 3


def test_gradients_through_a_compiled_region_match_eager():
    w_eager = _data(4, 3).requires_grad_()
    w_compiled = _data(4, 3).requires_grad_()
    x = _data(5, 4)

    def loss_fn(x, w):
        with kiln.autocast("cpu"):
            out = (x @ w).relu()
        return (out.float() ** 2).sum()

    loss_fn(x, w_eager).backward()
    kiln.compile(loss_fn, backend="aot_eager")(x, w_compiled).backward()
    assert w_compiled.grad.dtype is kiln.float32
    np.testing.assert_array_equal(w_compiled.grad.numpy(), w_eager.grad.numpy())


def test_decorated_forward_compiles_without_breaks():
    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = kiln.nn.Parameter(_data(4, 4, k=0.8))

        @kiln.autocast("cpu")
        def forward(self, x):
            return (x @ self.weight).relu()

    net = Net()
    x = _data(2, 4)
    explanation = kiln.dynamo.explain(net)(x)
    assert explanation.graph_break_count == 0
    out = kiln.compile(net, backend="aot_eager")(x)
    assert out.dtype is kiln.bfloat16
    np.testing.assert_array_equal(out.detach().float().numpy(), net(x).detach().float().numpy())


SIXTEEN_BIT_FUNCTIONS = {
    "linear_bias": lambda x, w: F.linear(x, w, w[0]),
    "gelu": lambda x, w: F.gelu(x @ w),
    "silu_mish": lambda x, w: F.silu(x) + F.mish(x),
    "softmax": lambda x, w: F.softmax(x, -1),
    "layer_norm": lambda x, w: F.layer_norm(x, (4,)),
    "mse_loss": lambda x, w: F.mse_loss(x, w[:3]),
    "var_mean": lambda x, w: x.var(0) + x.mean(1).sum(),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", [kiln.bfloat16, kiln.float16])
@pytest.mark.parametrize("name", list(SIXTEEN_BIT_FUNCTIONS))
def test_sixteen_bit_composites_compile_to_eager_values(name, dtype, backend):
    """A decomposed op with a fused eager kernel computes in float32 and rounds once, like the
    kernel, so autocast regions (and 16-bit models) give the same values compiled."""
    fn = SIXTEEN_BIT_FUNCTIONS[name]
    x, w = (_data(3, 4) * 3).to(dtype), _data(4, 4, k=1.3).to(dtype)
    _assert_equal([kiln.compile(fn, backend=backend)(x, w)], [fn(x, w)])


def _record(value):
    """A value passed through a graph break (an HF model's ``ModelOutput``, which dynamo does
    not model, breaks the graph inside ``with autocast`` the same way)."""
    kiln.compiler.graph_break()
    return value


def broken_regions(x, w):
    """Graph breaks inside an autocast region, inside a region nested in it, and in the
    region again after the nested one ended."""
    y = x.relu()
    with kiln.autocast("cpu", dtype=kiln.bfloat16):
        y = y @ w
        z = _record(y) @ w  # a break in the region
        with kiln.autocast("cpu", enabled=False):
            q = _record(z.float() @ w) * 2  # a break in a nested region
        z = _record(z @ w) + q  # a break after the nested region ended
        inside = kiln.is_autocast_enabled("cpu")
    return y, z, q, inside, kiln.is_autocast_enabled("cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_breaks_inside_regions_resume_compiled_and_equal_eager(backend):
    x, w = _data(3, 4), _data(4, 4, k=1.3)
    counter = CompileCounter(backend)
    compiled = kiln.compile(broken_regions, backend=counter)
    expected = broken_regions(x, w)
    for _ in range(2):
        got = compiled(x, w)
        _assert_equal(got[:3], expected[:3])
        assert got[3:] == expected[3:] == (True, False)
        assert not kiln.is_autocast_enabled("cpu")  # every region left at run time
    assert counter.frame_count == 4  # the frame and three resume functions: none ran eagerly


def test_an_exception_after_a_break_inside_a_region_leaves_the_region():
    w = _data(4, 4)

    def raising(x):
        with kiln.autocast("cpu", dtype=kiln.bfloat16):
            _record(x @ w)
            raise ValueError("in the region")

    with pytest.raises(ValueError, match="in the region"):
        kiln.compile(raising)(_data(3, 4))
    assert not kiln.is_autocast_enabled("cpu")


@pytest.mark.parametrize("amp", [False, True], ids=["nullcontext", "autocast"])
def test_a_break_inside_an_optional_autocast_block_resumes_compiled(amp):
    """``ctx = autocast() if amp else nullcontext()``: either block resumes compiled."""
    import contextlib

    w = _data(4, 4, k=0.7)

    def step(x):
        with kiln.autocast("cpu") if amp else contextlib.nullcontext():
            y = _record(x @ w) @ w
        return y

    counter = CompileCounter("eager")
    x = _data(3, 4)
    _assert_equal([kiln.compile(step, backend=counter)(x)], [step(x)])
    assert counter.frame_count == 2
    assert not kiln.is_autocast_enabled("cpu")
