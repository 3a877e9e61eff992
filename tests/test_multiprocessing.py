"""``kiln.multiprocessing`` against ``torch.multiprocessing``: the same programs (spawned
processes writing shared tensors, Hogwild SGD on a shared model, tensors through a queue, a
failing worker) run with each framework; every process is joined before a test ends."""

import numpy as np
import pytest

import kiln
from tests import multiprocessing_workers as workers
from tests.oracle import needs_torch, torch

pytestmark = needs_torch
LIBS = pytest.mark.parametrize("lib", [kiln, torch], ids=["kiln", "torch"])


def test_share_memory_keeps_values_and_marks_the_tensor_shared():
    for lib in (kiln, torch):
        t = lib.arange(6, dtype=lib.float32).reshape(2, 3)
        assert not t.is_shared()
        assert t.share_memory_() is t
        assert t.is_shared()
        np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
        view = t[1]
        view += 10
        assert t[1].tolist() == [13.0, 14.0, 15.0]


def test_sharing_a_view_moves_its_base_too():
    for lib in (kiln, torch):
        base = lib.arange(6.0)
        view = base[2:]
        view.share_memory_()
        view += 1
        assert base.is_shared() and base.tolist() == [0.0, 1.0, 3.0, 4.0, 5.0, 6.0]


@LIBS
def test_spawned_processes_write_into_a_shared_tensor(lib):
    shared = lib.zeros(3).share_memory_()
    lib.multiprocessing.spawn(
        workers.add_own_index, args=(lib.__name__, shared), nprocs=2, join=True
    )
    assert shared.tolist() == [1.0, 2.0, 0.0]


def _hogwild(lib, in_processes: bool):
    """Two workers' SGD steps on one shared model: in spawned processes, or (for the
    reference, whose result the order of the steps does not change) one after the other."""
    lib.manual_seed(0)
    model = lib.nn.Linear(4, 2)
    with lib.no_grad():
        model.weight.copy_(lib.linspace(-1, 1, 8).reshape(2, 4))
        model.bias.fill_(0.5)
    model.share_memory()
    context = lib.multiprocessing.get_context("spawn")
    lock = context.Lock()
    if in_processes:
        processes = [
            context.Process(target=workers.hogwild_steps, args=(i, lib.__name__, model, lock, 3))
            for i in range(2)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
            assert process.exitcode == 0
    else:
        for i in range(2):
            workers.hogwild_steps(i, lib.__name__, model, lock, 3)
    return model.weight.detach().numpy().copy(), model.bias.detach().numpy().copy()


def test_hogwild_processes_update_the_same_parameters():
    kiln_weight, kiln_bias = _hogwild(kiln, in_processes=True)
    torch_weight, torch_bias = _hogwild(torch, in_processes=False)
    np.testing.assert_allclose(kiln_weight, torch_weight, rtol=1e-6)
    np.testing.assert_allclose(kiln_bias, torch_bias, rtol=1e-6)
    assert not np.allclose(kiln_bias, 0.5)  # the children's steps reached the parent


def test_tensors_come_back_through_a_queue():
    lib = kiln
    context = lib.multiprocessing.get_context("spawn")
    queue, received = context.Queue(), context.Event()
    running = lib.multiprocessing.spawn(
        workers.send_back, args=(lib.__name__, queue, received), nprocs=2, join=False
    )
    got = sorted((queue.get(timeout=60) for _ in range(2)), key=lambda t: float(t.sum()))
    got = [t.clone() for t in got]
    received.set()
    while not running.join():
        pass
    assert [t.tolist() for t in got] == [
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
        [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]],
    ]


def test_a_failing_worker_raises_its_error_in_the_parent():
    with pytest.raises(kiln.multiprocessing.ProcessRaisedException, match="failed on purpose"):
        kiln.multiprocessing.spawn(workers.fail, args=("kiln",), nprocs=1)
    assert kiln.multiprocessing.ProcessRaisedException.__mro__[1].__name__ == (
        torch.multiprocessing.ProcessRaisedException.__mro__[1].__name__
    )


def test_module_offers_pythons_names():
    mp = kiln.multiprocessing
    assert mp.cpu_count() >= 1
    for name in ("Process", "Queue", "Pool", "get_context", "set_start_method", "Manager"):
        assert hasattr(mp, name), name


def test_tensors_cross_a_pool_both_ways():
    with kiln.multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.map(workers.square, [kiln.arange(3.0), kiln.full((2, 2), 3.0)])
    assert [t.tolist() for t in got] == [[0.0, 1.0, 4.0], [[9.0, 9.0], [9.0, 9.0]]]
    assert all(isinstance(t, kiln.Tensor) for t in got)
