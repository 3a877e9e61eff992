"""Functions ``tests/test_multiprocessing.py`` runs in spawned processes: kept apart from the
tests so that a child imports only the framework it runs (``lib_name``), not PyTorch as well."""

import importlib


def add_own_index(index: int, lib_name: str, shared) -> None:
    """Process ``index`` writes ``index + 1`` into its own element of a shared tensor."""
    lib = importlib.import_module(lib_name)
    with lib.no_grad():
        shared[index] += index + 1


def hogwild_steps(index: int, lib_name: str, model, lock, steps: int) -> None:
    """SGD steps on a shared model, one process at a time (the loss is linear in the
    parameters, so the result does not depend on the processes' order)."""
    lib = importlib.import_module(lib_name)
    optimizer = lib.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = lib.arange(4, dtype=lib.float32) * (index + 1) + step
        with lock:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()


def send_back(index: int, lib_name: str, queue, received) -> None:
    """Put a tensor on ``queue``, then live until the parent has it (PyTorch's tensors travel
    as shared memory the sender must keep)."""
    lib = importlib.import_module(lib_name)
    queue.put(lib.arange(6, dtype=lib.float32).reshape(2, 3) * (index + 1))
    received.wait(60)


def fail(index: int, lib_name: str) -> None:
    raise ValueError(f"worker {index} failed on purpose")


def square(tensor):
    """A pool's task: the tensor arrives pickled and its result goes back the same way."""
    return tensor * tensor
