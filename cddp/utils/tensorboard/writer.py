"""SummaryWriter (torch.utils.tensorboard.writer): scalars, scalar groups, histograms, text,
images and hyperparameter runs (the hparams plugin) as TensorBoard summaries, written through tensorboard's EventFileWriter (a background
thread, a bounded queue, CRC-framed records, flush every flush_secs).

Values may be cddp tensors, NumPy arrays or Python numbers; tensors are read through .numpy()
(no copy for CPU tensors). Summaries use the same protobuf fields torch's writer uses
(simple_value for scalars, HistogramProto, the text plugin's string tensor, encoded PNG), so a
log written by cddp and one written by torch look the same to TensorBoard.
"""
import os
import socket
import struct
import time
import zlib
from datetime import datetime

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
from tensorboard.summary.writer.event_file_writer import EventFileWriter


def _np(x):
    """A NumPy array of x (a cddp Tensor, an array, a number)."""
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        x = x.detach()
        if getattr(x, "dtype", None) is not None and str(x.dtype).endswith("bfloat16"):
            x = x.float()
        return np.asarray(x.numpy())
    return np.asarray(x)


def _scalar(tag, value, new_style=False, double_precision=False):
    v = _np(value).squeeze()
    if v.ndim != 0:
        raise AssertionError(f"Tensor should contain one element (0 dimensions). Was given size: "
                             f"{v.size} and {v.ndim} dimensions.")
    v = float(v)
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=v)])
    tp = (TensorProto(double_val=[v], dtype="DT_DOUBLE") if double_precision
          else TensorProto(float_val=[v], dtype="DT_FLOAT"))
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    return Summary(value=[Summary.Value(tag=tag, tensor=tp, metadata=meta)])


def _default_bins():
    """TensorFlow's histogram edges, as torch's writer makes them (bins='tensorflow'): 1e-12
    grown by 1.1 per step up to 1e20, mirrored below zero. Built by the same repeated product,
    so the edges are the same floats as torch's."""
    pos, v = [], 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-v for v in reversed(pos)] + [0.0] + pos


def _histogram(tag, values, bins, max_bins=None):
    v = _np(values).astype(np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("The input has no element.")
    counts, limits = np.histogram(v, bins=bins)
    if max_bins is not None and len(counts) > max_bins:     # merge neighbouring bins
        k = len(counts) // max_bins
        pad = (-len(counts)) % k
        counts = np.pad(counts, (0, pad)).reshape(-1, k).sum(axis=1)
        limits = np.append(limits[:-1:k], limits[-1])
    nz = np.flatnonzero(counts)
    if nz.size == 0:
        raise ValueError("The histogram is empty, please file a bug report.")
    start, end = int(nz[0]), int(nz[-1]) + 1
    # TensorBoard reads right bin edges only: an empty bin on the left keeps the first edge
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    h = HistogramProto(min=float(v.min()), max=float(v.max()), num=float(v.size),
                       sum=float(v.sum()), sum_squares=float(v.dot(v)),
                       bucket_limit=limits.tolist(), bucket=counts.tolist())
    return Summary(value=[Summary.Value(tag=tag, histo=h)])


def _text(tag, text):
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
    tp = TensorProto(dtype="DT_STRING", string_val=[text.encode("utf-8")],
                     tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    return Summary(value=[Summary.Value(tag=tag + "/text_summary", metadata=meta, tensor=tp)])


def _png(img):
    """Encode an (H, W, C) uint8 array (C = 1, 3 or 4) as PNG (zlib from the standard library)."""
    h, w, c = img.shape
    kind = {1: 0, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + img[r].tobytes() for r in range(h))    # filter 0 per row

    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, kind, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def _hparams(hparam_dict, metric_dict, domains):
    """The three summaries of the hparams plugin (experiment, session start, session end) for
    one run: each hyperparameter's value and type (number, string, bool; a 1-element tensor is
    a number; None is skipped), its discrete domain when given, the metric tags."""
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
    if not isinstance(hparam_dict, dict) or not isinstance(metric_dict, dict):
        raise TypeError("hparam_dict and metric_dict should be dictionary.")
    domains = domains or {}
    if not isinstance(domains, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing "
                        "logged.")
    for k, values in domains.items():
        if k not in hparam_dict or not isinstance(values, list) or \
                not all(isinstance(d, type(hparam_dict[k])) for d in values):
            raise TypeError(f"parameter: hparam_domain_discrete[{k}] should be a list of same "
                            f"type as hparam_dict[{k}].")
    start, infos = plugin_data_pb2.SessionStartInfo(), []
    for k, v in hparam_dict.items():
        if v is None:
            continue
        tensor = hasattr(v, "numpy") and not isinstance(v, (int, float, str))
        if tensor:
            v = float(_np(v).reshape(-1)[0])        # its first element, a number (no domain)
            kind, field = "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(v, (int, float)):           # bool included, as torch files it
            kind, field = "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(v, str):
            kind, field = "DATA_TYPE_STRING", "string_value"
        else:
            raise ValueError("value should be one of int, float, str, bool, or torch.Tensor")
        setattr(start.hparams[k], field, v)
        domain = None
        if k in domains and not tensor:
            domain = struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d})
                                                  for d in domains[k]])
        infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value(kind),
                                        domain_discrete=domain))
    experiment = api_pb2.Experiment(
        hparam_infos=infos,
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k)) for k in metric_dict])
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))

    def summary(tag, **content):
        data = plugin_data_pb2.HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **content)
        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
            plugin_name=metadata.PLUGIN_NAME, content=data.SerializeToString()))
        return Summary(value=[Summary.Value(tag=tag, metadata=meta)])
    return (summary(metadata.EXPERIMENT_TAG, experiment=experiment),
            summary(metadata.SESSION_START_INFO_TAG, session_start_info=start),
            summary(metadata.SESSION_END_INFO_TAG, session_end_info=end))


def _image(tag, img, dataformats):
    a = _np(img)
    fmt = dataformats.upper()
    if len(fmt) != a.ndim or sorted(fmt) not in (sorted("CHW"), sorted("HW"), sorted("HWC")):
        raise ValueError(f"dataformats {dataformats!r} does not describe an image of shape "
                         f"{list(a.shape)} (use CHW, HWC or HW)")
    if "C" not in fmt:
        a, fmt = a[..., None], fmt + "C"
    a = np.transpose(a, [fmt.index(d) for d in "HWC"])
    if a.shape[2] not in (1, 3, 4):
        raise ValueError(f"an image has 1, 3 or 4 channels, not {a.shape[2]}")
    # float images are in [0, 1] (torch scales by 255), uint8 ones as they are
    a = a if a.dtype == np.uint8 else np.clip(a.astype(np.float64) * 255 + 0.5, 0, 255).astype(np.uint8)
    h, w, c = a.shape
    im = Summary.Image(height=h, width=w, colorspace=c,
                       encoded_image_string=_png(np.ascontiguousarray(a)))
    return Summary(value=[Summary.Value(tag=tag, image=im)])


class FileWriter:
    """One event file in log_dir (torch.utils.tensorboard.writer.FileWriter)."""

    def __init__(self, log_dir, max_queue=10, flush_secs=120, filename_suffix=""):
        log_dir = str(log_dir)
        self.event_writer = EventFileWriter(log_dir, max_queue, flush_secs, filename_suffix)

    def get_logdir(self):
        return self.event_writer.get_logdir()

    def add_event(self, event, step=None, walltime=None):
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)
        self.event_writer.add_event(event)

    def add_summary(self, summary, global_step=None, walltime=None):
        self.add_event(Event(summary=summary), global_step, walltime)

    def flush(self):
        self.event_writer.flush()

    def close(self):
        self.event_writer.close()


class SummaryWriter:
    """Writes TensorBoard event files into log_dir (default runs/<date>_<host><comment>)."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10,
                 flush_secs=120, filename_suffix=""):
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", stamp + "_" + socket.gethostname() + comment)
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = max_queue, flush_secs, filename_suffix
        self.default_bins = _default_bins()
        self.file_writer = self.all_writers = None
        self._get_file_writer()

    def _get_file_writer(self):
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = FileWriter(self.log_dir, self.max_queue, self.flush_secs,
                                          self.filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:       # tell TensorBoard to drop later steps
                self.file_writer.add_event(Event(step=self.purge_step, file_version="brain.Event:2"))
                self.file_writer.add_event(Event(step=self.purge_step, session_log=SessionLog(
                    status=SessionLog.START)))
                self.purge_step = None
        return self.file_writer

    def get_logdir(self):
        return self.log_dir

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        self._get_file_writer().add_summary(
            _scalar(tag, scalar_value, new_style, double_precision), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Each tag becomes a run of its own, log_dir/<main_tag>_<tag>, plotted together."""
        walltime = time.time() if walltime is None else walltime
        base = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            path = base + "/" + main_tag.replace("/", "_") + "_" + tag
            fw = self.all_writers.get(path)
            if fw is None:
                fw = self.all_writers[path] = FileWriter(path, self.max_queue, self.flush_secs,
                                                         self.filename_suffix)
            fw.add_summary(_scalar(main_tag, value), global_step, walltime)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None):
        if isinstance(bins, str) and bins == "tensorflow":
            bins = self.default_bins
        self._get_file_writer().add_summary(_histogram(tag, values, bins, max_bins),
                                            global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        self._get_file_writer().add_summary(_text(tag, text_string), global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        self._get_file_writer().add_summary(_image(tag, img_tensor, dataformats),
                                            global_step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None):
        """One run of the hparams dashboard: log_dir/<run_name or the time> gets the
        hyperparameters and the metrics' values as scalars."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        summaries = _hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        logdir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir) as run:
            for summ in summaries:
                run.file_writer.add_summary(summ, global_step)
            for k, v in metric_dict.items():
                run.add_scalar(k, v, global_step)

    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        raise NotImplementedError("cddp's SummaryWriter has no add_graph: cddp has no tracer "
                                  "(scalars, histograms, text and images are supported)")

    def flush(self):
        if self.all_writers is not None:
            for w in self.all_writers.values():
                w.flush()

    def close(self):
        if self.all_writers is not None:
            for w in self.all_writers.values():
                w.flush()
                w.close()
        self.file_writer = self.all_writers = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
