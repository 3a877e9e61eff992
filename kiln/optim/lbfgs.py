"""``LBFGS``: limited-memory BFGS over all parameters flattened into one vector.

Each ``step(closure)`` runs up to ``max_iter`` quasi-Newton iterations, re-evaluating the
closure, with either a fixed step (``lr``, shortened on the very first iteration) or a line
search satisfying the strong Wolfe conditions. The curvature pairs, the last direction and the
counters live in the state of the first parameter, under PyTorch's keys, so state dicts are
interchangeable. Scalars that PyTorch keeps as 0-d tensors (dot products, ``H_diag``, ``ro``)
are kept as 0-d kiln tensors here too, so float32 runs round the same way. The loop branches on
values after every evaluation: it runs eagerly, never as one captured graph.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import ops
from ..autograd.grad_mode import enable_grad
from ..ops.creation import api
from ..runtime.tensor import Tensor
from .optimizer import Optimizer, check_lr, group_options, scalar_value

__all__ = ["LBFGS"]


class LBFGS(Optimizer):
    """L-BFGS (Nocedal & Wright, algorithm 7.4/7.5) after minFunc; one parameter group only."""

    def __init__(
        self,
        params,
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        check_lr(lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(
            params,
            group_options(
                locals(),
                "lr max_iter max_eval tolerance_grad tolerance_change history_size line_search_fn",
            ),
        )
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._numel_cache: int | None = None

    @property
    def _params(self) -> list[Tensor]:
        return self.param_groups[0]["params"]

    def _numel(self) -> int:
        if self._numel_cache is None:
            self._numel_cache = sum(p.numel() for p in self._params)
        return self._numel_cache

    # ------------------------------------------------------------------ flat views
    def _gather_flat_grad(self) -> Tensor:
        """All gradients as one vector (zeros for parameters without a gradient)."""
        pieces = [
            api.zeros(p.numel(), dtype=p.dtype, device=p.device)
            if p.grad is None
            else p.grad.reshape(-1)
            for p in self._params
        ]
        return ops.cat(pieces, 0)

    def _add_grad(self, step_size, direction: Tensor) -> None:
        """``params += step_size * direction``, slicing the flat direction back per parameter."""
        alpha = scalar_value(step_size)
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(direction[offset : offset + numel].view_as(p), alpha=alpha)
            offset += numel
        if offset != self._numel():
            raise AssertionError(f"Expected offset {offset} to equal {self._numel()}")

    def _clone_param(self) -> list[Tensor]:
        return [p.clone() for p in self._params]

    def _set_param(self, values: list[Tensor]) -> None:
        for p, value in zip(self._params, values, strict=True):
            p.copy_(value)

    def _directional_evaluate(self, closure, start: list[Tensor], t, direction: Tensor):
        """Loss and flat gradient at ``start + t * direction``; the parameters are restored."""
        self._add_grad(t, direction)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(start)
        return loss, flat_grad

    # ------------------------------------------------------------------ the step
    def step(self, closure: Callable[[], Tensor | float]):  # type: ignore[override]
        """Minimise for up to ``max_iter`` iterations; returns the closure's first loss."""
        if len(self.param_groups) != 1:
            raise AssertionError(
                f"Expected exactly one param_group, but got {len(self.param_groups)}"
            )

        def evaluate():
            with enable_grad():
                return closure()

        group = self.param_groups[0]
        lr = group["lr"]
        if isinstance(lr, Tensor):
            # a tensor rate stays a (0-d) tensor, as in PyTorch: so do the steps ``t``
            lr = lr.squeeze()
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad = group["tolerance_grad"]
        tolerance_change = group["tolerance_change"]
        line_search_fn = group["line_search_fn"]
        history_size = group["history_size"]

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = evaluate()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if flat_grad.abs().max() <= tolerance_grad:
            return orig_loss

        d = state.get("d")
        t = state.get("t")
        old_dirs = state.get("old_dirs")
        old_stps = state.get("old_stps")
        ro = state.get("ro")
        H_diag = state.get("H_diag")
        prev_flat_grad = state.get("prev_flat_grad")
        prev_loss = state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = flat_grad.neg()
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                y = flat_grad.sub(prev_flat_grad)
                s = d.mul(t)
                ys = y.dot(s)
                if ys > 1e-10:  # keep the pair only while the curvature stays positive
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / y.dot(y)
                if "al" not in state:
                    state["al"] = [None] * history_size
                d = _two_loop_direction(flat_grad, old_dirs, old_stps, ro, H_diag, state["al"])

            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.clone()
            else:
                prev_flat_grad.copy_(flat_grad)
            prev_loss = loss

            # the first iteration shortens the step to the gradient's size
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:  # not a descent direction (any more)
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                start = self._clone_param()

                def along_d(step_length, start=start, d=d):
                    return self._directional_evaluate(evaluate, start, step_length, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    along_d, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
                opt_cond = flat_grad.abs().max() <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    loss = float(evaluate())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = flat_grad.abs().max() <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if d.mul(t).abs().max() <= tolerance_change:  # the step no longer moves
                break
            if abs(loss - prev_loss) < tolerance_change:  # the loss no longer moves
                break

        state["d"] = d
        state["t"] = t
        state["old_dirs"] = old_dirs
        state["old_stps"] = old_stps
        state["ro"] = ro
        state["H_diag"] = H_diag
        state["prev_flat_grad"] = prev_flat_grad
        state["prev_loss"] = prev_loss
        return orig_loss


def _two_loop_direction(flat_grad, old_dirs, old_stps, ro, h_diag, al) -> Tensor:
    """The quasi-Newton direction ``-H g`` by the two-loop recursion over the stored pairs
    (``al`` is scratch space kept in the state, as PyTorch keeps it)."""
    q = flat_grad.neg()
    for i in range(len(old_dirs) - 1, -1, -1):
        al[i] = old_stps[i].dot(q) * ro[i]
        q.add_(old_dirs[i], alpha=-scalar_value(al[i]))
    r = q.mul(h_diag)
    for i in range(len(old_dirs)):
        be_i = old_dirs[i].dot(r) * ro[i]
        r.add_(old_stps[i], alpha=scalar_value(al[i] - be_i))
    return r


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through ``(x1, f1, g1)`` and ``(x2, f2, g2)``, clamped to
    ``bounds`` (default: between the two points); their midpoint if the cubic has none."""
    if bounds is None:
        bounds = (x1, x2) if x1 <= x2 else (x2, x1)
    low, high = bounds
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if not d2_square >= 0:  # no real minimiser (or NaN)
        return (low + high) / 2.0
    d2 = d2_square.sqrt() if isinstance(d2_square, Tensor) else d2_square**0.5
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, low), high)


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """Line search along ``d`` for a step ``t`` meeting the strong Wolfe conditions
    (Nocedal & Wright, algorithms 3.5 and 3.6): first bracket an acceptable step by cubic
    extrapolation, then shrink the bracket by safeguarded cubic interpolation.
    ``evaluate(t)`` returns the loss and flat gradient there. Returns
    ``(loss, flat_grad, t, evaluations)``."""
    d_norm = d.abs().max()
    g = g.clone()
    f_new, g_new = evaluate(t)
    evals = 1
    gtd_new = g_new.dot(d)

    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    bracket_gtd: list = []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.clone()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.clone()], [gtd_prev, gtd_new]
            break
        # extrapolate, at least 1% beyond t and at most ten times it
        previous = t
        t = _cubic_interpolate(
            t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(t + 0.01 * (t - t_prev), t * 10)
        )
        t_prev, f_prev, g_prev, gtd_prev = previous, f_new, g_new.clone(), gtd_new
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: bracket[low] always holds the lowest loss seen
    insufficient_progress = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        # keep t at least 10% of the bracket away from its ends, unless progress was good
        top, bottom = max(bracket), min(bracket)
        margin = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < margin:
            if insufficient_progress or t >= top or t <= bottom:
                t = top - margin if abs(t - top) < abs(t - bottom) else bottom + margin
                insufficient_progress = False
            else:
                insufficient_progress = True
        else:
            insufficient_progress = False

        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high] = t, f_new
            bracket_g[high], bracket_gtd[high] = g_new.clone(), gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low] = t, f_new
            bracket_g[low], bracket_gtd[low] = g_new.clone(), gtd_new

    return bracket_f[low], bracket_g[low], bracket[low], evals
