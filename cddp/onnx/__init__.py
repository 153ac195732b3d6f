"""cddp.onnx — torch.onnx's entry points without an exporter: `import torch.onnx` at the top of a
training script works, and export() says at once that cddp cannot write ONNX."""

__all__ = ["export", "is_in_onnx_export"]


def export(model, args=(), f=None, *rest, **kwargs):
    raise RuntimeError("cddp has no ONNX exporter: export the model from torch (load the "
                       "weights there from a safetensors state dict saved with cddp.save)")


def is_in_onnx_export():
    return False
