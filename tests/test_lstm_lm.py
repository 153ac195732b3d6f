"""An LSTM language model (Embedding -> 2-layer LSTM -> Linear tied to nothing, Adam or SGD
with momentum, clip_grad_norm_) trains like torch's from the same weights and data, and trains to
the same weights under 2-rank DDP as one process over the same global batch (issue 9's
acceptance: "an LSTM language model trains under 2-rank DDP with losses matching torch's").

The chain of oracles: cddp 1 process == torch 1 process (per-step losses and final weights,
float64 so the two libraries' different summation orders stay below 1e-10), and cddp 2-rank
DDP == cddp 1 process over the global batch (weights, rtol 1e-10: the only difference is the
order in which the two halves' gradients are summed)."""
import numpy as np
import pytest

import cddp
from conftest import n
from ddp_util import load, run_ranks

LM_SRC = '''
def make_lm(lib, vocab=24, emb=12, hidden=16, layers=2, dropout=0.0, bidirectional=False):
    """Word-level LM as in torch's examples/word_language_model: embedding, LSTM, decoder."""
    nn = lib.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(vocab, emb)
            self.rnn = nn.LSTM(emb, hidden, layers, dropout=dropout, batch_first=True)
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, idx, state=None):
            out, state = self.rnn(self.encoder(idx), state)
            return self.decoder(out), state

    return LM()


def train_lm(lib, model, opt, X, Y, steps, vocab=24):
    losses = []
    for s in range(steps):
        opt.zero_grad()
        logits, _ = model(lib.tensor(X[s]))
        loss = lib.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                               lib.tensor(Y[s]).reshape(-1))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        losses.append(loss.item())
    return losses


def lm_data(steps, batch, seq=10, vocab=24, seed=0):
    """Sequences (start + step * t) mod vocab: the next token is learnable from the past."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocab, (steps, batch, 1))
    step = rng.integers(1, 4, (steps, batch, 1))
    X = (start + step * np.arange(seq + 1)) % vocab
    return X[..., :-1], X[..., 1:]
'''
exec(LM_SRC)      # noqa: S102 (defines make_lm, train_lm, lm_data; shared with the DDP job)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _copy_state(src, dst):
    dst.load_state_dict({k: cddp.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


def test_lstm_lm_training_matches_torch(torch):
    steps = 12
    torch.manual_seed(0)
    tm = make_lm(torch).double()                                    # noqa: F821
    cm = make_lm(cddp).double()                                     # noqa: F821
    _copy_state(tm, cm)
    X, Y = lm_data(steps, 6)                                        # noqa: F821
    t_opt = torch.optim.Adam(tm.parameters(), lr=0.02)
    c_opt = cddp.optim.Adam(cm.parameters(), lr=0.02)
    tl = train_lm(torch, tm, t_opt, X, Y, steps)                    # noqa: F821
    cl = train_lm(cddp, cm, c_opt, X, Y, steps)                     # noqa: F821
    assert tl[-1] < tl[0] - 0.2, tl                                 # it learns something
    np.testing.assert_allclose(cl, tl, rtol=1e-10, atol=0)
    tsd = tm.state_dict()
    for k, v in cm.state_dict().items():
        np.testing.assert_allclose(n(v), tsd[k].numpy(), rtol=1e-8, atol=1e-11, err_msg=k)


def test_lstm_lm_learns_without_torch():
    """Without the oracle: the loss falls well below chance (log 24 = 3.18) in 40 steps."""
    cddp.manual_seed(0)
    m = make_lm(cddp)                                               # noqa: F821
    X, Y = lm_data(40, 8)                                           # noqa: F821
    losses = train_lm(cddp, m, cddp.optim.Adam(m.parameters(), lr=0.02), X, Y, 40)  # noqa: F821
    assert losses[0] > 2.9 and min(losses[-5:]) < 2.0, losses


def test_lstm_lm_under_two_rank_ddp_matches_one_process(tmp_path):
    steps, B = 5, 3
    body = "import numpy as np\n" + LM_SRC + f"""
import os
import cddp
import cddp.distributed as dist
from cddp.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
cddp.manual_seed(100 + rank)                # ranks start different: DDP broadcasts rank 0's
model = DDP(make_lm(cddp).double(), bucket_cap_mb=0.001)
opt = cddp.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
X, Y = lm_data({steps}, {2 * B})
X, Y = X[:, rank * {B}:(rank + 1) * {B}], Y[:, rank * {B}:(rank + 1) * {B}]
train_lm(cddp, model, opt, X, Y, {steps})
for i, p in enumerate(model.module.parameters()):
    np.save(os.path.join(OUT, f"r{{rank}}_p{{i}}.npy"), p.detach().numpy())
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    cddp.manual_seed(100)
    ref = make_lm(cddp).double()                                    # noqa: F821
    X, Y = lm_data(steps, 2 * B)                                    # noqa: F821
    train_lm(cddp, ref, cddp.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9), X, Y, steps)  # noqa: F821
    for i, want in enumerate(ref.parameters()):
        r0, r1 = load(tmp_path, f"r0_p{i}.npy"), load(tmp_path, f"r1_p{i}.npy")
        np.testing.assert_array_equal(r0, r1, err_msg=f"parameter {i} differs between ranks")
        np.testing.assert_allclose(r0, n(want), rtol=1e-10, atol=1e-12,
                                   err_msg=f"parameter {i}: DDP vs one process")
