"""`python -m cddp.run`: torchrun (see cddp/distributed/run.py)."""
import sys

from cddp.distributed.run import get_args_parser, main, parse_args  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
