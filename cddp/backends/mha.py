"""cddp.backends.mha — torch.backends.mha's switch for the inference fast path of
nn.TransformerEncoder (nn/modules/transformer.py): while it is on, an encoder in eval mode
given a key padding mask returns zeros at the padded positions, as torch's nested-tensor path
does."""

_fastpath_enabled = True


def get_fastpath_enabled():
    return _fastpath_enabled


def set_fastpath_enabled(value):
    global _fastpath_enabled
    _fastpath_enabled = bool(value)
