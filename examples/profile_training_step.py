"""Profile a compiled training step: PyTorch's profiler table and a Chrome trace.

    python examples/profile_training_step.py [--trace trace.json]

The step (forward, loss, ``backward``) is compiled with ``kiln.compile``; the optimizer step runs
eagerly. The table shows the compiled graph as a region named after ``train_step`` with its
kernels inside, the backward nodes under PyTorch's names, and the eager ops as ``aten::<op>``.
Open the trace in ui.perfetto.dev or chrome://tracing to see the same events on a timeline.
"""

from __future__ import annotations

import argparse

import kiln
from kiln.profiler import ProfilerActivity, profile, record_function


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="trace.json", help="where to write the Chrome trace")
    args = parser.parse_args()

    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(64, 64), kiln.nn.GELU(), kiln.nn.Linear(64, 10))
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)

    @kiln.compile
    def train_step(x, y):
        loss = kiln.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    x, y = kiln.randn(32, 64), kiln.randint(0, 10, (32,))
    train_step(x, y)  # compile outside the profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("step"):
            train_step(x, y)
            opt.step()
            opt.zero_grad()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=8))
    prof.export_chrome_trace(args.trace)
    print(f"trace written to {args.trace}")


if __name__ == "__main__":
    main()
