"""Fuzz target: cddp.load on arbitrary bytes (atheris, libFuzzer's engine).

The property: a file either loads — and then what it held saves and loads again — or raises
CheckpointError. Any other exception, a hang or a crash is a finding. Runs by itself:

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
    from cddp.serialization import CheckpointError
    try:
        obj = cddp.load(io.BytesIO(data))
    except CheckpointError:
        return
    buf = io.BytesIO()
    cddp.save(obj, buf)                    # what loads must save ...
    buf.seek(0)
    cddp.load(buf)                         # ... and load again


def main():
    import atheris
    with atheris.instrument_imports():
        import cddp.serialization          # noqa: F401 — instrumented: coverage feedback
    import cddp.serialization as ser
    for name in dir(ser):                  # imported earlier by cddp's __init__: instrument it
        f = getattr(ser, name)
        if callable(f) and getattr(f, "__module__", None) == ser.__name__ and \
                hasattr(f, "__code__"):
            atheris.instrument_func(f)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
