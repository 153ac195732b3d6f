"""Small-GPT training throughput: cddp vs torch, one process and 2-rank DDP, same model, same
data, same run.

    python bench/gpt.py [--quick] [--layers 4] [--no-ddp] [--autocast bf16] [--vocab 50257]

The model (GPT-2 shaped): token + position nn.Embedding (vocab 256, d_model 128, seq 64),
pre-norm blocks of causal self-attention (4 heads; qkv Linear + F.scaled_dot_product_attention,
or nn.MultiheadAttention for the "mha" row) and a 4x MLP with GELU (ReLU while cddp has no
F.gelu; both libraries then use ReLU), final LayerNorm, linear head; cross_entropy LM loss,
clip_grad_norm_(1.0), AdamW with weight decay on matrices only. Batch 16 per process.
--autocast bf16: forward and loss under torch.autocast("cpu", dtype=bfloat16) in both
libraries (torch's CPU op lists: the Linear/matmul/attention work in bfloat16, the loss in
float32; parameters and optimizer stay float32).

Single process: one thread each (torch.set_num_threads(1), cddp.set_num_threads(1)), timing
windows interleaved between the libraries (bench/train.py's _interleaved), medians, samples/s.
DDP: 2 ranks per library started as bench/ddp.py starts them (RANK/WORLD_SIZE/MASTER_* by
hand, one BLAS/OpenMP thread per rank, gloo for torch), samples/s over both ranks, the
slowest rank's window each time; launches alternate between the libraries (--rounds), and
the figure is the median over rounds of each launch's median window.
"""
import argparse
import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

from ddp import ddp_rate, launch_ranks  # noqa: E402
from train import _header, _interleaved, _libs, _row  # noqa: E402

# --vocab sets the vocabulary (50257: GPT-2's, where the LM head's cross entropy dominates);
# the ranks read it from the environment
VOCAB = int(os.environ.get("CDDP_BENCH_VOCAB", "256"))
D, HEADS, SEQ, BATCH = 128, 4, 64, 16


def make_gpt(lib, layers, attn="sdpa", act="relu"):
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            if attn == "mha":
                self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
            else:
                self.qkv = nn.Linear(D, 3 * D)
                self.proj = nn.Linear(D, D)
            self.ln2 = nn.LayerNorm(D)
            self.fc = nn.Linear(D, 4 * D)
            self.fc2 = nn.Linear(4 * D, D)

        def forward(self, x, mask):
            B, T, C = x.shape
            h = self.ln1(x)
            if attn == "mha":
                y = self.attn(h, h, h, attn_mask=mask, is_causal=True, need_weights=False)[0]
            else:
                q, k, v = self.qkv(h).split(C, dim=2)
                q, k, v = (z.view(B, T, HEADS, C // HEADS).transpose(1, 2) for z in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                y = self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            x = x + y
            a = self.fc(self.ln2(x))
            return x + self.fc2(F.gelu(a) if act == "gelu" else F.relu(a))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, D)
            self.pos = nn.Embedding(SEQ, D)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ),
                                 persistent=False)
            self.register_buffer("positions", lib.arange(SEQ), persistent=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(self.positions)
            for b in self.blocks:
                x = b(x, self.mask)
            return self.head(self.ln_f(x))

    return GPT()


def make_step(lib, model, X, Y):
    decay = [p for name, p in model.named_parameters()
             if p.dim() >= 2 and not name.startswith(("tok", "pos", "module.tok", "module.pos"))]
    ids = {id(p) for p in decay}
    opt = lib.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                           {"params": [p for p in model.parameters() if id(p) not in ids],
                            "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95))
    x, y = lib.tensor(X), lib.tensor(Y).reshape(-1)
    amp = os.environ.get("CDDP_BENCH_AUTOCAST") == "bf16"

    def step():
        opt.zero_grad()
        with lib.autocast("cpu", dtype=lib.bfloat16, enabled=amp):
            loss = lib.nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def data(seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, VOCAB, (BATCH, SEQ + 1))
    return X[:, :-1], X[:, 1:]


def activation():
    import cddp
    return "gelu" if hasattr(cddp.nn.functional, "gelu") else "relu"


# ---- one process --------------------------------------------------------------------------

def single(layers, min_time, windows):
    libs = _libs()
    X, Y = data(0)
    act = activation()
    rows = []
    for attn in ("sdpa", "mha"):
        steps = {}
        for name, lib in libs.items():
            lib.manual_seed(0)
            steps[name] = make_step(lib, make_gpt(lib, layers, attn, act), X, Y)
        rates = {k: r * BATCH for k, r in _interleaved(steps, min_time, windows).items()}
        rows.append((f"GPT {layers}L d{D} h{HEADS} T{SEQ} b{BATCH} {attn}, 1 proc", rates))
    return rows, act


# ---- 2-rank DDP ---------------------------------------------------------------------------

def worker(lib_name, layers, attn, windows, min_time):
    if lib_name == "torch":
        import torch as lib
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
    else:
        import cddp as lib
        import cddp.distributed as dist
        from cddp.nn.parallel import DistributedDataParallel as DDP
    lib.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    lib.manual_seed(0)
    model = DDP(make_gpt(lib, layers, attn, activation()))
    step = make_step(lib, model, *data(rank))
    rate = ddp_rate(lib, dist, step, BATCH, windows, min_time)
    if rank == 0:
        print("RESULT " + json.dumps({"rate": rate}), flush=True)
    dist.destroy_process_group()


def launch(lib, layers, attn, nranks, windows, min_time):
    return launch_ranks(__file__, (lib, layers, attn, windows, min_time), nranks, lib)["rate"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny windows")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--no-ddp", action="store_true")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 256)")
    ap.add_argument("--rounds", type=int, default=None, help="DDP launches per library "
                    "(alternating; default 3, 1 with --quick)")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        lib, layers, attn, windows, min_time = args.worker
        worker(lib, int(layers), attn, int(windows), float(min_time))
        return
    os.environ["CDDP_BENCH_AUTOCAST"] = args.autocast      # read by make_step, here and in ranks
    if args.vocab is not None:
        global VOCAB
        VOCAB = args.vocab
        os.environ["CDDP_BENCH_VOCAB"] = str(args.vocab)
    min_time, windows = (0.05, 2) if args.quick else (1.0, 7)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    rows, act = single(args.layers, min_time, windows)
    libs = list(rows[0][1])
    if not args.no_ddp:
        # launches alternate between the libraries, `rounds` times, so a shared machine's
        # drifting load falls on both; the figure is the median over the rounds
        runs = {lib: [] for lib in libs}
        for _ in range(args.rounds):
            for lib in libs:
                runs[lib].append(launch(lib, args.layers, "sdpa", 2, windows, min_time))
        rows.append((f"GPT {args.layers}L d{D} h{HEADS} T{SEQ} b{BATCH}x2 sdpa, 2-rank DDP",
                     {lib: statistics.median(v) for lib, v in runs.items()}))
    print(f"activation: {act}; autocast: {args.autocast}; samples/s (medians of {windows} windows)")
    print(_header("case", libs, 52, 10))
    for name, rates in rows:
        print(_row(name, rates, libs, 52, 10), flush=True)


if __name__ == "__main__":
    main()
