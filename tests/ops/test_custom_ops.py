"""``kiln.library`` custom ops against PyTorch's ``torch.library``: each program is written once
against a framework module and run with ``torch`` and with ``kiln`` (eagerly, backward, and
compiled as one opaque graph node). No ``from __future__ import annotations``: PyTorch reads
the ops' annotations as types."""

import itertools
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.ops.core import custom_ops
from kiln.ops.core.registry import OPS
from tests.oracle import needs_torch, torch

pytestmark = needs_torch
_names = itertools.count()


@pytest.fixture(autouse=True)
def _forget_kiln_ops():
    """Remove the ops each test defines from kiln's registry: other tests walk every op."""
    before = set(OPS)
    yield
    for name in set(OPS) - before:
        custom_ops.remove(OPS[name].qualname)


def _fresh(prefix: str) -> str:
    """An op name no earlier test used (PyTorch's registrations outlive a test)."""
    return f"kilntest::{prefix}{next(_names)}"


def _sin_op(lib, name: str, *, autograd: bool = True, fake: bool = True):
    """``y * sin(x)`` computed in numpy (as custom ops wrapping other libraries do)."""
    Tensor = lib.Tensor

    @lib.library.custom_op(name, mutates_args=())
    def op(x: Tensor, y: float) -> Tensor:
        return lib.from_numpy(np.sin(x.numpy()) * y)

    if fake:

        @op.register_fake
        def _(x, y):
            return lib.empty_like(x)

    if autograd:

        def setup_context(ctx, inputs, output):
            x, y = inputs
            ctx.save_for_backward(x)
            ctx.y = y

        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.cos() * ctx.y, None

        op.register_autograd(backward, setup_context=setup_context)
    return op


def _both(program):
    """``program(lib)`` run with kiln and with PyTorch; their results as numpy, compared."""
    name = _fresh("op")
    got = program(kiln, name)
    expected = program(torch, name)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-6, atol=1e-6)
    return got


X = [0.1, 0.5, -1.0, 2.0, 3.0]


def test_custom_op_runs_eagerly_with_its_autograd_formula():
    def program(lib, name):
        op = _sin_op(lib, name)
        x = lib.tensor(X, requires_grad=True)
        out = op(x, 2.0)
        out.sum().backward()
        return out, x.grad

    _both(program)


def test_custom_op_is_reached_through_ops_namespace():
    def program(lib, name):
        _sin_op(lib, name)
        namespace, short = name.split("::")
        op = getattr(getattr(lib.ops, namespace), short)
        x = lib.tensor(X)
        return op(x, 3.0), op.default(x, 3.0)

    _both(program)


def test_compiled_custom_op_is_one_graph_node_with_eager_values_and_gradients():
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return kiln.dynamo.backends.lookup("inductor")(gm, example_inputs)

    def program(lib, name):
        op = _sin_op(lib, name)
        x = lib.tensor(X, requires_grad=True)

        def f(a):
            return op(a * 2, 3.0).relu() + 1

        backend = recording if lib is kiln else "inductor"
        out = lib.compile(f, fullgraph=True, backend=backend)(x)
        out.sum().backward()
        return out, x.grad

    _both(program)
    (gm,) = graphs
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert sum(isinstance(t, kiln.library.CustomOpDef) for t in targets) == 1


def test_custom_op_with_two_results_and_a_tensor_list():
    def program(lib, name):
        Tensor = lib.Tensor

        @lib.library.custom_op(name, mutates_args=())
        def op(xs: list[Tensor], scale: float) -> tuple[Tensor, Tensor]:
            total = sum(x.numpy() for x in xs) * scale
            return lib.from_numpy(total), lib.from_numpy(-total)

        @op.register_fake
        def _(xs, scale):
            return lib.empty_like(xs[0]), lib.empty_like(xs[0])

        a, b = lib.tensor(X), lib.tensor(X[::-1])
        eager = op([a, b], 2.0)
        compiled = lib.compile(lambda p, q: op([p, q], 2.0), fullgraph=True)(a, b)
        return (*eager, *compiled)

    _both(program)


def test_library_define_and_impl_style():
    def program(lib, name):
        namespace, short = name.split("::")
        library = lib.library.Library(namespace, "FRAGMENT")
        library.define(f"{short}(Tensor x, float alpha=1.0) -> Tensor")
        library.impl(short, lambda x, alpha=1.0: x * alpha + 1, "CPU")
        library.impl(short, lambda x, alpha=1.0: lib.empty_like(x), "Meta")
        op = getattr(getattr(lib.ops, namespace), short)
        x = lib.tensor(X)
        compiled = lib.compile(lambda t: op(t, 4.0) * 2, fullgraph=True)(x)
        return op(x, 3.0), op(x), compiled

    _both(program)


def test_register_fake_by_name():
    def program(lib, name):
        op = _sin_op(lib, name, fake=False)
        lib.library.register_fake(name)(lambda x, y: lib.empty_like(x))
        x = lib.tensor(X)
        return (lib.compile(lambda t: op(t, 2.0), fullgraph=True)(x),)

    _both(program)


def test_backward_without_a_formula_raises_as_pytorch():
    for lib in (torch, kiln):
        op = _sin_op(lib, _fresh("nograd"), autograd=False)
        out = op(lib.tensor(X, requires_grad=True), 2.0)
        with pytest.raises(RuntimeError, match="no autograd formula was registered"):
            out.sum().backward()


_TORCH_NO_FAKE = """
import pytest, torch
from tests.ops.test_custom_ops import X, _sin_op
op = _sin_op(torch, "kiln_test::nofake", fake=False)
with pytest.raises(Exception, match="There was no fake impl registered"):
    torch.compile(lambda t: op(t, 2.0) + 1, fullgraph=True)(torch.tensor(X))
"""


def test_compiling_without_a_fake_fails_with_fullgraph_and_breaks_without():
    op = _sin_op(kiln, _fresh("nofake"), fake=False)
    with pytest.raises(Exception, match="There was no fake impl registered"):
        kiln.compile(lambda t: op(t, 2.0) + 1, fullgraph=True)(kiln.tensor(X))
    report = kiln.dynamo.explain(lambda t: op(t, 2.0) + 1)(kiln.tensor(X))
    assert "register_fake" in str(report)


@needs_torch
def test_torch_refuses_a_fullgraph_compile_without_a_fake_alike():
    """PyTorch's side of the test above, in a process of its own: the failed compile leaves
    PyTorch's frame-evaluation shim holding a reference to every later Python call's arguments,
    which turned kiln's in-place gradient sums off for the tests that followed on the worker
    (tests/autograd/test_gradient_sums.py)."""
    run = subprocess.run(
        [sys.executable, "-c", _TORCH_NO_FAKE], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize(
    "annotations, message",
    [
        ("x, y: float", "Parameter x must have a type annotation"),
        ("x: Tensor, y: dict", "Parameter y has unsupported type"),
    ],
)
def test_bad_schemas_are_refused_as_pytorch_refuses_them(annotations, message):
    for lib in (torch, kiln):
        namespace = {"Tensor": lib.Tensor}
        exec(f"def f({annotations}) -> Tensor: return x", namespace)
        with pytest.raises(ValueError, match=message):
            lib.library.custom_op(_fresh("bad"), mutates_args=())(namespace["f"])


def test_missing_return_annotation_is_refused():
    def f(x: kiln.Tensor):
        return x

    with pytest.raises(ValueError, match="No return type annotation"):
        kiln.library.custom_op(_fresh("noret"), mutates_args=())(f)


def test_inferred_schema_text_matches_pytorch():
    for lib_a, lib_b in ((torch, kiln),):

        def make(lib):
            Tensor = lib.Tensor

            def f(
                x: Tensor, ys: list[Tensor], n: int, s: float = 2.0, *, flag: bool = False,
                o: Tensor | None = None,
            ) -> tuple[Tensor, Tensor]: ...  # fmt: skip

            return f

        expected = lib_a.library.infer_schema(make(lib_a), mutates_args=())
        assert kiln.library.infer_schema(make(lib_b), mutates_args=()) == expected


def test_unknown_schema_type_and_double_definition_raise_runtime_error():
    for lib in (torch, kiln):
        namespace, short = _fresh("lib").split("::")
        library = lib.library.Library(namespace, "FRAGMENT")
        with pytest.raises(RuntimeError, match="unknown type specifier"):
            library.define(f"{short}(Tensor x, floaty a) -> Tensor")
        library.define(f"{short}(Tensor x) -> Tensor")
        with pytest.raises(RuntimeError, match="multiple times"):
            library.define(f"{short}(Tensor x) -> Tensor")


def test_mutating_op_updates_its_input_and_breaks_the_graph():
    def program(lib, name):
        Tensor = lib.Tensor

        @lib.library.custom_op(name, mutates_args=("x",))
        def op(x: Tensor, v: float) -> None:
            x.numpy()[:] += v

        a = lib.tensor(X)
        op(a, 1.0)
        b = lib.tensor(X)
        lib.compile(lambda t: op(t, 2.0))(b)
        return a, b

    _both(program)


def test_opcheck_passes_for_a_well_defined_op():
    op = _sin_op(kiln, _fresh("check"))
    results = kiln.library.opcheck(op, (kiln.tensor(X, requires_grad=True), 2.0))
    assert set(results.values()) == {"SUCCESS"}


def test_opcheck_reports_a_fake_with_the_wrong_shape():
    op = _sin_op(kiln, _fresh("wrongfake"), fake=False)
    op.register_fake(lambda x, y: kiln.empty(1))
    results = kiln.library.opcheck(op, (kiln.tensor(X), 2.0), raise_exception=False)
    assert results["test_faketensor"] != "SUCCESS"
    with pytest.raises(kiln.library.OpCheckError):
        kiln.library.opcheck(op, (kiln.tensor(X), 2.0), test_utils="test_faketensor")


@pytest.mark.parametrize("mode", ["eager", "compiled", "dynamic"])
def test_optional_tensor_int_and_keyword_only_arguments(mode):
    """Pieces registered by name; ``setup_context`` gets the keyword-only arguments apart, as
    PyTorch passes them, and ``backward`` returns a gradient per positional input."""

    def program(lib, name):
        Tensor = lib.Tensor

        @lib.library.custom_op(name, mutates_args=(), device_types="cpu")
        def op(x: Tensor, w: Tensor | None, n: int, *, bias: float = 0.0) -> Tensor:
            out = x.numpy() * n + bias
            if w is not None:
                out = out * w.numpy()
            return lib.from_numpy(np.ascontiguousarray(out))

        lib.library.register_fake(name)(lambda x, w, n, *, bias=0.0: lib.empty_like(x))

        def setup_context(ctx, inputs, output, keyword_only_inputs):
            x, w, n = inputs
            ctx.n, ctx.bias = n, keyword_only_inputs["bias"]
            ctx.save_for_backward(x, w)

        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            if w is None:
                return grad * ctx.n, None, None
            return grad * ctx.n * w, grad * (x * ctx.n + ctx.bias), None

        lib.library.register_autograd(name, backward, setup_context=setup_context)
        x = lib.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
        w = lib.linspace(0.5, 2, 6).reshape(2, 3).requires_grad_()

        def f(x, w):
            return (op(x.sin(), w, 3, bias=0.5) * 2).sum() + op(x, None, 2).mean()

        if mode != "eager":
            f = lib.compile(f, fullgraph=True, dynamic=mode == "dynamic")
        out = f(x, w)
        out.backward()
        return out, x.grad, w.grad

    _both(program)


def test_define_and_impl_functions_then_opcheck():
    def program(lib, name):
        lib.library.define(name, "(Tensor x, int k=2) -> Tensor")
        lib.library.impl(name, "cpu")(lambda x, k=2: x * k)
        lib.library.register_fake(name)(lambda x, k=2: lib.empty_like(x))
        namespace, short = name.split("::")
        op = getattr(getattr(lib.ops, namespace), short)
        x = lib.arange(3.0)
        results = lib.library.opcheck(op.default, (x,))
        assert set(results.values()) == {"SUCCESS"}
        compiled = lib.compile(lambda t: op(t, k=3) + 1, fullgraph=True)(x)
        return op(x), op(x, 5), compiled

    _both(program)


def test_fake_with_a_data_dependent_size_compiles():
    def program(lib, name):
        Tensor = lib.Tensor

        @lib.library.custom_op(name, mutates_args=())
        def positive(x: Tensor) -> Tensor:
            values = x.numpy()
            return lib.from_numpy(values[values > 0].copy())

        @positive.register_fake
        def _(x):
            return x.new_empty(lib.library.get_ctx().new_dynamic_size())

        x = lib.tensor([1.0, -2.0, 3.0, -4.0, 5.0])
        compiled = lib.compile(lambda t: positive(t * 2) + 1, fullgraph=True)(x)
        return positive(x), compiled

    _both(program)


@pytest.mark.parametrize("result", ["input", "view"])
def test_a_result_aliasing_an_input_is_refused_as_pytorch(result):
    for lib in (torch, kiln):
        Tensor = lib.Tensor

        @lib.library.custom_op(_fresh("alias"), mutates_args=())
        def op(x: Tensor) -> Tensor:
            return x if result == "input" else x[1:]

        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            op(lib.ones(3))


def test_profiler_names_a_custom_op_by_its_qualified_name():
    for lib in (torch, kiln):
        name = _fresh("profiled")
        op = _sin_op(lib, name)
        with lib.profiler.profile() as prof:
            op(lib.tensor(X), 2.0)
        assert name in {event.key for event in prof.key_averages()}


def test_vmap_over_a_custom_op_with_and_without_a_rule():
    def program(lib, name):
        Tensor = lib.Tensor

        @lib.library.custom_op(name, mutates_args=())
        def total(x: Tensor) -> Tensor:
            return lib.from_numpy(np.asarray(x.numpy().sum(), dtype=np.float32))

        total.register_fake(lambda x: x.new_empty(()))
        batch = lib.arange(6.0).reshape(2, 3)
        without_rule = lib.vmap(total)(batch)
        total.register_vmap(lambda info, in_dims, x: (x.sum(dim=in_dims[0] + 1), 0))
        return without_rule, lib.vmap(total)(batch)

    _both(program)
