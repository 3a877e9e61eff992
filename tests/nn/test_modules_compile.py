"""Less common layers (padding, instance norm, PReLU, pixel shuffle, resampling, Softmax2d,
embedding bags, LP and fractional pooling, distances, transposed 3-d convolution) under
``kiln.compile``: one graph, no breaks, and the same values and gradients as eager with the
aot_eager and inductor backends."""

from __future__ import annotations

import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from tests.oracle import assert_close

BACKENDS = ["aot_eager", "inductor"]


class ImageBlock(nn.Module):
    """Padding, instance norm, PReLU, pixel shuffle, bilinear resize and Softmax2d in a row."""

    def __init__(self):
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.InstanceNorm2d(8, affine=True)
        self.act = nn.PReLU(8)
        self.shuffle = nn.PixelShuffle(2)
        self.up = nn.Upsample(scale_factor=0.5, mode="bilinear")
        self.soft = nn.Softmax2d()

    def forward(self, x):
        x = self.act(self.norm(self.conv(self.pad(x))))
        return self.soft(self.up(self.shuffle(x)))


def _bags_and_pools(idx, off, weight, per_sample, x, y, samples):
    summed = F.embedding_bag(idx, weight, off, mode="sum", per_sample_weights=per_sample)
    largest = F.embedding_bag(idx, weight, off, mode="max", padding_idx=2)
    similarity = F.cosine_similarity(summed, largest, dim=-1)
    distance = F.pairwise_distance(summed, largest)
    pooled = F.lp_pool1d(x.abs() + 0.1, 2, 3, 2)
    fractional = F.fractional_max_pool2d(y, 2, output_size=(3, 3), _random_samples=samples)
    normed = F.local_response_norm(F.celu(F.glu(y, 1)), 2)
    return similarity.sum() + distance.sum() + pooled.sum() + fractional.sum() + normed.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_image_block_compiles_to_one_graph_matching_eager(backend):
    kiln.manual_seed(0)
    model = ImageBlock()
    x = kiln.randn(2, 3, 6, 6, requires_grad=True)
    leaves = [x, model.conv.weight, model.norm.weight, model.act.weight]
    eager = model(x)
    compiled = kiln.compile(model, backend=backend, fullgraph=True)(x)
    assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    cot = kiln.randn(*eager.shape)
    for got, want in zip(
        kiln.autograd.grad(compiled, leaves, cot), kiln.autograd.grad(eager, leaves, cot)
    ):
        assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_bag_fractional_pool_and_distances_compile(backend):
    kiln.manual_seed(1)
    idx, off = kiln.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0]), kiln.tensor([0, 2, 2, 5])
    weight = kiln.randn(10, 4, requires_grad=True)
    per_sample = kiln.rand(10, requires_grad=True)
    x = kiln.randn(2, 3, 9, requires_grad=True)
    y = kiln.randn(2, 4, 6, 6, requires_grad=True)
    samples = kiln.rand(2, 4, 2)
    args = (idx, off, weight, per_sample, x, y, samples)
    leaves = [weight, per_sample, x, y]
    eager = _bags_and_pools(*args)
    compiled = kiln.compile(_bags_and_pools, backend=backend, fullgraph=True)(*args)
    assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for got, want in zip(kiln.autograd.grad(compiled, leaves), kiln.autograd.grad(eager, leaves)):
        assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pooling_padding_and_transposed_conv_modules_compile(backend):
    kiln.manual_seed(2)
    model = nn.Sequential(
        nn.CircularPad3d((1, 0, 0, 1, 1, 1)),
        nn.ConvTranspose3d(3, 2, 2, stride=2, padding=1),
        nn.MaxPool3d(2, stride=1),
        nn.AvgPool3d(2, ceil_mode=True),
        nn.AdaptiveMaxPool3d((2, 1, 2)),
        nn.Flatten(),
        nn.Softmin(dim=1),
    )
    x = kiln.randn(2, 3, 4, 5, 4, requires_grad=True)
    eager = model(x)
    compiled = kiln.compile(model, backend=backend, fullgraph=True)(x)
    assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    cot = kiln.randn(*eager.shape)
    leaves = [x, model[1].weight, model[1].bias]
    for got, want in zip(
        kiln.autograd.grad(compiled, leaves, cot), kiln.autograd.grad(eager, leaves, cot)
    ):
        assert_close(got, want, rtol=1e-4, atol=1e-5)
