# Shortcuts for the developer loop; CI runs .ci/run, not this file.
PYTHON ?= python

.PHONY: build test test-installed sanitize valgrind bench bench-quick clean

build:            ## in-place build: cddp/_C*.so (and _cuda*.so with nvcc) beside the sources (tests then use the checkout)
	$(PYTHON) setup.py build_ext --inplace

test: build       ## the suite against the in-place build
	$(PYTHON) -m pytest -q

test-installed:   ## what CI runs: install, then the suite against the installed package
	rm -f cddp/_C*.so cddp/_cuda*.so
	pip install -e '.[test]' && $(PYTHON) -m pytest

sanitize:         ## ASan + UBSan build in a temporary copy; fails on any report
	tools/sanitize.sh

valgrind:         ## memcheck over the core tests in a temporary debug build
	tools/valgrind.sh

bench: build
	$(PYTHON) bench/ops.py

bench-quick: build
	$(PYTHON) bench/ops.py --quick

clean:
	rm -rf build dist *.egg-info cddp/_C*.so cddp/_cuda*.so
