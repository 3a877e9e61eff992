"""``kiln.func``: composable function transforms (PyTorch's ``torch.func``).

``grad``/``vjp``/``jacrev``/``jacfwd``/``hessian``/``jvp`` are built on kiln's reverse-mode tape
(see ``transforms``); ``vmap`` is a loop over the batch (see ``vmap``); ``functional_call``
turns a module into a function of its parameters.
"""

from __future__ import annotations

from .functional_call import functional_call, stack_module_state
from .transforms import (
    functionalize,
    grad,
    grad_and_value,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    linearize,
    vjp,
)
from .vmap import vmap

__all__ = [
    "functional_call",
    "functionalize",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "linearize",
    "stack_module_state",
    "vjp",
    "vmap",
]
