"""`python -m cddp.launch`: the legacy torch.distributed.launch (see cddp/distributed/launch.py)."""
import sys

from cddp.distributed.launch import main, parse_args  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
