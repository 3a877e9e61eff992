"""``SummaryWriter``: PyTorch's TensorBoard logger, over the ``tensorboard`` package's event writer.

A writer owns one event file in ``log_dir`` (``runs/<date>_<host><comment>`` by default), written
in the background by tensorboard's ``EventFileWriter`` (``flush`` / ``close`` / every
``flush_secs``). ``add_scalars`` writes each curve to its own sub-directory, as PyTorch's does,
so TensorBoard draws them in one chart; ``add_hparams`` writes a run of its own;
``add_embedding`` writes the projector's files beside the event file.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event, SessionLog, TaggedRunMetadata
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from . import projector, summary
from .graph import graph_def, run_metadata
from .tracing import trace_model

__all__ = ["SummaryWriter", "FileWriter"]


class FileWriter:
    """Events and summaries into one event file in ``log_dir``."""

    def __init__(self, log_dir: str, max_queue: int = 10, flush_secs: int = 120,
                 filename_suffix: str = ""):  # fmt: skip
        self.event_writer = EventFileWriter(str(log_dir), max_queue, flush_secs, filename_suffix)

    def get_logdir(self) -> str:
        return self.event_writer.get_logdir()

    def add_event(self, event: Event, step: int | None = None, walltime: float | None = None):
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)
        self.event_writer.add_event(event)

    def add_summary(self, summary: Summary, global_step: int | None = None,
                    walltime: float | None = None) -> None:  # fmt: skip
        self.add_event(Event(summary=summary), global_step, walltime)

    def flush(self) -> None:
        self.event_writer.flush()

    def close(self) -> None:
        self.event_writer.close()


class SummaryWriter:
    """Log scalars, histograms, images, text, hyperparameters and model graphs for TensorBoard
    (PyTorch's ``torch.utils.tensorboard.SummaryWriter``)."""

    def __init__(
        self,
        log_dir: str | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: int = 120,
        filename_suffix: str = "",
    ):
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self.file_writer: FileWriter | None = None
        self.all_writers: dict[str, FileWriter] | None = None
        self._projector_config = projector.ProjectorConfig()
        self._get_file_writer()

    def _get_file_writer(self) -> FileWriter:
        """The main file writer, made again after ``close`` (PyTorch's writer reopens too)."""
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = FileWriter(
                self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix
            )
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:  # TensorBoard drops events after this step
                self.file_writer.add_event(
                    Event(step=self.purge_step, file_version="brain.Event:2")
                )
                self.file_writer.add_event(
                    Event(step=self.purge_step, session_log=SessionLog(status=SessionLog.START))
                )
                self.purge_step = None
        return self.file_writer

    def get_logdir(self) -> str:
        return self.log_dir

    # ------------------------------------------------------------------ summaries
    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        """One point of the curve ``tag``."""
        proto = summary.scalar(tag, scalar_value, new_style, double_precision)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: dict[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Several curves in one chart: each goes to ``<log_dir>/<main_tag>_<tag>``."""
        walltime = time.time() if walltime is None else walltime
        log_dir = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            path = log_dir + "/" + main_tag.replace("/", "_") + "_" + tag
            writer = self.all_writers.get(path)
            if writer is None:
                writer = FileWriter(path, self.max_queue, self.flush_secs, self.filename_suffix)
                self.all_writers[path] = writer
            writer.add_summary(summary.scalar(main_tag, value), global_step, walltime)

    def add_tensor(
        self, tag: str, tensor: Any, global_step: int | None = None, walltime: float | None = None
    ) -> None:
        """A whole tensor's values and shape, under the tensor plugin."""
        self._get_file_writer().add_summary(
            summary.tensor_summary(tag, tensor), global_step, walltime
        )

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """A histogram of ``values``; ``bins`` as numpy's, or ``"tensorflow"`` for TensorFlow's
        exponential edges."""
        if isinstance(bins, str) and bins == "tensorflow":
            bins = summary.default_bins()
        proto = summary.histogram(tag, values, bins, max_bins)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_histogram_raw(
        self,
        tag: str,
        min: Any,
        max: Any,
        num: Any,
        sum: Any,
        sum_squares: Any,
        bucket_limits: Any,
        bucket_counts: Any,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """A histogram from statistics and buckets already computed (upper limit per bucket)."""
        proto = summary.histogram_raw(
            tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts
        )
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        """An image: floats in [0, 1] or uint8, laid out as ``dataformats`` says."""
        proto = summary.image(tag, img_tensor, dataformats)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """A batch of images, shown as one grid eight images wide."""
        proto = summary.image(tag, img_tensor, dataformats)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_image_with_boxes(
        self,
        tag: str,
        img_tensor: Any,
        box_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        rescale: float = 1,
        dataformats: str = "CHW",
        labels: list | str | None = None,
    ) -> None:
        """An image with boxes (N x 4: xmin, ymin, xmax, ymax) drawn on it, labelled when
        ``labels`` has one entry per box (needs Pillow)."""
        if labels is not None:
            if isinstance(labels, str):
                labels = [labels]
            if len(labels) != box_tensor.shape[0]:
                labels = None
        proto = summary.image_boxes(tag, img_tensor, box_tensor, rescale, dataformats, labels)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: int | None = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """A matplotlib figure (or a list of them, as a grid) rendered as an image; the figures
        are closed unless ``close`` is false."""
        dataformats = "NCHW" if isinstance(figure, list) else "CHW"
        image = summary.figure_to_image(figure, close)
        self.add_image(tag, image, global_step, walltime, dataformats=dataformats)

    def add_pr_curve(
        self,
        tag: str,
        labels: Any,
        predictions: Any,
        global_step: int | None = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """A precision-recall curve of ``predictions`` (probabilities in [0, 1]) against binary
        ``labels``, at ``num_thresholds`` evenly spaced thresholds (127 at most)."""
        proto = summary.pr_curve(tag, labels, predictions, num_thresholds, weights)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_embedding(
        self,
        mat: Any,
        metadata: list | None = None,
        label_img: Any = None,
        global_step: int | None = None,
        tag: str = "default",
        metadata_header: list | None = None,
    ) -> None:
        """Vectors (N x D) for the embedding projector, with a label per row (``metadata``,
        several columns under ``metadata_header``) and an image per row (``label_img``, NCHW)."""
        log_dir = self._get_file_writer().get_logdir()
        info = projector.write_embedding(
            log_dir, mat, metadata, label_img, global_step or 0, tag, metadata_header
        )
        self._projector_config.embeddings.append(info)
        projector.write_config(log_dir, self._projector_config)

    def add_pr_curve_raw(
        self,
        tag: str,
        true_positive_counts: Any,
        false_positive_counts: Any,
        true_negative_counts: Any,
        false_negative_counts: Any,
        precision: Any,
        recall: Any,
        global_step: int | None = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """A precision-recall curve from counts and rates already computed per threshold
        (``weights`` is accepted for PyTorch's signature and unused, as there)."""
        proto = summary.pr_curve_raw(
            tag, true_positive_counts, false_positive_counts, true_negative_counts,
            false_negative_counts, precision, recall, num_thresholds,
        )  # fmt: skip
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_audio(
        self,
        tag: str,
        snd_tensor: Any,
        global_step: int | None = None,
        sample_rate: int = 44100,
        walltime: float | None = None,
    ) -> None:
        """A mono sound clip, shape (1, L), values in [-1, 1], as 16-bit WAV."""
        proto = summary.audio(tag, snd_tensor, sample_rate)
        self._get_file_writer().add_summary(proto, global_step, walltime)

    def add_custom_scalars(self, layout: dict) -> None:
        """Charts that gather curves logged with ``add_scalar``: ``{category: {title:
        ["Multiline", tags] or ["Margin", [value, lower, upper]]}}`` (once per writer)."""
        self._get_file_writer().add_summary(summary.custom_scalars(layout))

    def add_custom_scalars_multilinechart(
        self, tags: list, category: str = "default", title: str = "untitled"
    ) -> None:
        """One chart of several curves (``add_custom_scalars``' shorthand)."""
        self.add_custom_scalars({category: {title: ["Multiline", tags]}})

    def add_custom_scalars_marginchart(
        self, tags: list, category: str = "default", title: str = "untitled"
    ) -> None:
        """One curve with a band between two others (``tags``: value, lower, upper)."""
        if len(tags) != 3:
            raise AssertionError(f"Expected 3 tags, got {len(tags)}.")
        self.add_custom_scalars({category: {title: ["Margin", tags]}})

    def add_text(
        self,
        tag: str,
        text_string: str,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Text (rendered as markdown) under ``<tag>/text_summary``."""
        self._get_file_writer().add_summary(summary.text(tag, text_string), global_step, walltime)

    def add_hparams(
        self,
        hparam_dict: dict,
        metric_dict: dict,
        hparam_domain_discrete: dict | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """One run's hyperparameters and final metrics, in a run of their own
        (``<log_dir>/<run_name>``, the time by default) for the HPARAMS dashboard."""
        if not isinstance(hparam_dict, dict) or not isinstance(metric_dict, dict):
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        protos = summary.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        log_dir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=log_dir) as run:
            for proto in protos:
                run.file_writer.add_summary(proto, global_step)
            for tag, value in metric_dict.items():
                run.add_scalar(tag, value, global_step)

    def add_graph(
        self,
        model: Any,
        input_to_model: Any = None,
        verbose: bool = False,
        use_strict_trace: bool = True,
    ) -> None:
        """The graph of ``model`` run on ``input_to_model`` (a tensor or a tuple of them), traced
        by kiln's graph tracer; a graph module already captured is drawn as it is."""
        if input_to_model is None and hasattr(model, "graph"):
            captured = model
        else:
            inputs = (
                input_to_model if isinstance(input_to_model, (tuple, list)) else (input_to_model,)
            )
            inputs = tuple(i for i in inputs if i is not None)
            captured = trace_model(model, inputs)
        graph = graph_def(captured, type(model).__name__)
        if verbose:
            print(graph)
        writer = self._get_file_writer()
        writer.add_event(Event(graph_def=graph.SerializeToString()))
        metadata = TaggedRunMetadata(tag="step1", run_metadata=run_metadata())
        writer.add_event(Event(tagged_run_metadata=metadata))

    # ------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """Write everything queued to disk."""
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()

    def close(self) -> None:
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()
            writer.close()
        self.file_writer = self.all_writers = None

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
