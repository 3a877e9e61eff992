"""Summary protocol buffers for each ``add_*`` call, shaped as PyTorch's writer shapes them.

Values arrive as kiln tensors, numpy arrays or Python numbers and are read as numpy arrays.
Each builder returns a ``Summary`` that TensorBoard's plugins (scalars, histograms, images,
audio, text, hparams, PR curves, custom scalars) recognise; the same call gives the same proto
as ``torch.utils.tensorboard``.
Images are encoded as PNG here (zlib), so no imaging library is needed.
"""

from __future__ import annotations

import io
import struct
import wave
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from tensorboard.plugins.pr_curve.plugin_data_pb2 import PrCurvePluginData

from ...runtime.tensor import Tensor

__all__ = [
    "to_numpy",
    "scalar",
    "histogram",
    "histogram_raw",
    "tensor_summary",
    "default_bins",
    "image",
    "image_grid",
    "image_boxes",
    "figure_to_image",
    "text",
    "pr_curve",
    "pr_curve_raw",
    "audio",
    "custom_scalars",
    "hparams",
    "encode_png",
]


def to_numpy(value: Any) -> np.ndarray:
    """A tensor, array, number or list as a numpy array (tensors are detached and copied to the
    host)."""
    if isinstance(value, Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (int, float, bool, np.number, list, tuple)):
        return np.array(value)
    raise NotImplementedError(f"Got {type(value)}, but numpy array or kiln tensor are expected.")


def _one_value(value: Any) -> float:
    array = to_numpy(value).squeeze()
    if array.ndim != 0:
        raise AssertionError(
            f"Tensor should contain one element (0 dimensions). Was given size: {array.size} "
            f"and {array.ndim} dimensions."
        )
    return float(array)


def scalar(
    tag: str, value: Any, new_style: bool = False, double_precision: bool = False
) -> Summary:
    """A scalar: ``simple_value`` (the classic form), or with ``new_style`` a 0-d tensor under the
    scalars plugin (float32, or float64 with ``double_precision``)."""
    number = _one_value(value)
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=number)])
    if double_precision:
        tensor = TensorProto(double_val=[number], dtype="DT_DOUBLE")
    else:
        tensor = TensorProto(float_val=[number], dtype="DT_FLOAT")
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    return Summary(value=[Summary.Value(tag=tag, tensor=tensor, metadata=metadata)])


def default_bins() -> list[float]:
    """TensorFlow's histogram edges (``bins="tensorflow"``): ±1e-12 growing by 10% to 1e20, and 0."""
    edges = []
    edge = 1e-12
    while edge < 1e20:
        edges.append(edge)
        edge *= 1.1
    return [-e for e in reversed(edges)] + [0] + edges


def histogram(tag: str, values: Any, bins: Any, max_bins: int | None = None) -> Summary:
    """A histogram of ``values`` over ``bins`` (numpy's ``bins``: edges, a count or a rule),
    merged down to ``max_bins`` buckets when given, and trimmed to the buckets that hold values
    (keeping one empty bucket before the first, so TensorBoard sees where the support starts)."""
    flat = to_numpy(values).astype(float).reshape(-1)
    if flat.size == 0:
        raise ValueError("The input has no element.")
    counts, limits = np.histogram(flat, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        group = len(counts) // max_bins
        counts = np.pad(counts, (0, (-len(counts)) % group)).reshape(-1, group).sum(axis=1)
        limits = np.concatenate([limits[:-1:group], limits[-1:]])
    occupied = np.flatnonzero(counts)
    # no value inside the bins: the slices below come out empty, and that is an error
    first, last = (int(occupied[0]), int(occupied[-1])) if occupied.size else (len(counts), 0)
    if first > 0:
        counts = counts[first - 1 : last + 1]
    else:
        counts = np.concatenate([[0], counts[: last + 1]])
    limits = limits[first : last + 2]
    if counts.size == 0 or limits.size == 0:
        raise ValueError("The histogram is empty, please file a bug report.")
    proto = HistogramProto(
        min=flat.min(),
        max=flat.max(),
        num=len(flat),
        sum=flat.sum(),
        sum_squares=flat.dot(flat),
        bucket_limit=limits.tolist(),
        bucket=counts.tolist(),
    )
    return Summary(value=[Summary.Value(tag=tag, histo=proto)])


def histogram_raw(
    tag: str, min: Any, max: Any, num: Any, sum: Any, sum_squares: Any,
    bucket_limits: Any, bucket_counts: Any,
) -> Summary:  # fmt: skip
    """A histogram whose statistics and buckets the caller computed (upper limit per bucket)."""
    if len(bucket_limits) != len(bucket_counts):
        raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")
    proto = HistogramProto(
        min=min, max=max, num=num, sum=sum, sum_squares=sum_squares,
        bucket_limit=bucket_limits, bucket=bucket_counts,
    )  # fmt: skip
    return Summary(value=[Summary.Value(tag=tag, histo=proto)])


# ---------------------------------------------------------------------- whole tensors


def _float32_bits(values: np.ndarray) -> list[int]:
    """Each value as the bits of its float32 (PyTorch's ``half_val`` for 16-bit floats)."""
    return values.astype(np.float32).reshape(-1).view(np.int32).tolist()


def _complex_parts(values: np.ndarray) -> list[float]:
    return np.stack([values.real, values.imag], -1).reshape(-1).tolist()


def _flat(values: np.ndarray) -> list:
    return values.reshape(-1).tolist()


# dtype name -> (TensorProto dtype, value field, conversion), as torch.utils.tensorboard's table
_TENSOR_FIELDS = {
    "float16": ("DT_HALF", "half_val", _float32_bits),
    "bfloat16": ("DT_BFLOAT16", "half_val", _float32_bits),
    "float32": ("DT_FLOAT", "float_val", _flat),
    "float64": ("DT_DOUBLE", "double_val", _flat),
    "int8": ("DT_INT8", "int_val", _flat),
    "uint8": ("DT_UINT8", "uint32_val", _flat),
    "int16": ("DT_INT16", "int_val", _flat),
    "int32": ("DT_INT32", "int_val", _flat),
    "int64": ("DT_INT64", "int64_val", _flat),
    "bool": ("DT_BOOL", "bool_val", _flat),
    "complex64": ("DT_COMPLEX64", "scomplex_val", _complex_parts),
    "complex128": ("DT_COMPLEX128", "dcomplex_val", _complex_parts),
}


def tensor_summary(tag: str, tensor: Tensor) -> Summary:
    """A whole tensor under the tensor plugin (``add_tensor``)."""
    if tensor.numel() * tensor.dtype.itemsize >= 1 << 31:
        raise ValueError("tensor is bigger than protocol buffer's hard limit of 2GB in size")
    name = str(tensor.dtype).split(".")[-1]
    if name not in _TENSOR_FIELDS:
        raise ValueError(f"{tag} has unsupported tensor dtype {tensor.dtype}")
    kind, field, convert = _TENSOR_FIELDS[name]
    values = to_numpy(tensor.float() if name == "bfloat16" else tensor)
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=n) for n in tensor.shape])
    proto = TensorProto(dtype=kind, tensor_shape=shape, **{field: convert(values)})
    plugin = SummaryMetadata.PluginData(plugin_name="tensor")
    value = Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin), tensor=proto)
    return Summary(value=[value])


# ---------------------------------------------------------------------- images


def _to_hwc(array: np.ndarray, dataformats: str) -> np.ndarray:
    """An image (``HW``, ``CHW``/``HWC`` ...) or a batch (``NCHW`` ...) as one RGB(A) image in
    HWC order: grey becomes three equal channels, a batch a grid eight images wide."""
    if len(set(dataformats)) != len(dataformats):
        raise AssertionError(
            f"You can not use the same dimension shordhand twice. input_format: {dataformats}"
        )
    if array.ndim != len(dataformats):
        raise AssertionError(
            f"size of input tensor and input format are different. tensor shape: "
            f"{array.shape}, input_format: {dataformats}"
        )
    dataformats = dataformats.upper()
    if array.ndim == 4:
        batch = array.transpose([dataformats.find(c) for c in "NCHW"])
        return image_grid(batch).transpose(1, 2, 0)
    if array.ndim == 3:
        hwc = array.transpose([dataformats.find(c) for c in "HWC"])
        return np.concatenate([hwc] * 3, 2) if hwc.shape[2] == 1 else hwc
    hw = array.transpose([dataformats.find(c) for c in "HW"])
    return np.stack([hw] * 3, 2)


def image_grid(batch: np.ndarray, columns: int = 8) -> np.ndarray:
    """NCHW images laid out row by row on one CHW canvas."""
    if batch.shape[1] == 1:
        batch = np.concatenate([batch] * 3, 1)
    if batch.shape[1] != 3:  # PyTorch's grid takes grey or RGB images only
        raise AssertionError(
            f"Input should be a 4D numpy array with 3 channels; got shape {batch.shape}"
        )
    count, channels, height, width = batch.shape
    columns = min(count, columns)
    rows = -(-count // columns)
    canvas = np.zeros((channels, height * rows, width * columns), dtype=batch.dtype)
    for i in range(count):
        y, x = divmod(i, columns)
        canvas[:, y * height : (y + 1) * height, x * width : (x + 1) * width] = batch[i]
    return canvas


def encode_png(pixels: np.ndarray) -> bytes:
    """An HxWxC uint8 image (C = 1..4: grey, grey+alpha, RGB, RGBA) as PNG bytes."""
    height, width, channels = pixels.shape
    color_type = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    rows = np.ascontiguousarray(pixels, dtype=np.uint8).reshape(height, width * channels)
    scanlines = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1)  # filter 0

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(scanlines.tobytes()))
        + chunk(b"IEND", b"")
    )


def image(tag: str, values: Any, dataformats: str = "CHW") -> Summary:
    """An image summary. Floating-point pixels are in [0, 1] and scaled by 255 (then clipped and
    truncated to bytes, as PyTorch does); uint8 pixels are taken as they are."""
    array = _to_hwc(to_numpy(values), dataformats)
    scale = 1 if array.dtype == np.uint8 else 255
    pixels = (array.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    height, width, channels = pixels.shape
    proto = Summary.Image(
        height=height, width=width, colorspace=channels, encoded_image_string=encode_png(pixels)
    )
    return Summary(value=[Summary.Value(tag=tag, image=proto)])


def image_boxes(
    tag: str,
    values: Any,
    boxes: Any,
    rescale: float = 1,
    dataformats: str = "CHW",
    labels: list | None = None,
) -> Summary:
    """An image with boxes (N x 4: xmin, ymin, xmax, ymax) drawn in red, each labelled when
    ``labels`` names one per box, then scaled by ``rescale``. Drawn with Pillow (needed by this
    call only), as PyTorch draws them, so the pixels are PyTorch's."""
    from PIL import Image

    array = _to_hwc(to_numpy(values), dataformats)
    scale = 1 if array.dtype == np.uint8 else 255
    pixels = (array.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    height, width, channels = pixels.shape
    image = Image.fromarray(pixels)
    boxes = to_numpy(boxes)
    for i in range(boxes.shape[0]):
        _draw_box(image, *boxes[i, :4], None if labels is None else labels[i])
    size = (int(width * rescale), int(height * rescale))
    image = image.resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    proto = Summary.Image(
        height=height, width=width, colorspace=channels, encoded_image_string=buffer.getvalue()
    )
    return Summary(value=[Summary.Value(tag=tag, image=proto)])


def _draw_box(image, left, top, right, bottom, label: str | None) -> None:
    """A 2-pixel red box; a label sits on a red band inside its bottom-left corner."""
    from PIL import ImageDraw, ImageFont

    font = ImageFont.load_default()
    draw = ImageDraw.Draw(image)
    corners = [(left, top), (left, bottom), (right, bottom), (right, top), (left, top)]
    draw.line(corners, width=2, fill="Red")
    if label:
        x0, y0, x1, y1 = font.getbbox(label)
        text_width, text_height = x1 - x0, y1 - y0
        margin = np.ceil(0.05 * text_height)
        band = [(left, bottom - text_height - 2 * margin), (left + text_width, bottom)]
        draw.rectangle(band, fill="Red")
        position = (left + margin, bottom - text_height - margin)
        draw.text(position, label, fill="black", font=font)


def figure_to_image(figures: Any, close: bool = True) -> np.ndarray:
    """A matplotlib figure rendered as a CHW uint8 RGB image, or a list of them as NCHW (the
    figures are closed unless ``close`` is false); needs matplotlib."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    def render(figure) -> np.ndarray:
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        width, height = figure.canvas.get_width_height()
        rgba = np.frombuffer(canvas.buffer_rgba(), dtype=np.uint8).reshape(height, width, 4)
        if close:
            plt.close(figure)
        return np.moveaxis(rgba[:, :, :3], 2, 0)

    if isinstance(figures, list):
        return np.stack([render(figure) for figure in figures])
    return render(figures)


# ---------------------------------------------------------------------- audio


def audio(tag: str, values: Any, sample_rate: int = 44100) -> Summary:
    """Mono sound (values in [-1, 1], clipped with a warning when outside) as 16-bit WAV."""
    array = to_numpy(values).squeeze()
    if abs(array).max() > 1:
        print("warning: audio amplitude out of range, auto clipped.")
        array = array.clip(-1, 1)
    if array.ndim != 1:
        raise AssertionError("input tensor should be 1 dimensional.")
    samples = (array * np.iinfo(np.int16).max).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(samples.data)
    proto = Summary.Audio(
        sample_rate=sample_rate,
        num_channels=1,
        length_frames=samples.shape[-1],
        encoded_audio_string=buffer.getvalue(),
        content_type="audio/wav",
    )
    return Summary(value=[Summary.Value(tag=tag, audio=proto)])


# ---------------------------------------------------------------------- PR curves


def pr_curve(
    tag: str, labels: Any, predictions: Any, num_thresholds: int = 127, weights: Any = None
) -> Summary:
    """A precision-recall curve for the pr_curves plugin: a 6 x ``num_thresholds`` table (true
    and false positives, true and false negatives, precision, recall) over evenly spaced
    thresholds, computed as TensorBoard's own summary op does (at most 127 thresholds)."""
    num_thresholds = min(num_thresholds, 127)
    labels, predictions = to_numpy(labels), to_numpy(predictions)
    weights = 1.0 if weights is None else weights
    buckets = np.int32(np.floor(predictions * (num_thresholds - 1)))
    positive = labels.astype(np.float64)
    span = (0, num_thresholds - 1)
    tp_buckets, _ = np.histogram(buckets, num_thresholds, span, weights=positive * weights)
    fp_buckets, _ = np.histogram(buckets, num_thresholds, span, weights=(1.0 - positive) * weights)
    tp = np.cumsum(tp_buckets[::-1])[::-1]  # counts at or above each threshold
    fp = np.cumsum(fp_buckets[::-1])[::-1]
    tn, fn = fp[0] - fp, tp[0] - tp
    precision = tp / np.maximum(1e-7, tp + fp)
    recall = tp / np.maximum(1e-7, tp + fn)
    return pr_curve_raw(tag, tp, fp, tn, fn, precision, recall, num_thresholds)


def pr_curve_raw(
    tag: str, tp: Any, fp: Any, tn: Any, fn: Any, precision: Any, recall: Any,
    num_thresholds: int = 127,
) -> Summary:  # fmt: skip
    """A PR curve from counts and rates already computed, one value per threshold each."""
    num_thresholds = min(num_thresholds, 127)
    data = np.stack([to_numpy(v) for v in (tp, fp, tn, fn, precision, recall)])
    content = PrCurvePluginData(version=0, num_thresholds=num_thresholds).SerializeToString()
    plugin = SummaryMetadata.PluginData(plugin_name="pr_curves", content=content)
    tensor = TensorProto(
        dtype="DT_FLOAT",
        float_val=data.reshape(-1).tolist(),
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=n) for n in data.shape]),
    )
    value = Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin), tensor=tensor)
    return Summary(value=[value])


# ---------------------------------------------------------------------- custom scalars


def custom_scalars(layout: dict) -> Summary:
    """The custom_scalars plugin's layout: ``{category: {chart title: ["Multiline", tags] or
    ["Margin", [value, lower, upper]]}}``, charts of curves already logged with ``add_scalar``."""
    categories = []
    for category, charts in layout.items():
        built = []
        for title, (kind, tags) in charts.items():
            if kind == "Margin":
                if len(tags) != 3:
                    raise AssertionError("len(tags) != 3")
                series = layout_pb2.MarginChartContent.Series(
                    value=tags[0], lower=tags[1], upper=tags[2]
                )
                chart = layout_pb2.Chart(
                    title=title, margin=layout_pb2.MarginChartContent(series=[series])
                )
            else:
                chart = layout_pb2.Chart(
                    title=title, multiline=layout_pb2.MultilineChartContent(tag=tags)
                )
            built.append(chart)
        categories.append(layout_pb2.Category(title=category, chart=built))
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[layout_pb2.Layout(category=categories).SerializeToString()],
        tensor_shape=TensorShapeProto(),
    )
    plugin = SummaryMetadata.PluginData(plugin_name="custom_scalars")
    value = Summary.Value(
        tag="custom_scalars__config__", tensor=tensor, metadata=SummaryMetadata(plugin_data=plugin)
    )
    return Summary(value=[value])


# ---------------------------------------------------------------------- text and hparams


def text(tag: str, text_string: str) -> Summary:
    """A string under the text plugin (TensorBoard renders it as markdown)."""
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[text_string.encode("utf-8")],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary(
        value=[Summary.Value(tag=tag + "/text_summary", metadata=metadata, tensor=tensor)]
    )


def _hparams_summary(tag: str, **data: Any) -> Summary:
    content = plugin_data_pb2.HParamsPluginData(version=0, **data).SerializeToString()
    plugin = SummaryMetadata.PluginData(plugin_name="hparams", content=content)
    return Summary(value=[Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))])


def _domain(values: Sequence, kind: str) -> Any:
    from google.protobuf import struct_pb2

    return struct_pb2.ListValue(values=[struct_pb2.Value(**{kind: v}) for v in values])


def hparams(
    hparam_dict: dict, metric_dict: dict, hparam_domain_discrete: dict | None = None
) -> tuple[Summary, Summary, Summary]:
    """The hparams plugin's three summaries for one run: the experiment (which hyperparameters
    and metrics exist), the session start (this run's values) and the session end."""
    domains = hparam_domain_discrete or {}
    if not isinstance(domains, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing else.")
    for key, options in domains.items():
        if key not in hparam_dict or not isinstance(options, list):
            raise TypeError(
                f"parameter: hparam_domain_discrete[{key}] should be a list that names a key of "
                "hparam_dict"
            )
        if not all(isinstance(o, type(hparam_dict[key])) for o in options):
            raise TypeError(
                f"parameter: hparam_domain_discrete[{key}] should be a list of the same type as "
                f"hparam_dict[{key}]."
            )

    start = plugin_data_pb2.SessionStartInfo()
    infos = []
    for key, value in hparam_dict.items():
        if value is None:
            continue
        if isinstance(value, (int, float)):  # bools too, as numbers (PyTorch's reading)
            start.hparams[key].number_value = value
            kind, data_type = "number_value", "DATA_TYPE_FLOAT64"
        elif isinstance(value, str):
            start.hparams[key].string_value = value
            kind, data_type = "string_value", "DATA_TYPE_STRING"
        elif isinstance(value, Tensor):
            start.hparams[key].number_value = to_numpy(value).reshape(-1)[0]
            kind, data_type = "number_value", "DATA_TYPE_FLOAT64"
        else:
            raise ValueError("value should be one of int, float, str, bool, or torch.Tensor")
        info = api_pb2.HParamInfo(name=key, type=api_pb2.DataType.Value(data_type))
        if key in domains:
            info.domain_discrete.CopyFrom(_domain(domains[key], kind))
        infos.append(info)

    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k)) for k in metric_dict]
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))
    return (
        _hparams_summary("_hparams_/experiment", experiment=experiment),
        _hparams_summary("_hparams_/session_start_info", session_start_info=start),
        _hparams_summary("_hparams_/session_end_info", session_end_info=end),
    )
