"""DataParallel and SyncBatchNorm in one process without accelerators: wrapping,
``convert_sync_batchnorm`` and batch statistics as PyTorch computes them."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _bn_net(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(1, 3, 1),
        nn.BatchNorm2d(3, momentum=None),
        nn.InstanceNorm2d(3),
        nn.Sequential(nn.BatchNorm1d(2, affine=False)),
    )


@needs_torch
def test_data_parallel_without_accelerators_wraps_like_torch():
    results = []
    for lib in (kiln, torch):
        inner = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
        wrapped = lib.nn.DataParallel(inner, device_ids=[0])
        out = wrapped(lib.ones(4, 2))
        state = {k.replace("module.", "", 1): v for k, v in wrapped.state_dict().items()}
        fresh = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
        results.append(
            (
                repr(wrapped),
                wrapped.device_ids,
                wrapped.module is inner,
                list(wrapped.state_dict()),
                tuple(out.shape),
                str(fresh.load_state_dict(state)),
            )
        )
    assert results[0] == results[1]
    with pytest.raises(RuntimeError, match="device type could not be determined"):
        kiln.nn.parallel.data_parallel(kiln.nn.Linear(2, 2), kiln.ones(1, 2))


@needs_torch
def test_convert_sync_batchnorm_swaps_batch_norms_only():
    got = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(_bn_net(kiln))
    want = torch.nn.SyncBatchNorm.convert_sync_batchnorm(_bn_net(torch))
    assert repr(got) == repr(want)
    assert got[1].momentum is None and got[3][0].weight is None
    original = kiln.nn.BatchNorm1d(3)
    converted = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(original)
    assert converted.weight is original.weight and converted.running_mean is original.running_mean


@needs_torch
def test_sync_batchnorm_is_batch_norm_in_one_process():
    x = np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    results = []
    for lib in (kiln, torch):
        norm = lib.nn.SyncBatchNorm(3)
        train_out = norm(lib.from_numpy(x))
        norm.eval()
        eval_out = norm(lib.from_numpy(x[:, :, 0]))
        errors = []
        for bad in (lib.ones(3), lib.ones(2, 0)):
            try:
                norm(bad)
            except ValueError as error:
                errors.append(str(error))
        results.append((train_out.detach().numpy(), eval_out.detach().numpy(), errors))
        results[-1] += (norm.running_var.numpy(), norm.num_batches_tracked.item())
    for got, want in zip(*results):
        if isinstance(got, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            assert got == want
