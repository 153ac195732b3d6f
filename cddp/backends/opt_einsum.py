"""cddp.backends.opt_einsum — torch.backends.opt_einsum's switches. cddp's einsum contracts
operands pairwise, left to right, on its own GEMMs and never calls opt_einsum, so `enabled` and
`strategy` are recorded for scripts that set them and change nothing; is_available() says
whether the opt_einsum package is installed, as torch's does."""
import importlib.util

enabled = True


def is_available():
    return importlib.util.find_spec("opt_einsum") is not None


def get_opt_einsum():
    """The opt_einsum package if installed, else None."""
    if not is_available():
        return None
    import opt_einsum
    return opt_einsum


strategy = "auto" if is_available() else None
