# packtool developer commands. Everything runs from .venv (created by `make install`).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := .demo
# the dev install uses PyTorch's CPU wheels (no multi-GB CUDA download); for a GPU box e.g.
# make install TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install test test-slow demo bench lint clean gpu-check gpu-check-dry

$(BIN)/packtool: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@echo "installing torch 2.13.0, CPU build, from $(TORCH_INDEX) (make install TORCH_INDEX=... for another build)"
	$(BIN)/pip install -q "torch==2.13.0" --index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple \
	  || { echo "the CPU build is not reachable: installing torch from the default index (on Linux: the CUDA build, several GB)"; \
	       $(BIN)/pip install -q "torch>=2.4,<3"; }
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/packtool

install: $(BIN)/packtool

# tests run in one worker per core (pytest-xdist), at most 8: `make test PYTEST_WORKERS=0` runs them in one process;
# the Ray engine's tests share one local cluster in one worker (xdist_group "ray", --dist loadgroup)
PYTEST_WORKERS ?= auto

test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --maxprocesses 8 --dist loadgroup

test-slow: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow -n $(PYTEST_WORKERS) --maxprocesses 8 --dist loadgroup

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
