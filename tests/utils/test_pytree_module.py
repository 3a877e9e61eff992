"""``kiln.utils._pytree`` as ``torch.utils._pytree`` is used outside PyTorch: map over nested
batches, registered container classes round-tripping through flatten/unflatten."""

from __future__ import annotations

import collections
import dataclasses

import kiln
import kiln.utils._pytree as pytree
from tests.oracle import assert_close, needs_torch, torch


@dataclasses.dataclass
class Output:
    logits: object
    extra: object = None


pytree.register_pytree_node(
    Output,
    lambda o: ([o.logits, o.extra], None),
    lambda children, _context: Output(*children),
)


def test_tree_map_over_a_nested_batch():
    batch = {"x": [kiln.ones(2), kiln.zeros(3)], "y": (kiln.arange(2.0), 5)}
    doubled = pytree.tree_map_only(kiln.Tensor, lambda t: t * 2, batch)
    assert doubled["y"][1] == 5
    assert doubled["x"][0].tolist() == [2.0, 2.0] and doubled["y"][0].tolist() == [0.0, 2.0]
    assert len(pytree.tree_leaves(batch)) == 4
    summed = pytree.tree_map(lambda a, b: a + b, [1, (2, 3)], [10, (20, 30)])
    assert summed == [11, (22, 33)]


def test_a_registered_class_is_a_container():
    out = Output(kiln.ones(2), {"h": kiln.zeros(1)})
    leaves, spec = pytree.tree_flatten(out)
    assert len(leaves) == 2
    back = pytree.tree_unflatten([t + 1 for t in leaves], spec)
    assert isinstance(back, Output) and back.logits.tolist() == [2.0, 2.0]
    assert back.extra["h"].tolist() == [1.0]
    assert pytree.tree_all(lambda t: isinstance(t, kiln.Tensor), out)


@needs_torch
def test_compiled_function_returning_a_registered_class():
    def f(x):
        return Output(x.sin(), {"cos": x.cos()})

    x = kiln.linspace(0, 1, 5)
    got = kiln.compile(f)(x)
    assert isinstance(got, Output)
    t = torch.linspace(0, 1, 5)
    assert_close(got.logits, t.sin())
    assert_close(got.extra["cos"], t.cos())


@needs_torch
def test_ordered_and_default_dicts_and_deques_come_back_as_themselves_like_pytorch():
    from torch.utils import _pytree as torch_pytree

    factory = collections.defaultdict(list, {"x": 1, "y": [2, 3]})
    trees = [
        collections.OrderedDict(b=1, a=(2, 3)),
        factory,
        collections.deque([1, [2]], maxlen=3),
        {"plain": collections.OrderedDict(k=4)},
    ]
    for tree in trees:
        ours = pytree.tree_map(lambda x: x, tree)
        theirs = torch_pytree.tree_map(lambda x: x, tree)
        assert type(ours) is type(theirs) and ours == theirs
        assert pytree.tree_leaves(tree) == torch_pytree.tree_leaves(tree)
    rebuilt = pytree.tree_map(lambda x: x, factory)
    assert rebuilt.default_factory is list
    assert pytree.tree_map(lambda x: x, trees[2]).maxlen == 3
    out = kiln.func.vmap(lambda d: collections.OrderedDict(y=d["a"] * 2))(
        collections.OrderedDict(a=kiln.ones(3, 2))
    )
    assert type(out) is collections.OrderedDict
