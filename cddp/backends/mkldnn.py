"""cddp.backends.mkldnn — torch's oneDNN switch: cddp has no oneDNN, so it is never available;
`enabled` is kept so scripts that set it (torch.backends.mkldnn.enabled = False) run."""

enabled = False


def is_available():
    return False
