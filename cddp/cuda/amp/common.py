"""cddp.cuda.amp.common — torch.cuda.amp.common. CUDA AMP runs on the CPU fallback here."""
__all__ = ["amp_definitely_not_available"]


def amp_definitely_not_available():
    return False
