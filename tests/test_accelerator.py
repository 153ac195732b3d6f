"""cddp.accelerator (torch.accelerator) and dist.get_default_backend_for_device: the answers
agree with cddp.cuda, and with torch's on a machine without a GPU."""
import pytest

import cddp
import cddp.distributed as dist


def test_agrees_with_cuda():
    acc = cddp.accelerator
    assert acc.is_available() == cddp.cuda.is_available()
    if not cddp.cuda.is_available():
        assert acc.current_accelerator() is None
        assert acc.current_accelerator(check_available=True) is None
        assert acc.device_count() == 0
        for fn, args in [(acc.current_device_index, ()), (acc.set_device_index, (0,)),
                         (acc.synchronize, ()), (acc.empty_cache, ()),
                         (acc.current_device_idx, ())]:
            with pytest.raises(RuntimeError, match="Cannot access accelerator device when none"):
                fn(*args)
        with pytest.raises(RuntimeError):
            with acc.device_index(0):
                pass
        with acc.device_index(None):              # None is a no-op, allowed without one
            pass
    else:
        assert acc.current_accelerator().type == "cuda"
        assert acc.device_count() == cddp.cuda.device_count()


def test_the_usual_device_pick_falls_to_cpu():
    # the idiom of recent torch examples
    dev = cddp.accelerator.current_accelerator() if cddp.accelerator.is_available() else cddp.device("cpu")
    assert cddp.zeros(2, device=dev).device.type == ("cpu" if not cddp.cuda.is_available() else "cuda")


def test_default_backend_for_device():
    assert dist.get_default_backend_for_device("cpu") == "gloo"
    assert dist.get_default_backend_for_device(cddp.device("cuda:1")) == "nccl"
    assert dist.get_default_backend_for_device("cuda") == dist.Backend.NCCL
    with pytest.raises(ValueError, match="Default backend not registered for device : tpu"):
        dist.get_default_backend_for_device("tpu")
    with pytest.raises(TypeError):
        dist.get_default_backend_for_device(3)


def test_same_answers_as_torch():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() or cddp.cuda.is_available():
        pytest.skip("compares the no-GPU answers")
    assert torch.accelerator.is_available() == cddp.accelerator.is_available()
    assert torch.accelerator.device_count() == cddp.accelerator.device_count()
    assert (torch.accelerator.current_accelerator() is None) == (cddp.accelerator.current_accelerator() is None)
    for d in ("cpu", "cuda"):
        assert torch.distributed.get_default_backend_for_device(d) == dist.get_default_backend_for_device(d)
