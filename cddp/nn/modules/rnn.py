"""Recurrent layers: torch.nn.RNN / LSTM / GRU (RNNBase) and RNNCell / LSTMCell / GRUCell.

Each layer in each direction is ONE C op, _C._rnn_layer (csrc/nn/rnn/): the input projection of
the whole sequence as one GEMM, then per step one GEMM and a fused gate kernel; backward
through time in C too, with the GIL released. A cell is that op with one step. This file
mirrors torch's constructors, parameter names, shapes and init (so state dicts load either
way), argument checks and messages, and wires the layers: the two directions' outputs are
concatenated, dropout runs between layers in training, and the final states are views of the
op's second output (h_n; for LSTM h_n then c_n, flat, so both views are contiguous).
float16 / bfloat16 stacks and cells, and LSTM / RNN stacks and RNNCell inside autocast,
compute in float32 on copies and round their results once (_reduced_dtype).

Shapes (torch's): input (T, N, I) or batch_first (N, T, I), unbatched (T, I), or a
PackedSequence; h_0 / h_n (L*D, N, P), c_0 / c_n (L*D, N, H); output (T, N, D*P) with
L layers, D directions, H hidden_size, P proj_size or H.
"""
import math
import numbers
import warnings

from ... import _C
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

Tensor = _C.Tensor

_MODES = {"LSTM": 0, "GRU": 1, "RNN_TANH": 2, "RNN_RELU": 3}


def _apply_permutation(tensor, permutation, dim=1):
    return tensor.index_select(dim, permutation)


def _reduced_dtype(input, hx, cx, autocast_lowers):  # noqa: A002
    """float16 / bfloat16 when a layer stack or a cell computes in float32 on copies of that
    dtype's values and rounds its results once to it (output, h_n, c_n), else None.

    A float16 / bfloat16 input (states and weights of that dtype: torch's CPU kernels take
    them; a state of another dtype raises). A stack rounds once, at its ends — the layers in
    between hand float32 on (torch's hand the dtype on), so an input feeding both directions
    gets one float32 gradient, rounded once. Inside autocast("cpu"), when autocast_lowers (the
    layers on torch's lower-precision list): float32 input runs on casts to the autocast
    dtype. The casts carry history, so float32 parameters get float32 gradients, as under
    torch's autocast."""
    dt = input.dtype
    if dt == _C.float16 or dt == _C.bfloat16:
        for name, s in (("h0", hx), ("c0", cx)):
            if s is not None and s.dtype != dt:
                raise RuntimeError(f"RNN {name} dtype ({s.dtype}) does not match input "
                                   f"dtype ({dt})")
        return dt
    if not autocast_lowers or dt != _C.float32:
        return None
    return _C._autocast_lower_dtype()


def _lstm_states(fin, n, p, h):
    """h (n, p) and c (n, h) as contiguous views of a flat LSTM final-state tensor."""
    return fin[:n * p].view(n, p), fin[n * p:].view(n, h)


class RNNBase(Module):
    """Base class of RNN, LSTM and GRU: parameters, checks, and the layer stack."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        self._check_config(mode, input_size, hidden_size, num_layers, bias, batch_first,
                           dropout, proj_size)
        gate_size = {"LSTM": 4, "GRU": 3}.get(mode, 1) * hidden_size
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            for direction in range(num_directions):
                real_hidden_size = proj_size if proj_size > 0 else hidden_size
                layer_input_size = input_size if layer == 0 else real_hidden_size * num_directions
                shapes = [(gate_size, layer_input_size), (gate_size, real_hidden_size)]
                names = ["weight_ih_l{}{}", "weight_hh_l{}{}"]
                if bias:
                    shapes += [(gate_size,), (gate_size,)]
                    names += ["bias_ih_l{}{}", "bias_hh_l{}{}"]
                if proj_size > 0:
                    shapes.append((proj_size, hidden_size))
                    names.append("weight_hr_l{}{}")
                suffix = "_reverse" if direction == 1 else ""
                names = [x.format(layer, suffix) for x in names]
                for name, shape in zip(names, shapes):
                    setattr(self, name, Parameter(_C.empty(shape, dtype=dtype)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    @staticmethod
    def _check_config(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                      proj_size):
        if (not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1
                or isinstance(dropout, bool)):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          "non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=4)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: {type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: {type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _MODES:
            raise ValueError("Unrecognized RNN mode: " + mode)

    # ---- torch's parameter bookkeeping (weights are looked up by name at each forward) ----

    @property
    def _flat_weights(self):
        return [getattr(self, wn) if hasattr(self, wn) else None
                for wn in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, weight) for weight in weights] for weights in self._all_weights]

    def flatten_parameters(self):
        """A no-op, as torch's on the CPU (it packs cuDNN's weight buffer on GPUs)."""

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    # ---- torch's checks --------------------------------------------------------------------

    def check_input(self, input, batch_sizes):  # noqa: A002
        wdt = self._flat_weights[0].dtype
        # inside an autocast region the op casts both (torch skips the check there too)
        if input.dtype != wdt and _C._autocast_lower_dtype() is None:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({wdt}). Convert input: input.to({wdt}), or convert model: "
                             f"model.to({input.dtype})")
        expected_input_dim = 2 if batch_sizes is not None else 3
        if input.dim() != expected_input_dim:
            raise RuntimeError(f"input must have {expected_input_dim} dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.size(-1)}")

    def get_expected_hidden_size(self, input, batch_sizes):  # noqa: A002
        if batch_sizes is not None:
            mini_batch = int(batch_sizes[0])
        else:
            mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch,
                self.proj_size if self.proj_size > 0 else self.hidden_size)

    def check_hidden_size(self, hx, expected_hidden_size, msg="Expected hidden size {}, got {}"):
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes):  # noqa: A002
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return _apply_permutation(hx, permutation)

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    # ---- the layer stack -----------------------------------------------------------------

    def _run(self, input, hx, cx, batch_sizes):  # noqa: A002
        """input time-major (T, N, I) or packed (R, I); hx (L*D, N, P) | None (zeros);
        cx (L*D, N, H) | None. Returns output, h_n (L*D, N, P), c_n (L*D, N, H) | None."""
        mode = _MODES[self.mode]
        lstm = mode == 0
        D = 2 if self.bidirectional else 1
        H = self.hidden_size
        P = self.proj_size if self.proj_size > 0 else H
        N = int(batch_sizes[0]) if batch_sizes is not None else input.size(1)
        low = self._reduced_dtype(input, hx, cx, batch_sizes)
        if low is not None:
            input, hx, cx = (None if t is None else t.to(low).float() for t in (input, hx, cx))
        x, hs, cs = input, [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                k = layer * D + d
                w = [getattr(self, name) for name in self._all_weights[k]]
                if low is not None:
                    w = [t.to(low).float() for t in w]
                b_ih, b_hh = (w[2], w[3]) if self.bias else (None, None)
                w_hr = w[-1] if self.proj_size > 0 else None
                y, fin = _C._rnn_layer(mode, x, None if hx is None else hx[k],
                                       None if cx is None else cx[k], w[0], w[1], b_ih, b_hh,
                                       w_hr, d == 1, batch_sizes)
                outs.append(y)
                if lstm:
                    h, c = _lstm_states(fin, N, P, H)
                    hs.append(h)
                    cs.append(c)
                else:
                    hs.append(fin)
            x = outs[0] if D == 1 else _C.cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        h_n, c_n = _C.stack(hs), (_C.stack(cs) if lstm else None)
        if low is not None:
            x, h_n, c_n = (None if t is None else t.to(low) for t in (x, h_n, c_n))
        return x, h_n, c_n

    def _reduced_dtype(self, input, hx, cx, batch_sizes):  # noqa: A002
        """_reduced_dtype below for the stack: torch lowers LSTM and Elman RNNs on padded (not
        packed) input under autocast; GRU and packed sequences stay float32."""
        return _reduced_dtype(input, hx, cx, self.mode != "GRU" and batch_sizes is None)

    def _unpack_input(self, input):  # noqa: A002
        """(x, batch_sizes, sorted_indices, unsorted_indices, is_batched, batch_dim)."""
        from ..utils.rnn import PackedSequence
        if isinstance(input, PackedSequence):
            x, batch_sizes, sorted_indices, unsorted_indices = input
            return x, batch_sizes, sorted_indices, unsorted_indices, True, None
        if input.dim() not in (2, 3):
            # torch's three wordings, one per class
            name, tail = (self.mode, "D instead") if self.mode in ("LSTM", "GRU") else \
                ("RNN", "D tensor instead")
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}{tail}")
        batch_dim = 0 if self.batch_first else 1
        return input, None, None, None, input.dim() == 3, batch_dim

    def _forward_single(self, input, hx):  # noqa: A002
        """RNN and GRU: torch's forward with one hidden state tensor."""
        input, batch_sizes, sorted_indices, unsorted_indices, is_batched, batch_dim = \
            self._unpack_input(input)
        packed = batch_sizes is not None
        if not packed:
            if not is_batched:
                input = input.unsqueeze(batch_dim)
                if hx is not None:
                    if hx.dim() != 2:
                        raise RuntimeError("For unbatched 2-D input, hx should also be 2-D but "
                                           f"got {hx.dim()}-D tensor")
                    hx = hx.unsqueeze(1)
            elif hx is not None and hx.dim() != 3:
                raise RuntimeError("For batched 3-D input, hx should also be 3-D but got "
                                   f"{hx.dim()}-D tensor")
        if hx is not None:
            hx = self.permute_hidden(hx, sorted_indices)
            self.check_forward_args(input, hx, batch_sizes)
        else:
            self.check_input(input, batch_sizes)
        x = input.transpose(0, 1) if self.batch_first and not packed else input
        out, h_n, _ = self._run(x, hx, None, batch_sizes)
        if packed:
            from ..utils.rnn import PackedSequence
            return (PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices),
                    self.permute_hidden(h_n, unsorted_indices))
        if self.batch_first:
            out = out.transpose(0, 1)
        if not is_batched:
            out = out.squeeze(batch_dim)
            h_n = h_n.squeeze(1)
        return out, h_n


class RNN(RNNBase):
    """Elman RNN: h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), act tanh or relu."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' "
                             "or 'relu'.")
        super().__init__(mode, *args, **kwargs)

    def __setattr__(self, name, value):
        # torch sets nonlinearity before Module.__init__; keep it a plain attribute
        if name == "nonlinearity" and "_parameters" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def forward(self, input, hx=None):  # noqa: A002
        return self._forward_single(input, hx)


class GRU(RNNBase):
    """Gated recurrent unit, torch's gate order r, z, n with n = tanh(x W_in + b_in +
    r * (h W_hn + b_hn)) and h' = (1 - z) * n + z * h."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):  # noqa: A002
        return self._forward_single(input, hx)


class LSTM(RNNBase):
    """Long short-term memory, torch's gate order i, f, g, o; optional projection
    h = W_hr (o * tanh(c)) (proj_size)."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def get_expected_cell_size(self, input, batch_sizes):  # noqa: A002
        if batch_sizes is not None:
            mini_batch = int(batch_sizes[0])
        else:
            mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes):  # noqa: A002
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return _apply_permutation(hx[0], permutation), _apply_permutation(hx[1], permutation)

    def forward(self, input, hx=None):  # noqa: A002
        input, batch_sizes, sorted_indices, unsorted_indices, is_batched, batch_dim = \
            self._unpack_input(input)
        packed = batch_sizes is not None
        if not packed and not is_batched:
            input = input.unsqueeze(batch_dim)
        if hx is None:
            self.check_input(input, batch_sizes)
        else:
            if not packed and is_batched and (hx[0].dim() != 3 or hx[1].dim() != 3):
                raise RuntimeError("For batched 3-D input, hx and cx should also be 3-D but "
                                   f"got ({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
            if not packed and not is_batched:
                if hx[0].dim() != 2 or hx[1].dim() != 2:
                    raise RuntimeError("For unbatched 2-D input, hx and cx should also be 2-D "
                                       f"but got ({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
            if packed:
                hx = self.permute_hidden(hx, sorted_indices)
            self.check_forward_args(input, hx, batch_sizes)
        x = input.transpose(0, 1) if self.batch_first and not packed else input
        out, h_n, c_n = self._run(x, None if hx is None else hx[0],
                                  None if hx is None else hx[1], batch_sizes)
        if packed:
            from ..utils.rnn import PackedSequence
            return (PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices),
                    self.permute_hidden((h_n, c_n), unsorted_indices))
        if self.batch_first:
            out = out.transpose(0, 1)
        if not is_batched:
            return out.squeeze(batch_dim), (h_n.squeeze(1), c_n.squeeze(1))
        return out, (h_n, c_n)


# ---- cells ------------------------------------------------------------------------------


def _check_cell(input, hx, input_size, hidden_size, label):  # noqa: A002
    """torch's check_rnn_cell_forward_input / _hidden, messages included."""
    if input.size(1) != input_size:
        raise RuntimeError(f"input has inconsistent input_size: got {input.size(1)} expected "
                           f"{input_size}")
    if hx is None:
        return
    if input.size(0) != hx.size(0):
        raise RuntimeError(f"Input batch size {input.size(0)} doesn't match hidden{label} batch "
                           f"size {hx.size(0)}")
    if hx.size(1) != hidden_size:
        raise RuntimeError(f"hidden{label} has inconsistent hidden_size: got {hx.size(1)}, "
                           f"expected {hidden_size}")


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        self.weight_ih = Parameter(_C.empty((num_chunks * hidden_size, input_size), dtype=dtype))
        self.weight_hh = Parameter(_C.empty((num_chunks * hidden_size, hidden_size), dtype=dtype))
        if bias:
            self.bias_ih = Parameter(_C.empty(num_chunks * hidden_size, dtype=dtype))
            self.bias_hh = Parameter(_C.empty(num_chunks * hidden_size, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _step(self, mode, input, hx, cx):  # noqa: A002
        """One step of the layer op: (N, I) input, (N, H) states -> the op's final states,
        reduced dtypes as the stacks (_reduced_dtype). Inside autocast("cpu") torch lowers
        RNNCell (two linears, on the lower-precision list) but keeps LSTMCell and GRUCell in
        float32."""
        args = [input, hx, cx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh]
        low = _reduced_dtype(input, hx, cx, mode >= 2)
        if low is not None:
            args = [None if a is None else a.to(low).float() for a in args]
        _, fin = _C._rnn_layer(mode, args[0].unsqueeze(0), *args[1:], None, False, None)
        return fin if low is None else fin.to(low)

    def _batched(self, input, hx, what):  # noqa: A002
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for label, h in hx:
            if h is not None and h.dim() not in (1, 2):
                raise ValueError(f"{name}: Expected {what.format(label)} to be 1D or 2D, got "
                                 f"{h.dim()}D instead")
        return input.dim() == 2


class RNNCell(RNNCellBase):
    """h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):  # noqa: A002
        is_batched = self._batched(input, [(0, hx)], "hidden")
        if not is_batched:
            input = input.unsqueeze(0)
            hx = hx.unsqueeze(0) if hx is not None else None
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        _check_cell(input, hx, self.input_size, self.hidden_size, 0)
        ret = self._step(2 if self.nonlinearity == "tanh" else 3, input, hx, None)
        return ret if is_batched else ret.squeeze(0)


class LSTMCell(RNNCellBase):
    """(h', c') with c' = f*c + i*g, h' = o*tanh(c'), gates i, f, g, o."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):  # noqa: A002
        is_batched = self._batched(input, list(enumerate(hx)) if hx is not None else [],
                                   "hx[{}]")
        if not is_batched:
            input = input.unsqueeze(0)
        h0 = c0 = None
        if hx is not None:
            h0, c0 = (hx[0].unsqueeze(0), hx[1].unsqueeze(0)) if not is_batched else hx
        _check_cell(input, h0, self.input_size, self.hidden_size, 0)
        _check_cell(input, c0, self.input_size, self.hidden_size, 1)
        n, H = input.size(0), self.hidden_size
        h, c = _lstm_states(self._step(0, input, h0, c0), n, H, H)
        return (h, c) if is_batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """h' = (1 - z) * n + z * h, gates r, z, n as GRU's."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):  # noqa: A002
        is_batched = self._batched(input, [(0, hx)], "hidden")
        if not is_batched:
            input = input.unsqueeze(0)
            hx = hx.unsqueeze(0) if hx is not None else None
        _check_cell(input, hx, self.input_size, self.hidden_size, 0)
        ret = self._step(1, input, hx, None)
        return ret if is_batched else ret.squeeze(0)
