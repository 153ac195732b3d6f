"""`python -m cddp.distributed.run` = `python -m cddp.run` = torchrun.

    python -m cddp.run --nproc-per-node=2 train.py --epochs 5
    python -m cddp.run --standalone --nproc-per-node=auto -m mypkg.train
    python -m cddp.run --nnodes=2 --node-rank=0 --master-addr=10.0.0.1 --master-port=29500 ...

Workers receive RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS / _RUN_ID, CDDP_TOKEN, and
OMP_NUM_THREADS=1 unless set. Options, exit status and shutdown rules: launcher_core.py.
Several nodes (--nnodes=N): the launchers share a secret ($CDDP_TOKEN, else the token file
~/.cddp/token or --token-file; node 0 prints the export line for nodes without that path),
meet in a store node 0's launcher hosts on --master-port, and stop together, naming the node,
when one fails, never comes or goes silent (launcher_rdzv.py). Under SLURM, --node-rank and
--master-addr default to SLURM_NODEID and the first host of SLURM_JOB_NODELIST.
Unlike torch's run.main, main() returns the exit status instead of raising on failure.
"""
import sys

from .launcher_core import get_args_parser as _get_args_parser, main as _main

__all__ = ["get_args_parser", "parse_args", "main"]


def get_args_parser():
    return _get_args_parser("cddp.run", legacy=False)


def parse_args(args):
    return get_args_parser().parse_args(args)


def main(args=None):
    """Run torchrun with `args` (default sys.argv[1:]); returns the exit status."""
    return _main(args, prog="cddp.run", legacy=False)


if __name__ == "__main__":
    sys.exit(main())
