"""Recurrent layers: cddp vs torch (one thread), same shapes, same data.

    python bench/rnn.py [--quick]

Rows (steps/s): the PTB "small" language model's recurrent core, nn.LSTM(200, 200,
num_layers=2) over a (35, 20, 200) batch, forward only (no_grad) and forward + backward; the
same with nn.GRU; 35 steps of nn.LSTMCell(200, 200) in a Python loop, forward + backward (the
per-call overhead of a decoder loop); and the whole language-model training step: embedding
(a 10000 x 200 weight indexed by the tokens), the 2-layer LSTM, a Linear(200, 10000) decoder,
cross_entropy, backward, clip_grad_norm_(0.25) and SGD. Each figure is the median of several
timed windows; ratios are cddp / torch from the same run, their windows interleaved (see
bench/train.py). Threads are pinned to one (OpenBLAS for cddp, torch.set_num_threads(1)).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import _table  # noqa: E402  (also puts this checkout's cddp first)

T, N, E, H, V = 35, 20, 200, 200, 10000


def _lstm_core(lib, X, kind, grad):
    lib.manual_seed(0)
    m = getattr(lib.nn, kind)(E, H, 2)
    x = lib.tensor(X, requires_grad=grad)

    def step():
        if grad:
            y, _ = m(x)
            y.sum().backward()
        else:
            with lib.no_grad():
                m(x)
    return step


def _cell_loop(lib, X):
    lib.manual_seed(0)
    cell = lib.nn.LSTMCell(E, H)
    x = lib.tensor(X, requires_grad=True)

    def step():
        h = c = lib.zeros(N, H)
        total = 0
        for t in range(T):
            h, c = cell(x[t], (h, c))
            total = total + h.sum()
        total.backward()
    return step


def _lm_step(lib, tokens, targets):
    lib.manual_seed(0)

    class LM(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = lib.nn.Parameter(lib.rand(V, E) * 0.2 - 0.1)
            self.rnn = lib.nn.LSTM(E, H, 2)
            self.dec = lib.nn.Linear(H, V)

        def forward(self, tok):
            out, _ = self.rnn(self.emb[tok])
            return self.dec(out.reshape(-1, H))
    model = LM()
    opt = lib.optim.SGD(model.parameters(), lr=1.0)
    x, y = lib.tensor(tokens), lib.tensor(targets.reshape(-1))

    def step():
        opt.zero_grad()
        lib.nn.functional.cross_entropy(model(x), y).backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
    return step


def main():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((T, N, E)).astype(np.float32)
    tokens = rng.integers(0, V, (T + 1, N))
    cases = [
        ("LSTM 2x200, (35, 20, 200), forward", lambda lib: _lstm_core(lib, X, "LSTM", False)),
        ("LSTM 2x200, (35, 20, 200), fwd + bwd", lambda lib: _lstm_core(lib, X, "LSTM", True)),
        ("GRU 2x200, (35, 20, 200), fwd + bwd", lambda lib: _lstm_core(lib, X, "GRU", True)),
        ("LSTMCell 200, 35-step loop, fwd + bwd", lambda lib: _cell_loop(lib, X)),
        ("LSTM LM step (V=10000), SGD + clip", lambda lib: _lm_step(lib, tokens[:-1], tokens[1:])),
    ]
    _table(cases, 40)


if __name__ == "__main__":
    main()
