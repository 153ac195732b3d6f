"""`python -m cddp.distributed.launch` = `python -m cddp.launch` = the legacy
torch.distributed.launch.

    python -m cddp.launch --nproc_per_node=2 --nnodes=1 train.py ARGS

Same options as cddp.run (torchrun) plus --use_env / --use-env. Without --use_env each worker
gets `--local_rank=N` right after the script name (the spelling scripts written for the
legacy launcher parse, `parser.add_argument("--local_rank", type=int)`); LOCAL_RANK and the
rest of torchrun's environment are set in both cases.
"""
import sys

from .launcher_core import get_args_parser as _get_args_parser, main as _main

__all__ = ["parse_args", "main"]


def parse_args(args):
    return _get_args_parser("cddp.launch", legacy=True).parse_args(args)


def main(args=None):
    """Run the legacy launcher with `args` (default sys.argv[1:]); returns the exit status."""
    return _main(args, prog="cddp.launch", legacy=True)


if __name__ == "__main__":
    sys.exit(main())
