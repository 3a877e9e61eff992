"""Finite-difference checks of gradients (``gradcheck``) and of gradients of gradients (``gradgradcheck``).

Central differences in float64 against the analytical Jacobian built one output element at a
time with ``autograd.grad``; meant for small inputs, exactly like PyTorch's slow mode.
"""

from __future__ import annotations

import numpy as np

from ..runtime.tensor import Tensor
from .engine import grad as autograd_grad

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    """Numerical and analytical Jacobians disagree (raised unless raise_exception=False)."""


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _outputs(fn, inputs):
    return tuple(o for o in _as_tuple(fn(*inputs)) if isinstance(o, Tensor))


def _flat64(t: Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64).reshape(-1).copy()


def _numerical_jacobian(fn, inputs, diff_idx, eps):
    """Per (input, output) pair: a (numel_in, numel_out) matrix of central differences."""
    jacobians = []
    for i in diff_idx:
        x = inputs[i]
        columns = []
        data = x._data
        for k in range(x.numel()):
            idx = np.unravel_index(k, x.shape) if x.ndim else ()
            orig = data[idx].item() if x.ndim else data[()].item()
            # written straight into the buffer (no op, no version bump); fn runs with grad mode
            # as the caller has it, since gradgradcheck's fn itself calls autograd.grad
            data[idx] = orig + eps
            plus = [_flat64(o) for o in _outputs(fn, inputs)]
            data[idx] = orig - eps
            minus = [_flat64(o) for o in _outputs(fn, inputs)]
            data[idx] = orig
            columns.append([(p - m) / (2 * eps) for p, m in zip(plus, minus)])
        n_out = len(columns[0]) if columns else len(_outputs(fn, inputs))
        per_output = []
        for j in range(n_out):
            size_out = columns[0][j].size if columns else 0
            mat = np.zeros((x.numel(), size_out))
            for k, col in enumerate(columns):
                mat[k] = col[j]
            per_output.append(mat)
        jacobians.append(per_output)
    return jacobians


def _analytical_jacobian(fn, inputs, diff_idx):
    outputs = _outputs(fn, inputs)
    diff_inputs = [inputs[i] for i in diff_idx]
    jacobians = [[np.zeros((inputs[i].numel(), o.numel())) for o in outputs] for i in diff_idx]
    for j, out in enumerate(outputs):
        if not out.requires_grad:
            continue
        flat = out.reshape(-1)
        for m in range(out.numel()):
            grads = autograd_grad(flat[m], diff_inputs, retain_graph=True, allow_unused=True)
            for a, g in enumerate(grads):
                if g is not None:
                    jacobians[a][j][:, m] = g.detach().numpy().astype(np.float64).reshape(-1)
    return jacobians


def gradcheck(
    func,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    fast_mode: bool = False,
    **unused,
) -> bool:
    """True when autograd's gradients of ``func`` at ``inputs`` match finite differences."""
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    for i in diff_idx:
        if inputs[i].dtype.name != "float64":
            import warnings

            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point; "
                "gradcheck results may be unreliable",
                stacklevel=2,
            )
    numerical = _numerical_jacobian(func, inputs, diff_idx, eps)
    analytical = _analytical_jacobian(func, inputs, diff_idx)
    for a, i in enumerate(diff_idx):
        for j, (num, ana) in enumerate(zip(numerical[a], analytical[a])):
            if not np.allclose(ana, num, rtol=rtol, atol=atol, equal_nan=True):
                if not raise_exception:
                    return False
                worst = (
                    np.unravel_index(np.argmax(np.abs(ana - num)), num.shape) if num.size else ()
                )
                raise GradcheckError(
                    f"Jacobian mismatch for output {j} with respect to input {i},\n"
                    f"numerical:{num}\nanalytical:{ana}\n"
                    f"largest difference at {worst}: numerical {num[worst] if num.size else None} "
                    f"vs analytical {ana[worst] if ana.size else None}"
                )
    return True


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    **unused,
) -> bool:
    """gradcheck of the gradient itself: checks second derivatives (create_graph=True)."""
    from ..ops.creation.api import randn

    inputs = _as_tuple(inputs)
    outputs = _outputs(func, inputs)
    if grad_outputs is None:
        grad_outputs = tuple(randn(o.shape, dtype=o.dtype).requires_grad_(True) for o in outputs)
    grad_outputs = _as_tuple(grad_outputs)
    n_in = len(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]

    def first_grad(*args):
        ins = args[:n_in]
        gos = args[n_in:]
        outs = _outputs(func, ins)
        diff = [ins[i] for i in diff_idx]
        grads = autograd_grad(outs, diff, gos, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(
        first_grad,
        tuple(inputs) + tuple(grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
    )
