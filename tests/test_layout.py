"""The source tree keeps the shape docs/architecture.md describes (checked on the files, so a
change that breaks a rule fails here rather than in a reviewer's reading):

- csrc/ is folders by layer; the distributed stack's engines (store, process group) are pure C:
  under csrc/distributed/ only the Python bindings (python/) and DDP's reducer (ddp/) include
  the tensor header core/cddp.h or Python.h;
- no C file over ~900 lines, no C function over ~120 lines (a file per concept, small functions);
- includes are written from csrc/ and name files that exist;
- every C file opens with a header comment.
"""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
SOURCES = sorted(glob.glob(os.path.join(CSRC, "**", "*.[ch]"), recursive=True))

if not SOURCES:
    pytest.skip("no csrc/ beside the tests (an installed copy of the tests)", allow_module_level=True)


def rel(path):
    return os.path.relpath(path, CSRC)


def includes(path):
    with open(path) as f:
        return re.findall(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', f.read(), re.M)


def test_layers_are_folders():
    top = {e for e in os.listdir(CSRC) if os.path.isdir(os.path.join(CSRC, e))}
    assert {"core", "autograd", "ops", "nn", "optim", "distributed"} <= top
    loose = [e for e in os.listdir(CSRC) if e.endswith(".c") and e != "module.c"]
    assert not loose, f"C files outside the layer folders: {loose}"


def test_distributed_engines_do_not_include_the_tensor_library():
    bad = []
    for path in SOURCES:
        r = rel(path)
        if not r.startswith("distributed" + os.sep) or r.split(os.sep)[1] in ("python", "ddp"):
            continue
        for kind, name in includes(path):
            if name in ("Python.h", "core/cddp.h", "module.h") or name.startswith(("core/", "ops/")):
                bad.append(f"{r} includes {name}")
    assert not bad, "\n".join(bad)


def test_includes_are_written_from_csrc_and_exist():
    bad = []
    for path in SOURCES:
        for kind, name in includes(path):
            if kind == '"' and not os.path.exists(os.path.join(CSRC, name)):
                bad.append(f"{rel(path)}: \"{name}\" is not a file under csrc/")
    assert not bad, "\n".join(bad)


def test_files_stay_small():
    big = {rel(p): n for p in SOURCES if (n := sum(1 for _ in open(p))) > 900}
    assert not big, f"files over 900 lines (split by concept): {big}"


def function_lengths(path):
    """(name, lines) of every function body that opens with '{' in column 0."""
    lines = open(path).read().split("\n")
    out, start, name = [], None, "?"
    for i, line in enumerate(lines):
        if line.startswith("{"):
            start = i
            j = i - 1
            while j >= 0 and "(" not in lines[j]:
                j -= 1
            name = lines[j].strip() if j >= 0 else "?"
        elif line.startswith("}") and start is not None:
            out.append((name, i - start))
            start = None
    return out


def test_functions_stay_small():
    long_ = [f"{rel(p)}: {name} ({n} lines)" for p in SOURCES if p.endswith(".c")
             for name, n in function_lengths(p) if n > 120]
    assert not long_, "functions over 120 lines:\n" + "\n".join(long_)


def test_every_file_opens_with_a_header_comment():
    bare = [rel(p) for p in SOURCES if not open(p).read().lstrip().startswith("/*")]
    assert not bare, f"files without a header comment: {bare}"
