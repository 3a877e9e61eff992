"""Index expressions simplify the way reshapes need (checked by brute-force evaluation)."""

from __future__ import annotations

import itertools

import pytest

from kiln.inductor import sym
from kiln.inductor.codegen.numpy_backend import eval_expr


def _check(expr, reference, vars_):
    for values in itertools.product(*(range(v.size) for v in vars_)):
        env = dict(zip(vars_, values))
        assert eval_expr(expr, env) == reference(*values)


def test_floordiv_and_mod_of_a_split_index_simplify_away():
    i, j = sym.Var("i", 6), sym.Var("j", 4)
    e = sym.as_expr(i) * 4 + j
    assert e // 4 == sym.as_expr(i)
    assert e % 4 == sym.as_expr(j)


def test_recombining_a_split_gives_the_original_variable():
    x = sym.as_expr(sym.Var("x", 24))
    assert (x // 4) * 4 + x % 4 == x


@pytest.mark.parametrize("d", [2, 3, 5, 8])
def test_floordiv_and_mod_are_exact(d):
    i, j = sym.Var("i", 5), sym.Var("j", 7)
    e = sym.as_expr(i) * 7 + j * 2 + 1
    _check(e // d, lambda a, b: (a * 7 + b * 2 + 1) // d, [i, j])
    _check(e % d, lambda a, b: (a * 7 + b * 2 + 1) % d, [i, j])


def test_bounds_and_affine_only():
    i = sym.Var("i", 10)
    assert (sym.as_expr(i) * 3 - 2).bounds() == (-2, 25)
    with pytest.raises(TypeError):
        sym.as_expr(i) * sym.as_expr(i)


def test_expressions_are_hashable_values():
    i = sym.Var("i", 3)
    assert {sym.as_expr(i) + 1: 1}[sym.as_expr(i) + 1] == 1


def test_strides_over_symbolic_sizes_build_indices_without_deciding_anything(monkeypatch):
    """A stride that is a product of sizes is kept as a coefficient as it is: asking whether
    it is 0 cost a decision over the symbols' ranges per term (a quarter of the decisions a
    symbolic GPT block's compile made); the index still evaluates like the arithmetic."""
    from kiln.runtime import symbolic
    from kiln.runtime.symbolic import ShapeEnv

    env = ShapeEnv()
    s0, s1 = (env.symint(env.create_symbol(h, f"x.size()[{i}]")) for i, h in enumerate((3, 5)))
    asked = []
    decide = symbolic._decide_exprs
    monkeypatch.setattr(symbolic, "_decide_exprs", lambda *a: asked.append(a) or decide(*a))
    x0, x1 = sym.Var("x0", s0), sym.Var("x1", s1)
    with env.kernel_scope():
        index = sym.as_expr(x0) * (s1 * 4) + sym.as_expr(x1) * 4
    assert asked == []
    for a, b in itertools.product(range(3), range(5)):
        stride = index.terms[x0].expr.evaluate({s1.expr.as_symbol(): 5})
        assert stride * a + index.terms[x1] * b == a * 20 + b * 4
