"""Frame caches live as long as the functions they compile.

A program that compiles a fresh closure (or a function made by ``exec``) every step must not keep
every step's graphs, guards, analyses and resume functions: once the function and its compiled
wrapper are gone, so is everything captured for them. Functions still alive keep their caches.
"""

from __future__ import annotations

import functools
import gc
import weakref

import numpy as np

import kiln


def scaled(constant: float):
    def step(t):
        return t * constant + 1

    return step


def _assert_freed_after_compiling(make_step, count: int, watched=lambda step: step) -> None:
    """Compile and run ``count`` fresh steps (checked against eager), drop each, and assert that
    ``watched(step)`` of every one is garbage afterwards: no cache keeps it alive."""
    x = kiln.randn(3, 4)
    refs = []
    for i in range(count):
        step = make_step(i)
        np.testing.assert_allclose(kiln.compile(step)(x).numpy(), step(x).numpy(), rtol=1e-6)
        refs.append(weakref.ref(watched(step)))
        del step
    gc.collect()
    assert [ref() for ref in refs] == [None] * count


def test_a_dropped_closure_takes_its_compiled_graphs_with_it():
    _assert_freed_after_compiling(lambda i: scaled(i + 0.5), 5)


def test_a_live_function_keeps_its_cache_across_compile_calls():
    step = scaled(2.0)
    x = kiln.randn(3, 4)
    kiln.compile(step)(x)
    entries = kiln.compile(step)._kiln_cache.entries
    gc.collect()
    assert kiln.compile(step)._kiln_cache.entries is entries and len(entries) == 1


BREAKING_STEP = """
def step(x):
    y = x * {constant}
    if y.sum() > 0:  # a graph break: the rest runs as a resume function
        return y + 1
    return y - 1
"""


def test_code_made_at_run_time_leaves_nothing_behind():
    def make_step(i):
        namespace: dict = {}
        exec(compile(BREAKING_STEP.format(constant=i + 0.5), "<step>", "exec"), namespace)
        return namespace.pop("step")

    _assert_freed_after_compiling(make_step, 4, watched=lambda step: step.__code__)


def test_a_function_wrapped_from_a_compiled_one_gets_its_own_wrapper():
    """``functools.wraps`` copies ``__dict__``, where a function's compiled wrappers are kept."""
    step = scaled(3.0)
    x = kiln.randn(2, 2)
    kiln.compile(step)(x)

    @functools.wraps(step)
    def other(t):
        return t - 7

    np.testing.assert_allclose(kiln.compile(other)(x).numpy(), (x - 7).numpy())
    np.testing.assert_allclose(kiln.compile(step)(x).numpy(), step(x).numpy(), rtol=1e-6)


class _Trainer:
    """A model and its optimizer behind one step method (every instance runs the same code)."""

    def __init__(self, seed: int):
        kiln.manual_seed(seed)
        self.model = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.ReLU(), kiln.nn.Linear(8, 1))
        self.optimizer = kiln.optim.SGD(self.model.parameters(), lr=0.1)

    def step(self, x):
        self.optimizer.zero_grad()
        loss = self.model(x).sum()
        loss.backward()
        self.optimizer.step()
        return loss


_compiled_trainer_step = kiln.compile(_Trainer.step)


def test_a_deleted_model_leaves_the_cache_of_code_that_lives_on():
    # one compiled function stepping one model after another (a sweep, k-fold training): the
    # entries guarded on a deleted model are dropped, the model freed, and new models never
    # reach the recompile limit
    x = kiln.randn(3, 4)
    refs = []
    for seed in range(kiln.dynamo.config.recompile_limit + 3):
        trainer, reference = _Trainer(seed), _Trainer(seed)
        got = _compiled_trainer_step(trainer, x)
        np.testing.assert_allclose(got.item(), reference.step(x).item(), rtol=1e-6)
        refs.append(weakref.ref(trainer.model))
        del trainer, reference
        gc.collect()
    assert [ref() for ref in refs] == [None] * len(refs)
    assert _compiled_trainer_step._kiln_cache.eager_reason is None
