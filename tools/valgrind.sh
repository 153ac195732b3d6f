#!/usr/bin/env bash
# tools/valgrind.sh — run cddp's core tests under valgrind memcheck.
#
#   tools/valgrind.sh                               # tests/test_core.py + every op test file
#   tools/valgrind.sh tests/test_core.py -k grad    # any pytest arguments instead
#   VG_ORIGINS=1 tools/valgrind.sh ...              # --track-origins=yes (twice as slow)
#
# cddp._C is built with CDDP_DEBUG=1 (-O0 -g: exact lines in reports) in place inside a
# temporary copy of this checkout, so your own build is left alone. PYTHONMALLOC=malloc sends
# every Python object through malloc, so a tensor or node used after its free is seen.
# tools/valgrind-python.supp silences what is CPython's or glibc's, with the reason for each.
# torch is hidden from the run (a stub package that raises ModuleNotFoundError, so the
# torch-oracle tests skip — pytest.importorskip skips quietly only on that subclass of
# ImportError from pytest 9.1 on): under valgrind its import alone takes minutes and checks
# nothing of cddp's.
# tests/test_packaging.py is left out (it builds wheels and times benchmarks in subprocesses,
# which valgrind does not follow). Exits 1 when memcheck reports any error; the reports, with
# ready-made suppression blocks, are printed. Set KEEP=1 to keep the temporary copy and logs.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v valgrind > /dev/null || { echo "valgrind: not installed (apt-get install valgrind)" >&2; exit 2; }
# the interpreter itself, not a wrapper script (pyenv shims are bash: valgrind would check bash)
py=$("${PYTHON:-python}" -c 'import sys; print(sys.executable)')
work=$(mktemp -d "${TMPDIR:-/tmp}/cddp-valgrind.XXXXXX")
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "valgrind: kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT

echo "valgrind: copying the checkout to $work"
tar -C "$root" --exclude=.git --exclude=build --exclude=dist --exclude='*.egg-info' \
    --exclude='*.so' --exclude='*.o' --exclude=__pycache__ --exclude=.pytest_cache \
    --exclude=.hypothesis -cf - . | tar -C "$work" -xf -
cd "$work"

echo "valgrind: building cddp._C with CDDP_DEBUG=1"
if ! CDDP_DEBUG=1 "$py" setup.py build_ext --inplace > build.log 2>&1; then
    grep -E "error|Error" build.log >&2 || tail -30 build.log >&2
    echo "valgrind: build failed" >&2
    exit 2
fi

mkdir -p no_torch/torch
echo 'raise ModuleNotFoundError("torch is hidden under valgrind (tools/valgrind.sh)", name="torch")' > no_torch/torch/__init__.py
export PYTHONPATH="$work/no_torch${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONMALLOC=malloc CDDP_SLOW_TESTS=0 PYTHONDONTWRITEBYTECODE=1
for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS MKL_NUM_THREADS; do export "$v=1"; done
unset CI

if [ $# -eq 0 ]; then
    set -- tests/test_core.py
    for f in tests/test_*.py; do
        case "$f" in tests/test_core.py|tests/test_packaging.py) ;; *) set -- "$@" "$f" ;; esac
    done
fi

vg=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=no --num-callers=30
    --suppressions="$root/tools/valgrind-python.supp" --gen-suppressions=all
    --log-file="$work/memcheck.%p.log")   # %p: a test that forks gets its own log
[ "${VG_ORIGINS:-0}" = 1 ] && vg+=(--track-origins=yes)
echo "valgrind: ${vg[*]} $py -m pytest -q $*"
rc=0
"${vg[@]}" "$py" -m pytest -q -p no:cacheprovider "$@" || rc=$?

# One log per process (the pytest process and any child it forked); add up their errors.
errors=0
for log in memcheck.*.log; do
    n=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) errors.*/\1/p' "$log" | tail -1)
    # no summary: a forked child that exec'd another program (valgrind stops following it
    # there): count the reports it wrote before that, if any
    [ -n "$n" ] || n=$(grep -cE "^==[0-9]+== (Invalid|Conditional|Use of uninit|Syscall param|Mismatched|Source and dest|Argument|Process terminating)" "$log" || true)
    if [ "$n" != 0 ]; then
        # the reports, each with a ready-made suppression block, without the banner
        { grep -vE "^==[0-9]+== *$" "$log" | sed -n '/^==[0-9]*== Parent PID/,$p' | head -400 >&2; } || true
    fi
    errors=$((errors + n))
done
echo "valgrind: $errors memcheck error(s) in $(ls memcheck.*.log | wc -l) process(es)"
if [ "$errors" != 0 ]; then
    echo "valgrind: FAILED: memcheck reported $errors error(s) (pytest exit $rc)" >&2
    exit 1
fi
if [ "$rc" -ne 0 ]; then
    echo "valgrind: no memcheck error, but pytest exited $rc" >&2
    exit "$rc"
fi
echo "valgrind: OK: no memcheck error"
