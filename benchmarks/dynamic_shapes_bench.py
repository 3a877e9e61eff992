"""Shapes that change between calls (issue 13): captures, eager fallbacks and times.

    python benchmarks/dynamic_shapes_bench.py [--quick] [--backends aot_eager,inductor]
    python benchmarks/dynamic_shapes_bench.py --kernels [--full] [--workloads softmax,...]

1. Generation: nanoGPT-style greedy decoding of 40 tokens with a tiny GPT (2 layers, width 64)
   whose context grows by one token a step, compiled against eager (the issue's figure before
   symbolic shapes: 2 graphs, every later step eager, 1.59 s against 0.65 s eager).
2. Batch sizes: a pointwise-and-reduction function called twice with each batch size 2..64
   (126 calls); how many graphs were captured and how many calls ran eagerly (the issue's
   figure: 9 graphs, 115 of 126 calls eager), and the time against eager.
3. Guard hit: a compiled call whose guards are symbolic (``dynamic=True``) against one with
   static guards, on the same inputs: the issue allows 1 us more. Calls alternate between the
   variants so machine noise hits all equally; each figure is a median.
4. ``--kernels`` (only this section): the default kiln.bench workloads compiled by the inductor
   with ``dynamic=False`` and with ``dynamic=True`` (kernels for every size), timed interleaved at
   the same shapes (quick shapes unless ``--full``): the steady-state ratio dynamic/static, which
   the issue wants within 1.1, and the cold-compile ratio (at most 1.5). Each variant compiles
   into its own fresh cache folder; the load average is printed, since the machine is shared.

Times include compilation (a first run in a fresh process with a fresh kernel cache, unless
KILN_CACHE_DIR is set). The inductor backend compiles kernels for each concrete size until kernels
take sizes as arguments (``kiln/inductor/specialize.py``): its figures show that interim.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not os.environ.get("KILN_CACHE_DIR"):  # cold kernel caches: compile time is part of the figure
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-dynamic-bench-")

import kiln  # noqa: E402
from kiln.dynamo.backends import lookup  # noqa: E402


class CountingBackend:
    """Wraps a backend: counts the graphs it compiles and the calls that ran one of them."""

    def __init__(self, inner: str):
        self.inner = lookup(inner)
        self.graphs = 0
        self.graph_calls = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        run = self.inner(gm, example_inputs)

        def counted(*args):
            self.graph_calls += 1
            return run(*args)

        return counted


def _gpt():
    from tests.models.models import GPTConfig, models_for

    kiln.manual_seed(0)
    cfg = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64)
    return cfg, models_for(kiln).TinyGPT(cfg).eval()


def generate(forward, block_size: int, tokens: int) -> list:
    """nanoGPT's ``generate`` with greedy choice: crop the context, take the last logits."""
    idx = kiln.tensor([[0]])
    with kiln.no_grad():
        for _ in range(tokens):
            context = idx if idx.shape[1] <= block_size else idx[:, -block_size:]
            logits, _ = forward(context)
            idx = kiln.cat([idx, logits[:, -1, :].argmax(-1, keepdim=True)], dim=1)
    return idx.tolist()


def generation(backend: str, tokens: int) -> dict:
    cfg, model = _gpt()
    generate(model, cfg.block_size, 2)  # warm the eager ops
    t0 = time.perf_counter()
    expected = generate(model, cfg.block_size, tokens)
    eager_s = time.perf_counter() - t0
    kiln.dynamo.reset()
    counter = CountingBackend(backend)
    compiled = kiln.compile(model, backend=counter)
    t0 = time.perf_counter()
    got = generate(compiled, cfg.block_size, tokens)
    compiled_s = time.perf_counter() - t0
    graphs, graph_calls = counter.graphs, counter.graph_calls
    t0 = time.perf_counter()
    generate(compiled, cfg.block_size, tokens)
    again_s = time.perf_counter() - t0
    return {
        "eager (s)": eager_s,
        "compiled, first run (s)": compiled_s,
        "compiled, second run (s)": again_s,
        "graphs captured": graphs,
        "steps run eagerly": tokens - graph_calls,
        "same tokens as eager": got == expected,
    }


def pointwise_and_reduction(x):
    y = (x * 1.5 + 0.25).relu() - x.sigmoid()
    return y.sum(-1) / x.shape[-1], y.amax(0), (x * x).mean()


def batch_sizes(backend: str) -> dict:
    inputs = [kiln.randn(n, 32) for n in range(2, 65) for _ in range(2)]
    for x in inputs[:4]:
        pointwise_and_reduction(x)  # warm the eager ops
    t0 = time.perf_counter()
    for x in inputs:
        pointwise_and_reduction(x)
    eager_s = time.perf_counter() - t0
    kiln.dynamo.reset()
    counter = CountingBackend(backend)
    compiled = kiln.compile(pointwise_and_reduction, backend=counter)
    t0 = time.perf_counter()
    for x in inputs:
        compiled(x)
    compiled_s = time.perf_counter() - t0
    return {
        "calls": len(inputs),
        "graphs captured": counter.graphs,
        "calls run eagerly": len(inputs) - counter.graph_calls,
        "eager (s)": eager_s,
        "compiled, compile included (s)": compiled_s,
    }


def _per_call(fn, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def guard_hit(quick: bool) -> dict:
    def body(x, y):
        return x + y

    x, y = kiln.randn(8, 16), kiln.randn(8, 16)
    static = kiln.compile(body, backend="eager", dynamic=False)
    dynamic = kiln.compile(body, backend="eager", dynamic=True)
    static(x, y), dynamic(x, y)
    static_guard = static._kiln_cache.entries[0][0]
    dynamic_guard = dynamic._kiln_cache.entries[0][0]
    number, repeat = (2000, 7) if quick else (20000, 15)
    figures: dict[str, list] = {k: [] for k in ("eager", "static", "dynamic", "sg", "dg")}
    for _ in range(repeat):
        figures["eager"].append(_per_call(lambda: body(x, y), number))
        figures["static"].append(_per_call(lambda: static(x, y), number))
        figures["dynamic"].append(_per_call(lambda: dynamic(x, y), number))
        figures["sg"].append(_per_call(lambda: static_guard(None, x, y), number))
        figures["dg"].append(_per_call(lambda: dynamic_guard(None, x, y), number))
    us = {k: statistics.median(v) * 1e6 for k, v in figures.items()}
    return {
        "eager call": us["eager"],
        "static hit": us["static"],
        "dynamic hit": us["dynamic"],
        "dynamic - static": us["dynamic"] - us["static"],
        "static guard alone": us["sg"],
        "dynamic guard alone": us["dg"],
    }


KERNEL_WORKLOADS = (
    "pointwise_chain",
    "gelu_tanh",
    "softmax",
    "layer_norm",
    "mlp_forward",
    "mlp_train_step",
    "gpt_block_forward",
    "gpt_block_train_step",
)


def _compiled_variant(name: str, quick: bool, dynamic: bool):
    """A workload compiled with ``dynamic``, its arguments and its first call's seconds (cold
    cache: a fresh folder per variant, and no graphs held in memory)."""
    from kiln.bench.workloads import get_workload
    from kiln.inductor.codegen.graph_index import clear_memory_cache
    from kiln.inductor.specialize import COMPILE_STATS

    kiln.dynamo.reset()
    clear_memory_cache()
    COMPILE_STATS.reset()
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"kiln-kernels-{dynamic:d}-")
    instance = get_workload(name).build(kiln, quick, "cpu")
    fn = kiln.compile(instance.fn, backend="inductor", dynamic=dynamic)
    t0 = time.perf_counter()
    fn(*instance.args)
    cold = time.perf_counter() - t0
    routes = (COMPILE_STATS.symbolic_compiles, COMPILE_STATS.symbolic_refused)
    return fn, instance.args, cold, routes


def _per_call_cpu(fn, number: int) -> float:
    """Seconds of this thread's CPU time per call: with one thread, what other processes on a
    shared machine take from it does not count."""
    t0 = time.thread_time()
    for _ in range(number):
        fn()
    return (time.thread_time() - t0) / number


def kernels(names: list[str], quick: bool, rounds: int, threads: int) -> None:
    """Section 4 of the module docstring: one line per workload. With ``threads`` 1 the times
    are the calling thread's CPU time (steadier on a loaded machine), else wall time."""
    kiln.set_num_threads(threads)
    per_call = _per_call_cpu if threads == 1 else _per_call
    clock = "thread CPU time" if threads == 1 else "wall time"
    print(f"{threads} thread(s), {clock}; load average before: {os.getloadavg()}")
    print(
        f"  {'workload':<22} {'static ms':>10} {'dynamic ms':>10} {'ratio':>6}"
        f" {'cold s':>7} {'cold dyn s':>10} {'ratio':>6}  symbolic/refused"
    )
    for name in names:
        static, args, static_cold, _ = _compiled_variant(name, quick, False)
        dynamic, dyn_args, dynamic_cold, routes = _compiled_variant(name, quick, True)
        for _ in range(2):  # warm both (the training steps' optimizer state, page faults)
            static(*args), dynamic(*dyn_args)
        t0 = time.perf_counter()
        static(*args)
        number = max(1, min(200, int(0.05 / max(time.perf_counter() - t0, 1e-6))))
        times: dict[str, list] = {"static": [], "dynamic": []}
        for _ in range(rounds):
            times["static"].append(per_call(lambda: static(*args), number))
            times["dynamic"].append(per_call(lambda: dynamic(*dyn_args), number))
        s_ms, d_ms = (statistics.median(times[k]) * 1e3 for k in ("static", "dynamic"))
        print(
            f"  {name:<22} {s_ms:10.3f} {d_ms:10.3f} {d_ms / s_ms:6.2f}"
            f" {static_cold:7.2f} {dynamic_cold:10.2f} {dynamic_cold / static_cold:6.2f}"
            f"  {routes[0]}/{routes[1]}",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()}")


def _show(title: str, figures: dict) -> None:
    print(title)
    for name, value in figures.items():
        shown = f"{value:10.3f}" if isinstance(value, float) else f"{value!s:>10}"
        print(f"  {name:<32} {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens and repetitions")
    parser.add_argument("--backends", default="aot_eager,inductor", help="comma-separated")
    parser.add_argument("--kernels", action="store_true", help="only section 4: kernel times")
    parser.add_argument("--full", action="store_true", help="--kernels at the full shapes")
    parser.add_argument("--workloads", default=",".join(KERNEL_WORKLOADS), help="--kernels")
    parser.add_argument("--rounds", type=int, default=9, help="--kernels: interleaved rounds")
    parser.add_argument("--threads", type=int, default=1, help="--kernels: kiln's threads")
    args = parser.parse_args()
    if args.kernels:
        kernels(args.workloads.split(","), not args.full, args.rounds, args.threads)
        return
    print(f"Python {sys.version.split()[0]}, kernel cache {os.environ['KILN_CACHE_DIR']}")
    tokens = 12 if args.quick else 40
    for backend in args.backends.split(","):
        _show(f"greedy generation of {tokens} tokens, {backend}:", generation(backend, tokens))
        _show(f"batch sizes 2..64, twice each, {backend}:", batch_sizes(backend))
    _show("cache hit, 2 tensor arguments, eager backend (us):", guard_hit(args.quick))


if __name__ == "__main__":
    main()
