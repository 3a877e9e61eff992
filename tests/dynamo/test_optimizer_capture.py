"""Optimizers under ``kiln.compile``: ``step()`` and ``zero_grad()`` capture whole (no graph break
inside them), and a compiled training loop follows the eager one step for step.

An optimizer whose state starts as zeros (Adam's moments, RMSprop's averages ...) has that state
made before its first step is traced, as PyTorch's compiler runs ``_init_group``: one capture
serves every step. SGD's momentum buffer starts as a copy of the first gradient, so its first
step would create it and the second would be captured once more (PyTorch recompiles there
too); capture stops at the first new state entry and that step runs eagerly instead (its graph
would never run again): the backend sees one step graph.
Bias corrections stay tensors when captured (``kiln.compiler.is_compiling``), computed as eager
computes them, so the captured step gives eager's bits; inductor's fused kernels round
differently and are compared within float32 tolerance.
"""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.bench.workloads import get_workload
from kiln.dynamo.eval_frame import CompileContext
from kiln.dynamo.explain import ExplainOutput
from kiln.dynamo.testing import CompileCounter
from kiln.optim import (
    ASGD,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    NAdam,
    RAdam,
    RMSprop,
    Rprop,
)
from tests.oracle import assert_close, needs_torch, torch

from .helpers import assert_same

BACKENDS = ["eager", "aot_eager", "inductor"]
# name -> (make, whether the first step creates state the capture cannot make ahead of it:
# then the second step is captured again)
OPTIMIZERS = {
    "sgd": (lambda ps: SGD(ps, lr=0.1), False),
    "sgd_momentum": (lambda ps: SGD(ps, lr=0.1, momentum=0.9), True),
    "sgd_nesterov_weight_decay": (
        lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        True,
    ),
    "adam": (lambda ps: Adam(ps, lr=1e-2), False),
    "adam_weight_decay_amsgrad": (
        lambda ps: Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
        False,
    ),
    "adamw": (lambda ps: AdamW(ps), False),
    "adamw_maximize": (lambda ps: AdamW(ps, lr=1e-2, weight_decay=0.1, maximize=True), False),
    "rmsprop_momentum": (lambda ps: RMSprop(ps, lr=1e-2, momentum=0.5), False),
    "rmsprop_centered": (lambda ps: RMSprop(ps, lr=1e-2, centered=True), False),
    "adamax": (lambda ps: Adamax(ps, lr=1e-2), False),
    "nadam": (lambda ps: NAdam(ps, lr=1e-2), False),
    "radam": (lambda ps: RAdam(ps, lr=1e-2), False),
    "adadelta": (lambda ps: Adadelta(ps, lr=0.5), False),
    "asgd": (lambda ps: ASGD(ps, lr=1e-2), False),
    "rprop": (lambda ps: Rprop(ps, lr=1e-2), False),
    # Adagrad makes its state in __init__: the first captured step already finds it
    "adagrad": (lambda ps: Adagrad(ps, lr=0.1, lr_decay=0.01), False),
}


def _tolerance(backend: str, name: str = "") -> dict:
    """The eager backend runs the captured ops with eager's kernels in eager's order: the same
    bits (bias corrections included). AOT graphs run decompositions (today also bit-identical;
    allowed float32 rounding). Inductor's fused kernels round differently; the difference stays
    near float32 epsilon over the run, except where the update divides by a running RMS of small
    gradients (RMSprop's momentum buffer): there rounding differences grow step by step."""
    if backend == "eager":
        return {"rtol": 0, "atol": 0}
    if backend == "aot_eager":
        return {"rtol": 1e-6, "atol": 1e-7}
    return (
        {"rtol": 1e-3, "atol": 1e-4} if name.startswith("rmsprop") else {"rtol": 1e-5, "atol": 1e-6}
    )


def _model():
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def _assert_same_training_state(model, opt, twin, twin_opt, tol: dict) -> None:
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.is_leaf and p.grad_fn is None and p.requires_grad
        assert_same(p.detach(), q.detach(), name, **tol)
        state, expected = opt.state[p], twin_opt.state[q]
        assert list(state) == list(expected), name
        for key in expected:
            assert state[key].grad_fn is None, f"{name} {key} has autograd history"
            assert_same(state[key], expected[key], f"{name} state {key!r}", **tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_and_zero_grad_capture_whole_and_match_eager(name, backend):
    make, creates_state = OPTIMIZERS[name]
    model = _model()
    twin = copy.deepcopy(model)
    opt, twin_opt = make(model.parameters()), make(twin.parameters())
    step_counter, zero_counter = CompileCounter(backend), CompileCounter(backend)
    step = kiln.compile(opt.step, backend=step_counter, fullgraph=True)
    zero_grad = kiln.compile(opt.zero_grad, backend=zero_counter, fullgraph=True)
    x = kiln.randn(5, 8)
    graphs_after = []
    for _ in range(12):
        for m, o, do_step, do_zero in (
            (model, opt, step, zero_grad),
            (twin, twin_opt, twin_opt.step, twin_opt.zero_grad),
        ):
            do_zero()
            m(x).tanh().pow(2).sum().backward()
            do_step()
        graphs_after.append(step_counter.frame_count)
    # one graph compiled: the steady state (SGD's state-creating first step runs eagerly)
    assert graphs_after[0] == (0 if creates_state else 1)
    assert graphs_after[-1] == graphs_after[1] == 1
    # zero_grad(set_to_none=True) only writes Python attributes: nothing to compute
    assert zero_counter.frame_count == 0
    _assert_same_training_state(model, opt, twin, twin_opt, _tolerance(backend, name))


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_grad_in_place_is_one_graph_keeping_the_grad_tensors(backend):
    model = _model()
    opt = SGD(model.parameters(), lr=0.1)
    counter = CompileCounter(backend)
    zero_grad = kiln.compile(opt.zero_grad, backend=counter, fullgraph=True)
    for _ in range(3):
        model(kiln.randn(2, 8)).sum().backward()
        grads = [p.grad for p in model.parameters()]
        zero_grad(set_to_none=False)
        for p, g in zip(model.parameters(), grads):
            assert p.grad is g
            assert_same(g, kiln.zeros(g.shape))
    assert counter.frame_count == 1


def test_step_with_grads_missing_skips_those_parameters():
    model = _model()
    twin = copy.deepcopy(model)
    opt, twin_opt = Adam(model.parameters(), lr=0.1), Adam(twin.parameters(), lr=0.1)
    step = kiln.compile(opt.step, backend=CompileCounter(), fullgraph=True)
    for m in (model, twin):
        m[0](kiln.ones(1, 8)).sum().backward()  # only the first layer gets gradients
    step()
    twin_opt.step()
    assert len(opt.state) == len(twin_opt.state) == 2
    _assert_same_training_state(model, opt, twin, twin_opt, _tolerance("eager"))


def test_is_compiling_is_true_only_in_captured_code():
    def where_am_i(x):
        return x + 1, kiln.compiler.is_compiling()

    assert where_am_i(kiln.zeros(1))[1] is False
    assert kiln.compile(where_am_i, backend=CompileCounter())(kiln.zeros(1))[1] is True


# ---------------------------------------------------------------------- whole training steps


# The forward and backward are decomposed (AOT) and fused (inductor), so they round differently
# from eager. In the GPT block the gradient of the key bias is zero up to that rounding
# (softmax ignores a constant added to every score), and Adam scales such noise into steps of
# size ``lr``: there the parameters can only agree to a few ``lr``.
TRAIN_STEP_TOLERANCE = {
    "mlp_train_step": {"rtol": 1e-5, "atol": 1e-6},
    "gpt_block_train_step": {"rtol": 1e-4, "atol": 2e-3},
}


def _train_step_instances(name: str):
    """Two identical copies of a benchmark training step (model, AdamW and loss in a closure)."""
    workload = get_workload(name)
    return workload.build(kiln, True, "cpu"), workload.build(kiln, True, "cpu")


def _closure(instance) -> dict:
    return inspect.getclosurevars(instance.fn).nonlocals


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["mlp_train_step", "gpt_block_train_step"])
def test_compiled_train_step_matches_eager_with_one_break_at_backward(name, backend):
    eager, compiled_instance = _train_step_instances(name)
    counter = CompileCounter(backend)
    report = ExplainOutput()
    ctx = CompileContext(counter)
    ctx.listeners.append(report)
    compiled = ctx.wrapper_for(compiled_instance.fn)
    tol = TRAIN_STEP_TOLERANCE[name] if backend != "eager" else _tolerance("eager")
    graphs_after = []
    for _ in range(5):
        expected = eager.fn(*eager.args)
        loss = compiled(*compiled_instance.args)
        assert_same(loss, expected, "loss", rtol=1e-5, atol=1e-6)
        graphs_after.append(counter.frame_count)
    # before loss.backward() captured once (``zero_grad`` sets every grad to None without
    # reading it, so nothing guards on whether a backward ran before), after it once: AdamW's
    # state is made before its step is traced, so the second step does not recompile
    assert graphs_after == [2, 2, 2, 2, 2]
    assert len(report.break_reasons) == 1
    for reason in report.break_reasons:
        assert "Tensor.backward()" in reason.message
        assert reason.location.endswith(f"workload_types.py:{_backward_line()}")
    got, want = _closure(compiled_instance), _closure(eager)
    _assert_same_training_state(
        got["model"], got["optimizer"], want["model"], want["optimizer"], tol
    )


def _backward_line() -> int:
    from kiln.bench import workload_types

    source, first = inspect.getsourcelines(workload_types.training_step)
    return first + next(i for i, line in enumerate(source) if ".backward()" in line)


# ---------------------------------------------------------------------- inductor's kernels


def test_adam_step_is_one_fused_pass_per_parameter(monkeypatch, tmp_path):
    """The bias corrections (0-d, float64) are computed once, not per element of each update,
    and each parameter's moments and new value come out of one loop over its elements."""
    from kiln.inductor import compile_fx

    # an empty on-disk cache: a graph compiled by an earlier run would be rebuilt from its
    # stored wrapper, without the schedule this test reads
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))

    schedules = []
    original = compile_fx.compile_graph

    def recording(gm, example_inputs, *args, **kwargs):
        compiled = original(gm, example_inputs, *args, **kwargs)
        schedules.append(compiled.schedule)
        return compiled

    monkeypatch.setattr(compile_fx, "compile_graph", recording)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = Adam(model.parameters(), lr=1e-2)
    step = kiln.compile(opt.step, backend="inductor", fullgraph=True)
    for _ in range(2):
        model(kiln.randn(4, 8)).sum().backward()
        step()
    steady = max(schedules[-2:], key=lambda s: len(s.kernels))  # the forward, not the backward
    shapes = [tuple(p.shape) for p in model.parameters()]
    big = [k for k in steady.kernels if k.outer]
    assert sorted(k.outer for k in big) == sorted(shapes)
    for kernel in big:
        assert len(kernel.nodes) == 3  # exp_avg, exp_avg_sq and the parameter, in one loop


def _clip_step(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)
    opt.step()
    return loss.detach(), norm


def test_clip_grad_norm_inside_a_compiled_step_sees_the_gradients():
    kiln.manual_seed(0)
    model = nn.Linear(4, 2)
    twin = copy.deepcopy(model)
    opt = kiln.optim.SGD(model.parameters(), lr=0.5)
    twin_opt = kiln.optim.SGD(twin.parameters(), lr=0.5)
    step = kiln.compile(_clip_step, backend=CompileCounter())
    x, y = kiln.randn(3, 4), kiln.zeros(3, 2)
    for _ in range(3):
        loss, norm = step(model, opt, x, y)
        twin_loss, twin_norm = _clip_step(twin, twin_opt, x, y)
        assert_same(loss, twin_loss)
        assert_same(norm, twin_norm)
        assert float(norm) > 0
    assert_same(model.state_dict(), twin.state_dict())


def _line_search_step(model, direction):
    """TRPO's line search: the parameters as one vector, moved along a direction, written back
    with ``vector_to_parameters`` (which assigns each parameter's ``.data``)."""
    old = nn.utils.parameters_to_vector(model.parameters())
    nn.utils.vector_to_parameters(old - 0.5 * direction, model.parameters())
    return nn.utils.parameters_to_vector(model.parameters())


def test_vector_to_parameters_in_compiled_code_writes_the_parameters():
    kiln.manual_seed(0)
    model = nn.Linear(3, 2)
    twin = copy.deepcopy(model)
    step = kiln.compile(_line_search_step)
    direction = kiln.arange(8.0)
    for _ in range(2):
        assert_same(step(model, direction), _line_search_step(twin, direction))
    assert_same(model.state_dict(), twin.state_dict())


def _lr_step(model, opt, sched, x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.detach()


def _twin_runs(make_optimizer, make_schedule) -> list:
    """(model, optimizer, schedule) twice over one model and its deep copy: one run compiled,
    the other eager, from the same weights."""
    kiln.manual_seed(0)
    model = nn.Linear(3, 2)
    runs = []
    for m in (model, copy.deepcopy(model)):
        opt = make_optimizer(m.parameters())
        runs.append((m, opt, make_schedule(opt)))
    return runs


def test_compiled_step_with_a_per_step_lr_schedule_matches_eager(recwarn):
    runs = _twin_runs(
        lambda params: kiln.optim.Adam(params, lr=0.1),
        lambda opt: kiln.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10),
    )
    model, twin = runs[0][0], runs[1][0]
    counter = CompileCounter()
    step = kiln.compile(_lr_step, backend=counter)
    x = kiln.randn(4, 3)
    for _ in range(12):
        (m, opt, sched), (m2, opt2, sched2) = runs
        assert_same(step(m, opt, sched, x), _lr_step(m2, opt2, sched2, x))
        sched.step()
        sched2.step()
    assert_same(model.state_dict(), twin.state_dict())
    assert counter.frame_count <= 8
    assert not [w for w in recwarn if "recompiled" in str(w.message)]


def _step_then_schedule(model, opt, sched, x):
    """The Annotated Transformer's and timm's loops: the scheduler steps inside the step."""
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()
    return loss.detach()


@pytest.mark.parametrize(
    "schedule",
    [
        lambda opt: kiln.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1)),
        lambda opt: kiln.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=8),
    ],
    ids=["lambda", "one_cycle"],
)
def test_a_scheduler_stepped_in_the_compiled_step_matches_eager(schedule):
    # its first step reads optimizer.step._kiln_step_wrapped: it was a graph break
    runs = _twin_runs(lambda params: kiln.optim.SGD(params, lr=0.1, momentum=0.9), schedule)
    model, twin = runs[0][0], runs[1][0]
    report = ExplainOutput()
    ctx = CompileContext(CompileCounter())
    ctx.listeners.append(report)
    step = ctx.wrapper_for(_step_then_schedule)
    x = kiln.randn(4, 3)
    for _ in range(6):
        assert_same(step(*runs[0], x), _step_then_schedule(*runs[1], x))
        assert runs[0][2].get_last_lr() == runs[1][2].get_last_lr()
    assert_same(model.state_dict(), twin.state_dict())
    # (the schedule's counters and momenta change between calls: breaks of their own kind)
    assert not [r for r in report.break_reasons if "attribute" in r.message]


def test_a_cycled_momentum_keeps_the_compiled_optimizer_step():
    # OneCycleLR changes SGD's momentum every step; ``if momentum != 0`` read a value that
    # changes too often to bake in: a graph break inside the step's loop, which ran eagerly
    kiln.manual_seed(0)
    model = nn.Linear(3, 2)
    twin = copy.deepcopy(model)
    runs = []
    for m in (model, twin):
        opt = kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        runs.append((m, opt, kiln.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=30)))
    report = ExplainOutput()
    ctx = CompileContext(CompileCounter())
    ctx.listeners.append(report)
    step = ctx.wrapper_for(_step_then_schedule)
    x = kiln.randn(4, 3)
    for _ in range(20):
        assert_same(step(*runs[0], x), _step_then_schedule(*runs[1], x))
    assert_same(model.state_dict(), twin.state_dict())
    assert not [r for r in report.break_reasons if "momentum" in r.message]


def test_one_compiled_step_for_two_models_leaves_each_optimizers_state_alone():
    """Checking the first pair's guards against the second's arguments reads ``opt.state[p]``
    for the first model's parameters: a defaultdict must not grow empty entries from it (the
    second optimizer's ``state_dict()`` failed with a KeyError)."""
    models = [kiln.nn.Linear(3, 2, bias=False) for _ in range(2)]
    optimizers = [kiln.optim.Adam(m.parameters(), lr=0.1) for m in models]

    def step(model, opt, x):
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    compiled = kiln.compile(step)
    x = kiln.ones(4, 3)
    for model, opt in zip(models, optimizers):
        compiled(model, opt, x)
        compiled(model, opt, x)
    for model, opt in zip(models, optimizers):
        assert list(opt.state) == list(model.parameters())
        assert sorted(opt.state[model.weight]) == ["exp_avg", "exp_avg_sq", "step"]
        assert len(opt.state_dict()["state"]) == 1


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_train_step_compiles_sgds_steady_step_once_and_matches_pytorch(backend):
    """A compiled training step with SGD's momentum: the graph after ``backward()`` creates the
    momentum buffers on the first call and runs eagerly (capture stops at the first new entry);
    the second call's graph (buffers present) is the one compiled, and serves every later step.
    Parameters and momentum buffers equal PyTorch's eager training after each step."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((4, 6)).astype(np.float32)
    b0 = rng.standard_normal(4).astype(np.float32)
    xs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(4)]

    def trainer(lib):
        model = lib.nn.Linear(6, 4)
        with lib.no_grad():
            model.weight.copy_(lib.tensor(w0))
            model.bias.copy_(lib.tensor(b0))
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)

        def step(x):
            opt.zero_grad()
            loss = model(x).tanh().pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        return model, opt, step

    counter = CompileCounter(backend)
    model, opt, step = trainer(kiln)
    step = kiln.compile(step, backend=counter)
    t_model, t_opt, t_step = trainer(torch)
    frames = []
    for x in xs:
        assert_close(step(kiln.tensor(x)), t_step(torch.tensor(x)), rtol=1e-5, atol=1e-6)
        frames.append(counter.frame_count)
        for p, tp in zip(model.parameters(), t_model.parameters()):
            assert_close(p, tp, rtol=1e-5, atol=1e-6)
            assert_close(opt.state[p]["momentum_buffer"], t_opt.state[tp]["momentum_buffer"],
                         rtol=1e-5, atol=1e-6)  # fmt: skip
    # forward and backward once; the optimizer's update once, from the second call on
    assert frames == [1, 2, 2, 2]


@needs_torch
def test_a_fullgraph_sgd_step_runs_its_state_creating_first_call_eagerly():
    """``fullgraph=True`` on SGD's step: the first call, which creates the momentum buffers,
    runs eagerly (no graph break is raised: nothing in the code breaks), and the steady step
    is compiled once; the parameters follow PyTorch's eager SGD."""
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((3, 5)).astype(np.float32)
    grads = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(3)]

    def setup(lib):
        w = lib.nn.Parameter(lib.tensor(w0))
        return w, lib.optim.SGD([w], lr=0.05, momentum=0.8, nesterov=True)

    w, opt = setup(kiln)
    tw, t_opt = setup(torch)
    counter = CompileCounter("aot_eager")
    step = kiln.compile(opt.step, backend=counter, fullgraph=True)
    frames = []
    for g in grads:
        w.grad, tw.grad = kiln.tensor(g), torch.tensor(g)
        step()
        t_opt.step()
        frames.append(counter.frame_count)
        assert_close(w, tw, rtol=1e-6, atol=1e-6)
        assert_close(opt.state[w]["momentum_buffer"], t_opt.state[tw]["momentum_buffer"])
    assert frames == [0, 1, 1]
