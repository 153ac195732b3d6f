"""Fuzz target: cddp.load on arbitrary bytes (atheris, libFuzzer's engine).

The property: a file either loads — and then what it held saves and loads again — or raises
CheckpointError (or, for a whole-object checkpoint whose pickle asks for something the
weights_only unpickler does not allow, pickle.UnpicklingError). Any other exception, a hang or a crash is a finding. Runs by itself:

    python tests/fuzz/fuzz_checkpoint.py [libFuzzer flags] NEW_CORPUS tests/fuzz/corpus/checkpoint

(the first directory receives new inputs; keep the committed corpus second so a run does not
rewrite it). tests/test_fuzz.py replays the committed corpus on every run of the suite and runs
this for a bounded time with a fixed seed under CI=true.
"""
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))    # the checkout's cddp


def one_input(data):
    import cddp
    from cddp.serialization import CheckpointError, UnpicklingError
    try:
        obj = cddp.load(io.BytesIO(data))
    except (CheckpointError, UnpicklingError):
        return
    buf = io.BytesIO()
    cddp.save(obj, buf)                    # what loads must save ...
    buf.seek(0)
    cddp.load(buf)                         # ... and load again


def main():
    import atheris
    with atheris.instrument_imports():
        import cddp.serialization          # noqa: F401 — instrumented: coverage feedback
    import cddp._checkpoint_pickle as ckp
    import cddp._torch_zip as tz
    import cddp._weights_only_unpickler as wo
    import cddp.serialization as ser
    for mod in (ser, ckp, wo, tz):         # maybe imported before: instrument them
        for name in dir(mod):
            f = getattr(mod, name)
            if callable(f) and getattr(f, "__module__", None) == mod.__name__ and \
                    hasattr(f, "__code__"):
                atheris.instrument_func(f)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
