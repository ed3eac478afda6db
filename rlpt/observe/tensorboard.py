"""A dependency-light TensorBoard writer (scalars, histograms, text) on tensorboard's own event writer."""
import time

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class TBWriter:
    """Writes event files under `logdir`; only process 0 should construct one."""

    def __init__(self, logdir: str, filename_suffix: str = ""):
        self._writer = EventFileWriter(logdir, filename_suffix=filename_suffix)

    def _emit(self, step: int, value: summary_pb2.Summary.Value):
        event = event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=[value]))
        self._writer.add_event(event)

    def scalar(self, tag: str, value: float, step: int):
        self._emit(step, summary_pb2.Summary.Value(tag=tag, simple_value=float(value)))

    def scalars(self, metrics: dict, step: int):
        for k, v in metrics.items():
            if np.ndim(v) == 0 and np.isfinite(float(v)):
                self.scalar(k, float(v), step)

    def histogram(self, tag: str, values, step: int, bins: int = 30):
        values = np.asarray(values, np.float64).ravel()
        if values.size == 0:
            return
        counts, edges = np.histogram(values, bins=bins)
        hist = summary_pb2.HistogramProto(min=float(values.min()), max=float(values.max()), num=float(values.size),
                                          sum=float(values.sum()), sum_squares=float((values ** 2).sum()),
                                          bucket_limit=[float(e) for e in edges[1:]],
                                          bucket=[float(c) for c in counts])
        self._emit(step, summary_pb2.Summary.Value(tag=tag, histo=hist))

    def text(self, tag: str, text: str, step: int):
        tensor = TensorProto(dtype=7, string_val=[text.encode("utf-8", "replace")],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        self._emit(step, summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=meta))

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()
