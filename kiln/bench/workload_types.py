"""What a benchmark workload is, and the seeded values every copy of it starts from.

A workload's ``build(lib, quick, device)`` returns an :class:`Instance` written only against the
torch-compatible API, so one definition runs in kiln and in PyTorch. Values come from a numpy
generator seeded by a name, so every instance (kiln eager, compiled, PyTorch) starts identical
and their first outputs can be compared.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Instance",
    "Workload",
    "seeded_rng",
    "randn_tensor",
    "int_tensor",
    "set_parameters",
]


@dataclass
class Instance:
    """One ready-to-run copy of a workload: ``fn(*args)`` is one step.

    ``arg_sets`` (when given) are the arguments of successive steps, used in turn (a workload
    whose batch size changes from step to step); ``args`` is then the first of them.
    ``compile_with`` (when given) says how a user compiles this program: it takes the library's
    ``compile`` and returns the step to time (DCGAN compiles its two models, not the step).
    """

    fn: Callable
    args: tuple = ()
    arg_sets: tuple[tuple, ...] = ()
    compile_with: Callable[[Callable], Callable] | None = None

    def __post_init__(self):
        # dumps and logs are named after the function: keep ``<locals>`` out of them
        self.fn.__qualname__ = self.fn.__name__
        if self.arg_sets:
            self.args = self.arg_sets[0]
        else:
            self.arg_sets = (self.args,)

    def compiled(self, compile: Callable) -> Callable:
        """The step as compiled with ``compile`` (``kiln.compile`` or ``torch.compile``)."""
        if self.compile_with is not None:
            return self.compile_with(compile)
        return compile(self.fn)


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str  # what one step computes, with the default (full-size) shapes
    build: Callable[[object, bool, str], Instance]
    trains: bool = False  # a step mutates parameters (forward + backward + optimizer)
    # the bytes one step must read and write at least (a memory-bound kernel), by ``quick``
    moved_bytes: Callable[[bool], int] | None = None
    in_quick: bool = True  # part of the ``--quick`` suite
    opt_in: bool = False  # run only when named (too slow or too large for the default suite)
    # a step is a whole program whose shapes change from call to call: its compiled first run
    # (every capture and compile included) is reported against an eager run, end to end
    end_to_end: bool = False


def seeded_rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def training_step(lib, model, optimizer, loss: str = "mse_loss"):
    """``train_step(x, target)``: zero_grad + forward + ``loss`` + backward + optimizer step, as
    a user writes it (and compiles it), in ``lib`` (kiln or torch)."""
    loss_fn = getattr(lib.nn.functional, loss)

    def train_step(x, target):
        optimizer.zero_grad()
        value = loss_fn(model(x), target)
        value.backward()
        optimizer.step()
        return value

    return train_step


def randn_tensor(lib, rng: np.random.Generator, shape: tuple, device: str):
    return lib.tensor(rng.standard_normal(shape, dtype=np.float32), device=device)


def int_tensor(lib, rng: np.random.Generator, high: int, shape: tuple, device: str):
    """int64 values in [0, high): token ids, class labels."""
    return lib.tensor(rng.integers(0, high, size=shape, dtype=np.int64), device=device)


def set_parameters(lib, model, rng: np.random.Generator) -> None:
    """Give ``model`` the same parameters in every library: matrices and filters
    ~ N(0, 1/fan_in), biases ~ N(0, 0.01), other vectors (norm scales) ones."""
    with lib.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if len(shape) >= 2:
                fan_in = math.prod(shape[1:]) if len(shape) > 2 else shape[-1]
                value = rng.standard_normal(shape, dtype=np.float32) / math.sqrt(fan_in)
            elif name.endswith("bias"):
                value = (0.01 * rng.standard_normal(shape)).astype(np.float32)
            else:
                value = np.ones(shape, dtype=np.float32)
            p.copy_(lib.tensor(value, device=p.device))
