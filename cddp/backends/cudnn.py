"""cddp.backends.cudnn — settable flags; cddp has no cuDNN path, they change nothing."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False
