"""Write a compiler backend: print the captured graph, rewrite it, hand it to the inductor.

    python examples/custom_backend.py

A backend is any callable ``(GraphModule, example_inputs) -> callable``; registering it by name
makes ``kiln.compile(fn, backend="name")`` use it. This one replaces every ``relu`` node with a
hand-written decomposition, ``where(x > 0, x, 0.0)``, prints the graph before and after, and
passes the rewritten graph on to the built-in ``"inductor"`` backend (AOT autograd + kernels), so
gradients flow through the rewritten ops too. The script then checks values and gradients against
eager kiln and shows what the inductor made of the rewritten graph.
"""

from __future__ import annotations

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln.backends import lookup, register_backend
from kiln.bench.dumps import graph_role, observe_compiled_graphs

rewrites: list[str] = []  # what the backend did, for the summary at the end


def decompose_relu(gm) -> int:
    """Replace each ``relu(x)`` node with ``where(gt(x, 0.0), x, 0.0)``; returns how many."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not kiln.ops.relu:
            continue
        (x,) = node.args
        with graph.inserting_before(node):
            positive = graph.call_function(kiln.ops.gt, (x, 0.0))
            replacement = graph.call_function(kiln.ops.where, (positive, x, 0.0))
        # keep the user's source line (dumps and errors point at it) and the value's metadata
        positive.meta["source"] = node.meta.get("source")
        replacement.meta = dict(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        count += 1
    gm.recompile()
    return count


@register_backend("relu_to_where")
def relu_to_where(gm, example_inputs):
    print("---- captured graph ----")
    print(gm.code)
    count = decompose_relu(gm)
    rewrites.append(f"replaced {count} relu nodes")
    print(f"---- after replacing {count} relu nodes ----")
    print(gm.code)
    return lookup("inductor")(gm, example_inputs)


def mlp(x, w1, w2):
    hidden = F.relu(x @ w1)
    return (hidden @ w2).relu().sum()


def _close(a, b) -> bool:
    return bool(np.allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-3))


def main() -> None:
    kiln.manual_seed(0)
    x = kiln.randn(64, 32)
    w1 = (kiln.randn(32, 128) / 32**0.5).requires_grad_()
    w2 = (kiln.randn(128, 16) / 128**0.5).requires_grad_()

    compiled = kiln.compile(mlp, backend="relu_to_where")
    with observe_compiled_graphs() as graphs:
        loss = compiled(x, w1, w2)
        loss.backward()
    grads = [w1.grad.clone(), w2.grad.clone()]

    w1.grad = w2.grad = None
    expected = mlp(x, w1, w2)
    expected.backward()
    same_value = _close(loss, expected)
    same_grads = all(_close(g, p.grad) for g, p in zip(grads, (w1, w2)))
    print(f"backend: {'; '.join(rewrites)}")
    print(f"loss compiled {loss.item():.4f} vs eager {expected.item():.4f}: same={same_value}")
    print(f"gradients of w1, w2 match eager: {same_grads}")
    for observed in graphs:
        graph = observed.graph
        print(f"inductor {graph_role(observed.gm)} graph: {graph.num_kernels} kernels")
        print("  " + graph.schedule.describe().replace("\n", "\n  "))
    if not (same_value and same_grads):
        raise SystemExit("the rewritten graph computes something else")


if __name__ == "__main__":
    main()
