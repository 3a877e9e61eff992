"""The op table itself: names resolve to the ops, every op is complete enough to be used."""

from __future__ import annotations

import kiln
from kiln.ops.core.registry import OPS


def _kiln_ops():
    """kiln's own ops: not the ``namespace::name`` ops other tests define through
    ``kiln.library`` in the same process (a schema may be defined before any implementation)."""
    return [(name, op) for name, op in OPS.items() if not op.user_defined]


def test_kiln_ops_attribute_is_the_registered_op():
    # a module of kiln/ops named like an op would shadow it (and break compiled graphs)
    for name, op in _kiln_ops():
        assert getattr(kiln.ops, name) is op, name


def test_every_op_can_run_eagerly_and_on_fakes():
    for name, op in _kiln_ops():
        assert op.kernel is not None or op.decomposition is not None, f"{name} cannot run"
        assert op.meta is not None or op.decomposition is not None, f"{name} has no meta"


def test_prims_have_kernels_and_meta():
    for name, op in _kiln_ops():
        if op.is_prim:
            assert op.kernel is not None and op.meta is not None, name


def test_list_ops():
    names = kiln.ops.list_ops()
    assert "add" in names and "softmax" in names
    assert set(kiln.ops.list_ops(prims_only=True)) <= set(names)


def test_grad_fn_name_renames_only_the_results_of_composites():
    # an op with a kernel records its own node (named by grad_fn_name); only a composite, which
    # records none, hands its name to its result's node through its decomposition
    for name, op in OPS.items():
        if op.grad_fn_name is not None and op.kernel is not None:
            assert not hasattr(op.decomposition, "__wrapped__"), name
    x = kiln.randn(3, requires_grad=True)
    assert kiln.stack([x, x]).grad_fn.name() == "StackBackward0"
    assert x.sum(0).grad_fn.name() == "SumBackward1"


def test_method_binding_follows_the_op_records():
    # the op of a name is the Tensor method of that name when its first parameter is self;
    # aliases and in-place variants come from the record too
    x = kiln.tensor([-1.5, 2.0])
    assert kiln.ops.abs.aliases == ("absolute",)
    assert kiln.absolute(x).tolist() == x.absolute().tolist() == x.abs().tolist()
    assert kiln.ops.index_put.inplace_method and hasattr(x, "index_put_")
    y = kiln.zeros(2)
    y.addmv_(kiln.eye(2), x)
    assert y.tolist() == x.tolist()
