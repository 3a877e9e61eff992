"""Run inside each of 2 ranks: DDP (eager and compiled) and fully_shard training of the tiny
GPT, whose losses and parameters the test compares with single-process training, plus DDP's
features on a small MLP, each checked against a reference every rank computes itself."""

from __future__ import annotations

import numpy as np

import kiln
import kiln.distributed as dist
import kiln.nn as nn
from kiln.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from kiln.distributed.fsdp import FSDPModule, fully_shard
from kiln.nn.parallel import DistributedDataParallel as DDP
from tests.distributed.launch import Checks, emit
from tests.distributed.training_setup import GLOBAL_BATCH, STEPS, batch, make_model, make_step

dist.init_process_group("mpi")
kiln.set_num_threads(1)
rank, world = dist.get_rank(), dist.get_world_size()
mine = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
check = Checks()
runs: dict[str, dict] = {}


def train(step) -> list[float]:
    losses = []
    for s in range(STEPS):
        idx, targets = batch(s)
        loss = step(idx[mine], targets[mine]).detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # the mean over the whole batch
        losses.append(loss.item())
    return losses


def parameters(named) -> dict[str, list]:
    return {name: p.detach().numpy().tolist() for name, p in named}


def accumulating_nodes(loss, params) -> int:
    """How many autograd nodes hand gradients straight to the parameters' accumulators (one
    for a graph compiled whole; one per piece when compiled DDP split it at buckets)."""
    ids = {id(p) for p in params}
    seen, found, stack = set(), set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for child, _ in node.next_functions:
            if child is not None and id(getattr(child, "variable", None)) in ids:
                found.add(id(node))
            stack.append(child)
    return len(found)


def state_bytes(model, optimizer) -> dict[str, int]:
    params = list(model.parameters())
    return {
        "parameters": sum(p.nbytes for p in params),
        "gradients": sum(p.grad.nbytes for p in params if p.grad is not None),
        "optimizer": sum(
            v.nbytes for s in optimizer.state.values() for v in s.values()
            if isinstance(v, kiln.Tensor) and v.dim() > 0
        ),
    }  # fmt: skip


# ---------------------------------------------------------------------- the tiny GPT
model = make_model()
ddp = DDP(model)
step, optimizer = make_step(ddp, ddp.parameters())
runs["ddp_eager"] = {"losses": train(step), "params": parameters(model.named_parameters())}
runs["ddp_eager"]["bytes"] = state_bytes(model, optimizer)
replicated_optimizer = optimizer  # its state is what fully_shard's gathered state must be

model = make_model()
ddp = DDP(model, bucket_cap_mb=0.004)  # several 4 KB buckets: the compiled graph is split
step, _ = make_step(ddp, ddp.parameters())
compiled = kiln.compile(step)
runs["ddp_compiled"] = {"losses": train(compiled), "params": parameters(model.named_parameters())}
idx, targets = batch(STEPS)
last = compiled(idx[mine], targets[mine])
runs["ddp_compiled"]["pieces"] = accumulating_nodes(last, list(model.parameters()))
runs["ddp_compiled"]["buckets"] = len(ddp.bucket_sizes())

model = make_model()
full_bytes = sum(p.nbytes for p in model.parameters())
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
step, optimizer = make_step(model, model.parameters())
runs["fsdp"] = {"losses": train(step)}
runs["fsdp"]["bytes"] = state_bytes(model, optimizer)
runs["fsdp"]["full_parameter_bytes"] = full_bytes
full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
runs["fsdp"]["params"] = parameters(full.items())
runs["fsdp"]["sharded_keys"] = sorted(model.state_dict())
runs["fsdp"]["is_fsdp_module"] = isinstance(model, FSDPModule)
sharded_model, sharded_optimizer = model, optimizer


@check("full optimizer state of fully_shard equals the replicated optimizer's; loads back")
def _():
    full = get_optimizer_state_dict(
        sharded_model, sharded_optimizer, options=StateDictOptions(full_state_dict=True)
    )
    reference = replicated_optimizer.state_dict()
    assert sorted(full["state"]) == sorted(reference["state"])
    for index, values in reference["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(
                full["state"][index][key].numpy(), values[key].numpy(), rtol=1e-6, atol=1e-12
            )
    before = {
        i: v["exp_avg"].numpy().copy() for i, v in sharded_optimizer.state_dict()["state"].items()
    }
    set_optimizer_state_dict(sharded_model, sharded_optimizer, full)
    after = sharded_optimizer.state_dict()["state"]
    for index, value in before.items():
        np.testing.assert_array_equal(after[index]["exp_avg"].numpy(), value)


@check("a full model state dict loads into a fresh fully_shard model")
def _():
    full = get_model_state_dict(sharded_model, options=StateDictOptions(full_state_dict=True))
    fresh = make_model()
    for block in fresh.blocks:
        fully_shard(block)
    fully_shard(fresh)
    set_model_state_dict(fresh, full)
    again = get_model_state_dict(fresh, options=StateDictOptions(full_state_dict=True))
    for key, value in full.items():
        np.testing.assert_array_equal(again[key].numpy(), value.numpy(), err_msg=key)
    for ours, theirs in zip(fresh.parameters(), sharded_model.parameters()):
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())


model = make_model()
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
step, _ = make_step(model, model.parameters())
runs["fsdp_compiled"] = {"losses": train(kiln.compile(step))}
full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
runs["fsdp_compiled"]["params"] = parameters(full.items())


@check("kiln.compile of the DDP module itself: loss and averaged gradients as eager DDP")
def _():
    eager_model, compiled_model = make_model(), make_model()
    eager, compiled = DDP(eager_model), DDP(compiled_model, bucket_cap_mb=0.004)
    run = kiln.compile(compiled, backend="aot_eager")
    idx, targets = batch(0)
    for _ in range(2):  # the second call runs after the buckets were rebuilt
        _, ours = run(idx[mine], targets[mine])
        _, theirs = eager(idx[mine], targets[mine])
        ours.backward()
        theirs.backward()
        np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-10)
        for (name, p), q in zip(compiled_model.named_parameters(), eager_model.parameters()):
            np.testing.assert_allclose(
                p.grad.numpy(), q.grad.numpy(), rtol=1e-8, atol=1e-12, err_msg=name
            )
    assert accumulating_nodes(ours, list(compiled_model.parameters())) > 1


# ---------------------------------------------------------------------- DDP's features
class MLP(nn.Module):
    def __init__(self, extra: int = 0):
        super().__init__()
        self.fc1 = nn.Linear(4, 8 + extra)
        self.fc2 = nn.Linear(8 + extra, 2)
        self.unused = nn.Linear(2, 2)
        self.register_buffer("seen", kiln.zeros(1))

    def forward(self, x, use_unused_on=None):
        y = self.fc2(self.fc1(x).tanh())
        if use_unused_on is not None and rank == use_unused_on:
            y = self.unused(y)
        return y


def mlp_data(r: int, k: int):
    g = np.random.default_rng(100 * k + r)
    return kiln.tensor(g.standard_normal((3, 4))), kiln.tensor(g.standard_normal((3, 2)))


def local_grads(model, pairs) -> dict[str, np.ndarray]:
    """Gradients of the summed mean-squared losses of ``pairs`` on a plain copy of ``model``."""
    copy = MLP()
    copy.load_state_dict(model.state_dict())
    for x, y in pairs:
        ((copy(x) - y) ** 2).mean().backward()
    return {n: p.grad.numpy() for n, p in copy.named_parameters() if p.grad is not None}


@check("construction broadcasts rank 0's parameters and buffers")
def _():
    kiln.manual_seed(rank)  # a different initialization on every rank
    m = MLP()
    m.seen.fill_(rank)
    before = [p.detach().numpy().copy() for p in m.parameters()]
    DDP(m)
    everyone = [None] * world
    dist.all_gather_object(everyone, [p.detach().numpy() for p in m.parameters()])
    for theirs in everyone:
        for a, b in zip(theirs, everyone[0]):
            np.testing.assert_array_equal(a, b)
    if rank == 0:
        for a, b in zip(before, m.parameters()):
            np.testing.assert_array_equal(a, b.detach().numpy())
    assert m.seen.item() == 0


@check("state_dict keys carry the module. prefix")
def _():
    m = MLP()
    assert list(DDP(m).state_dict()) == [f"module.{k}" for k in m.state_dict()]


@check("no_sync accumulates locally; the next synced backward averages the sum")
def _():
    m = MLP()
    wrapped = DDP(m, find_unused_parameters=True)
    reference = {}
    for r in range(world):
        for name, g in local_grads(m, [mlp_data(r, 1), mlp_data(r, 2)]).items():
            reference[name] = reference.get(name, 0) + g / world
    with wrapped.no_sync():
        x, y = mlp_data(rank, 1)
        ((wrapped(x) - y) ** 2).mean().backward()
    x, y = mlp_data(rank, 2)
    ((wrapped(x) - y) ** 2).mean().backward()
    for name, p in m.named_parameters():
        if name.startswith("unused"):
            assert p.grad is None, name
        else:
            np.testing.assert_allclose(p.grad.numpy(), reference[name], rtol=1e-5, atol=1e-7)


@check("gradient_as_bucket_view: gradients are views of one bucket")
def _():
    m = MLP()
    wrapped = DDP(m, gradient_as_bucket_view=True, find_unused_parameters=True)
    x, y = mlp_data(rank, 3)
    ((wrapped(x) - y) ** 2).mean().backward()
    reference = {}
    for r in range(world):
        for name, g in local_grads(m, [mlp_data(r, 3)]).items():
            reference[name] = reference.get(name, 0) + g / world
    storages = {
        p.grad.untyped_storage().data_ptr() for n, p in m.named_parameters() if p.grad is not None
    }
    assert len(storages) == 1, storages
    for name, g in reference.items():
        np.testing.assert_allclose(m.get_parameter(name).grad.numpy(), g, rtol=1e-5, atol=1e-7)


@check("find_unused_parameters: a parameter one rank skips is averaged with zero")
def _():
    m = MLP()
    wrapped = DDP(m, find_unused_parameters=True)
    x, y = mlp_data(rank, 4)
    out = wrapped(x, use_unused_on=0)
    ((out - y) ** 2).mean().backward()
    copy = MLP()
    copy.load_state_dict(m.state_dict())
    x0, y0 = mlp_data(0, 4)
    ((copy.unused(copy.fc2(copy.fc1(x0).tanh())) - y0) ** 2).mean().backward()
    np.testing.assert_allclose(m.unused.weight.grad.numpy(), copy.unused.weight.grad.numpy() / world,
                               rtol=1e-5, atol=1e-7)  # fmt: skip


@check("an unused parameter without find_unused_parameters is reported at the next forward")
def _():
    m = MLP()
    wrapped = DDP(m)
    x, y = mlp_data(rank, 5)
    ((wrapped(x) - y) ** 2).mean().backward()
    try:
        wrapped(x)
    except RuntimeError as e:
        assert "find_unused_parameters=True" in str(e) and "unused.weight" in str(e), str(e)
        return
    raise AssertionError("no error at the next forward")


@check("broadcast_buffers: every forward starts from rank 0's buffers")
def _():
    m = MLP()
    wrapped = DDP(m, find_unused_parameters=True)
    m.seen.fill_(10 + rank)
    wrapped(mlp_data(rank, 6)[0])
    assert m.seen.item() == 10


@check("a model whose shapes differ across ranks is refused naming both ranks")
def _():
    try:
        DDP(MLP(extra=rank))
    except RuntimeError as e:
        assert "DDP expects same model across all ranks" in str(e), str(e)
        return
    raise AssertionError("no error for mismatched models")


@check("DistributedSampler takes the rank and size of the default group")
def _():
    sampler = kiln.utils.data.DistributedSampler(list(range(10)), shuffle=False)
    assert (sampler.num_replicas, sampler.rank) == (world, rank)
    everyone = [None] * world
    dist.all_gather_object(everyone, list(sampler))
    assert sorted(i for part in everyone for i in part) == list(range(10))


emit({"rank": rank, "world": world, "runs": runs, "checks": check.results})
