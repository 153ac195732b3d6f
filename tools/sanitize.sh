#!/usr/bin/env bash
# tools/sanitize.sh — run the test suite against an AddressSanitizer + UBSan build of cddp._C.
#
#   tools/sanitize.sh                       # the whole suite
#   tools/sanitize.sh tests/test_core.py -x # any pytest arguments
#
# The extension is built with CDDP_SANITIZE=1 (setup.py: -fsanitize=address,undefined, -O1 -g)
# in place inside a temporary copy of this checkout, so your own build is left alone. CPython
# itself is not instrumented, so the ASan runtime is preloaded (it must come first in the
# process); PYTHONMALLOC=malloc routes every Python object through malloc so ASan sees a freed
# tensor as freed. Leak checking is off: CPython keeps module-level objects alive until exit
# by design. Reports go to log files (subprocesses started by tests inherit the set-up) and
# any report, from any process, fails the run, whatever pytest's own result.
# Set KEEP=1 to keep the temporary copy and its logs.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python}
base=$(mktemp -d "${TMPDIR:-/tmp}/cddp-sanitize.XXXXXX")
work="$base/main"            # beside a link to ../shared, so the seed-script tests run too
mkdir "$work"
if [ -d "$root/../shared" ]; then ln -s "$(cd "$root/../shared" && pwd)" "$base/shared"; fi
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "sanitize: kept $work"; else rm -rf "$base"; fi; }
trap cleanup EXIT

libasan=$(gcc -print-file-name=libasan.so)
if [ ! -f "$libasan" ]; then
    echo "sanitize: gcc has no libasan.so (install libasan for your gcc)" >&2
    exit 2
fi

echo "sanitize: copying the checkout to $work"
tar -C "$root" --exclude=.git --exclude=build --exclude=dist --exclude='*.egg-info' \
    --exclude='*.so' --exclude='*.o' --exclude=__pycache__ --exclude=.pytest_cache \
    --exclude=.hypothesis -cf - . | tar -C "$work" -xf -
cd "$work"

echo "sanitize: building cddp._C with CDDP_SANITIZE=1"
# -fno-wrapv: CPython compiles extensions with -fwrapv, which makes signed overflow defined and
# so invisible to UBSan; cddp's shape and index arithmetic is exactly where it could happen.
if ! CDDP_SANITIZE=1 CFLAGS="${CFLAGS:-} -fno-wrapv" "$py" setup.py build_ext --inplace > build.log 2>&1; then
    grep -E "error|Error" build.log >&2 || tail -30 build.log >&2
    echo "sanitize: build failed (full log above / in build.log with KEEP=1)" >&2
    exit 2
fi
grep -E "warning:" build.log >&2 || true

mkdir -p san
# libstdc++ right after the ASan runtime: ASan resolves the real __cxa_throw when it starts;
# without a C++ runtime loaded by then, the first C++ exception (torch, the test oracle, throws
# them on bad input) stops the process with "CHECK failed: ... real___cxa_throw".
libstdcxx=$(gcc -print-file-name=libstdc++.so.6)
[ -f "$libstdcxx" ] || libstdcxx=
export LD_PRELOAD="$libasan${libstdcxx:+:$libstdcxx}${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$work/san/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$work/san/ubsan"
export PYTHONMALLOC=malloc
# The slow wheel test builds an uninstrumented wheel: nothing to learn from it here.
export CDDP_SLOW_TESTS=0
unset CI

[ $# -gt 0 ] || set -- tests
echo "sanitize: python -m pytest -q $* (LD_PRELOAD=$LD_PRELOAD, PYTHONMALLOC=malloc)"
# --capture=sys: C code writes its reports to fd 2, which then reaches the log below instead of
# a capture file that dies with the process (UBSan aborts it: -fno-sanitize-recover).
set +e
"$py" -m pytest -q -p no:cacheprovider --capture=sys "$@" 2>&1 | tee pytest.log
rc=${PIPESTATUS[0]}
set -e

# ASan writes to san/asan.<pid> (log_path); UBSan, inside the ASan runtime, ignores log_path
# and writes to stderr, so the pytest log is searched too. A UBSan report in a subprocess a
# test starts lands in that test's captured stderr and fails the test through its exit code.
reports=$(find san -type f -size +0 | sort)
ub=$(grep -nE "runtime error:|ERROR: AddressSanitizer|SUMMARY: (Address|UndefinedBehavior)Sanitizer" pytest.log || true)
if [ -n "$reports" ] || [ -n "$ub" ]; then
    for f in $reports; do echo "==== $f"; head -80 "$f"; done >&2
    [ -z "$ub" ] || { echo "==== reports on the test run's stderr:"; echo "$ub"; } >&2
    echo "sanitize: FAILED: sanitizer report(s) found (pytest exit $rc)" >&2
    exit 1
fi
if [ "$rc" -ne 0 ]; then
    echo "sanitize: no sanitizer report, but pytest exited $rc" >&2
    exit "$rc"
fi
echo "sanitize: OK: no AddressSanitizer/UBSan report"
