"""Samples for convolution, pooling and interpolation: strides, padding (ints, tuples, 'same',
'valid'), dilation, groups, transposed convolutions, ceil mode, unbatched and strided inputs."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []
CONV = ("convolution",)


def F(name):
    return lambda lib, *a, **k: getattr(lib.nn.functional, name)(*a, **k)


def add(name, args, ops=(), **kw):
    SAMPLES.append(Sample(name, args, fn=kw.pop("fn", None) or F(name), ops=ops, **kw))


# ------------------------------------------------------------------------------ convolution

add("conv1d", (T((2, 3, 7)), T((4, 3, 3)), T((4,))), CONV)
add("conv1d", (T((2, 4, 9)), T((6, 2, 2))), CONV, kwargs={"stride": 2, "groups": 2, "padding": 1})
add(
    "conv1d",
    (T((3, 8)), T((2, 3, 4))),
    CONV,
    kwargs={"padding": "same", "dilation": 2},
    id="conv1d-unbatched-same-even",
)
add("conv1d", (T((1, 2, 6)), T((2, 2, 3)), T((2,))), CONV, kwargs={"padding": "valid"})
add("conv2d", (T((2, 3, 5, 5)), T((4, 3, 3, 3)), T((4,))), CONV, kwargs={"padding": 1})
add(
    "conv2d",
    (T((2, 3, 6, 7)), T((4, 3, 3, 2))),
    CONV,
    kwargs={"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)},
)
add("conv2d", (T((1, 6, 5, 5)), T((6, 2, 3, 3)), T((6,))), CONV, kwargs={"groups": 3})
add(
    "conv2d",
    (T((2, 4, 5, 5)), T((4, 1, 3, 3))),
    CONV,
    kwargs={"groups": 4, "stride": 2, "padding": 1},
    id="conv2d-depthwise",
)
add(
    "conv2d",
    (T((2, 2, 6, 6)), T((3, 2, 4, 2))),
    CONV,
    kwargs={"padding": "same"},
    id="conv2d-same-even",
)
add("conv2d", (T((3, 5, 6)), T((2, 3, 3, 3))), CONV, id="conv2d-unbatched")
add(
    "conv2d",
    (T((2, 3, 5, 6), layout="transposed"), T((2, 3, 2, 2), layout="strided")),
    CONV,
    gradcheck=False,
)
add(
    "conv2d",
    (T((2, 3, 5, 5), dtype="float64"), T((4, 3, 3, 3), dtype="float64")),
    CONV,
    kwargs={"stride": 3},
)
add(
    "conv2d",
    (T((1, 2, 4, 4), dtype="float16"), T((2, 2, 3, 3), dtype="float16")),
    CONV,
    grad=False,
    gradcheck=False,
    rtol=2e-3,
    atol=2e-3,
)
add(
    "conv3d", (T((1, 2, 4, 4, 3)), T((3, 2, 2, 3, 2)), T((3,))), CONV, kwargs={"padding": (1, 0, 1)}
)
add(
    "conv3d",
    (T((1, 4, 5, 4, 4)), T((2, 2, 3, 2, 2))),
    CONV,
    kwargs={"stride": 2, "groups": 2, "dilation": (1, 2, 1)},
)
add("conv_transpose1d", (T((2, 3, 5)), T((3, 2, 3)), T((2,))), CONV, kwargs={"stride": 2})
add(
    "conv_transpose1d",
    (T((2, 4, 5)), T((4, 1, 2))),
    CONV,
    kwargs={"stride": 3, "padding": 1, "output_padding": 2, "groups": 2},
)
add(
    "conv_transpose2d",
    (T((2, 3, 4, 4)), T((3, 2, 3, 3)), T((2,))),
    CONV,
    kwargs={"stride": 2, "padding": 1, "output_padding": 1},
)
add(
    "conv_transpose2d",
    (T((1, 4, 3, 4)), T((4, 3, 2, 3))),
    CONV,
    kwargs={"stride": (1, 2), "dilation": (2, 1), "groups": 2, "padding": (2, 0)},
)
add("conv_transpose2d", (T((3, 3, 3)), T((3, 2, 2, 2))), CONV, id="conv_transpose2d-unbatched")
add(
    "conv_transpose2d",
    (T((2, 3, 4, 4), layout="transposed"), T((3, 2, 3, 3))),
    CONV,
    kwargs={"stride": 2},
    gradcheck=False,
)
add(
    "conv_transpose3d",
    (T((1, 2, 3, 2, 3)), T((2, 2, 2, 2, 2)), T((2,))),
    CONV,
    kwargs={"stride": 2, "padding": (0, 1, 0)},
)

# ------------------------------------------------------------------------------ pooling

MAX = ("_max_pool",)
add("max_pool1d", (T((2, 3, 9)), 3), MAX)
add("max_pool1d", (T((3, 8)), 2), MAX, kwargs={"stride": 3, "padding": 1, "ceil_mode": True})
add("max_pool2d", (T((2, 3, 6, 6)), 2), MAX)
add("max_pool2d", (T((2, 3, 7, 7)), 3), MAX, kwargs={"stride": 2, "padding": 1})
add(
    "max_pool2d",
    (T((1, 2, 7, 6)), (3, 2)),
    MAX,
    kwargs={"stride": (2, 1), "dilation": (2, 1), "ceil_mode": True, "return_indices": True},
)
add(
    "max_pool2d",
    (T((2, 5, 5)), 2),
    MAX,
    kwargs={"ceil_mode": True, "return_indices": True},
    id="max_pool2d-unbatched-indices",
)
add("max_pool2d", (T((2, 2, 6, 8), layout="transposed"), 2), MAX, gradcheck=False)
add(
    "max_pool2d",
    (T((1, 1, 3, 3), values=[[[[1.0, 1.0, 0.0], [1.0, 0.5, 0.0], [0.0, 0.0, 2.0]]]]), 2),
    MAX,
    kwargs={"stride": 1, "return_indices": True},
    gradcheck=False,
    id="max_pool2d-ties",
)
add("max_pool3d", (T((1, 2, 4, 5, 4)), 2), MAX, kwargs={"stride": (1, 2, 2), "padding": 1})
add("max_pool2d_with_indices", (T((1, 2, 5, 5)), 3), MAX, kwargs={"stride": 2})
AVG = ("_avg_pool",)
add("avg_pool1d", (T((2, 3, 9)), 3), AVG)
add(
    "avg_pool1d",
    (T((2, 8)), 3),
    AVG,
    kwargs={"stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
)
add("avg_pool2d", (T((2, 3, 6, 6)), 2), AVG)
add("avg_pool2d", (T((2, 3, 7, 8)), 3), AVG, kwargs={"stride": 2, "padding": 1})
add(
    "avg_pool2d",
    (T((1, 2, 7, 6)), (3, 2)),
    AVG,
    kwargs={"stride": (2, 3), "padding": (1, 1), "ceil_mode": True, "count_include_pad": False},
)
add(
    "avg_pool2d",
    (T((1, 2, 8, 7)), 3),
    AVG,
    kwargs={"stride": 2, "padding": 1, "ceil_mode": True},
    id="avg_pool2d-ceil-include-pad",
)
add("avg_pool2d", (T((1, 2, 5, 5)), 2), AVG, kwargs={"divisor_override": 3})
add("avg_pool2d", (T((2, 4, 6), layout="strided"), 2), AVG, gradcheck=False)
add("avg_pool3d", (T((1, 2, 4, 5, 4)), 2), AVG, kwargs={"stride": (1, 2, 2), "padding": 1})
ADAPTIVE = ("_adaptive_avg_pool",)
add("adaptive_avg_pool1d", (T((2, 3, 10)), 4), ADAPTIVE)
add("adaptive_avg_pool2d", (T((2, 3, 7, 9)), (3, 4)), ADAPTIVE)
add("adaptive_avg_pool2d", (T((2, 3, 8, 6)), (4, 3)), ADAPTIVE, id="adaptive_avg_pool2d-even")
add("adaptive_avg_pool2d", (T((3, 5, 5)), 1), ADAPTIVE, id="adaptive_avg_pool2d-global")
add("adaptive_avg_pool2d", (T((1, 2, 5, 7)), (None, 3)), ADAPTIVE)
add("adaptive_avg_pool3d", (T((1, 2, 5, 4, 3)), (2, 3, 2)), ADAPTIVE)
AMAX = ("_adaptive_max_pool",)
add("adaptive_max_pool1d", (T((2, 3, 10)), 4), AMAX)
add("adaptive_max_pool2d", (T((2, 3, 7, 9)), (3, 4)), AMAX, kwargs={"return_indices": True})
add("adaptive_max_pool2d", (T((3, 6, 6)), 2), AMAX, id="adaptive_max_pool2d-unbatched")

# ------------------------------------------------------------------------------ interpolation

INTERP = ("index",)
add("interpolate", (T((2, 3, 5)),), INTERP, kwargs={"scale_factor": 2})
add("interpolate", (T((2, 3, 5, 4)),), INTERP, kwargs={"size": (7, 3)})
add(
    "interpolate", (T((2, 3, 5, 4)),), INTERP, kwargs={"scale_factor": 1.7, "mode": "nearest-exact"}
)
add("interpolate", (T((1, 2, 3, 4, 2)),), INTERP, kwargs={"scale_factor": (2, 1.5, 1)})
add("interpolate", (T((2, 3, 6)),), INTERP, kwargs={"size": 9, "mode": "linear"})
add("interpolate", (T((2, 3, 5, 4)),), INTERP, kwargs={"scale_factor": 1.5, "mode": "bilinear"})
add(
    "interpolate",
    (T((2, 3, 5, 4)),),
    INTERP,
    kwargs={"size": (3, 7), "mode": "bilinear", "align_corners": True},
)
add("interpolate", (T((1, 2, 5, 4)),), INTERP, kwargs={"scale_factor": 2.3, "mode": "bicubic"})
add(
    "interpolate",
    (T((1, 2, 5, 4)),),
    INTERP,
    kwargs={"size": (4, 9), "mode": "bicubic", "align_corners": True},
)
add(
    "interpolate",
    (T((1, 2, 3, 4, 2)),),
    INTERP,
    kwargs={"scale_factor": 2, "mode": "trilinear"},
)
add("interpolate", (T((1, 2, 6, 6)),), ADAPTIVE, kwargs={"size": (4, 3), "mode": "area"})
add(
    "interpolate",
    (T((1, 2, 5, 4)),),
    INTERP,
    kwargs={"scale_factor": 1.5, "mode": "bilinear", "recompute_scale_factor": True},
)

# ------------------------------------------------------------------------------ patches, shuffles

add("unfold", (T((2, 3, 5, 6)), (2, 3)), CONV, kwargs={"padding": 1, "stride": 2})
add("unfold", (T((3, 5, 5)), 2), CONV, kwargs={"dilation": 2}, id="unfold-unbatched")
add("fold", (T((2, 18, 9)), (5, 6), (2, 3)), CONV, kwargs={"padding": 1, "stride": 2})
add("fold", (T((12, 16)), (5, 5), 2), CONV, id="fold-unbatched")
add("pixel_shuffle", (T((2, 8, 3, 4)), 2), ())
add("pixel_unshuffle", (T((2, 3, 4, 6)), 2), ())

# ------------------------------------------------------------------------------ torch.<name> forms

add(
    "torch.conv2d",
    (T((2, 3, 5, 5)), T((4, 3, 3, 3)), T((4,)), 2, 1),
    CONV,
    fn=lambda lib, *a: lib.conv2d(*a),
)
add(
    "torch.conv_transpose1d",
    (T((2, 3, 5)), T((3, 2, 3)), None, 2),
    CONV,
    fn=lambda lib, *a: lib.conv_transpose1d(*a),
)
add("torch.max_pool2d", (T((2, 3, 6, 6)), 3, 2, 1), MAX, fn=lambda lib, *a: lib.max_pool2d(*a))
add("torch.avg_pool1d", (T((2, 3, 7)), 2), AVG, fn=lambda lib, *a: lib.avg_pool1d(*a))
add(
    "torch.adaptive_max_pool1d",
    (T((2, 3, 8)), 3),
    AMAX,
    fn=lambda lib, *a: lib.adaptive_max_pool1d(*a),
)
add(
    "torch.batch_norm",
    (T((4, 3)), T((3,)), T((3,)), None, None, True, 0.1, 1e-5, False),
    ("_native_batch_norm",),
    fn=lambda lib, *a: lib.batch_norm(*a),
)
add(
    "torch.layer_norm",
    (T((3, 4)), (4,), None, None, 1e-5, True),
    ("layer_norm",),
    fn=lambda lib, *a: lib.layer_norm(*a),
)
add("torch.dropout", (T((3, 4)), 0.5, False), (), fn=lambda lib, *a: lib.dropout(*a))

add("lp_pool1d", (T((2, 3, 8), low=0.1, high=2), 2, 3), ("_avg_pool",))
add("lp_pool2d", (T((2, 3, 6, 6), low=0.1, high=2), 3.0, 2), ("_avg_pool",), kwargs={"stride": 1})
add("lp_pool2d", (T((1, 2, 4, 4)), float("inf"), 2), ("_max_pool",), id="lp_pool2d-inf")
add(
    "channel_shuffle",
    (T((2, 6, 3)), 3),
    (),
    grad=False,
    gradcheck=False,
    fn=lambda lib, x, g: (
        lib.nn.functional.channel_shuffle(x, g)
        if lib.__name__ == "kiln"
        else lib.nn.functional.channel_shuffle(x.contiguous(), g)
    ),
)


def _unpool(lib, x, **k):
    values, indices = lib.nn.functional.max_pool2d(x, 2, return_indices=True, **k)
    return lib.nn.functional.max_unpool2d(values, indices, 2, output_size=x.shape, **k)


add("max_unpool2d", (T((2, 3, 5, 4)),), ("_max_pool",), fn=_unpool)
add(
    "max_unpool1d",
    (T((2, 3, 8)),),
    ("_max_pool",),
    fn=lambda lib, x: lib.nn.functional.max_unpool1d(
        *lib.nn.functional.max_pool1d(x, 2, return_indices=True), 2
    ),
)
