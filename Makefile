# Two commands: `make demo` (all notebooks, headless, real SmolLM2 verifier) and `make test`.
# Each creates or updates the virtual environment .venv first.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.eagle3kit-installed
OUT    ?= runs/demo

.PHONY: demo test lab env browser vllm clean notebooks docs

$(STAMP): pyproject.toml eagle3kit/assets.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	$(BIN)/eagle3kit install-assets
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP) vllm
	$(BIN)/eagle3kit run-notebooks --notebooks notebooks --preset demo --out $(OUT)

# -n 2: two pytest workers, whole files each (module fixtures stay shared); tests/conftest.py splits the cores and
# queues the longest files first.
test: $(STAMP) browser vllm
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# Debian's chromium for the browser test (no browser download); skipped when it is already there.
browser:
	@test -x /usr/bin/chromium || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
	  && echo "installing Debian's chromium (apt-get, as root) for the browser test" \
	  && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium not installed: the browser test will be skipped"; }

# vLLM's CPU build in its own environment .venv-vllm (it pins another torch than speculators): ~3.5 GB, a few
# minutes once; eagle3kit talks to it through subprocesses (eagle3kit.evaluate.vllm.serve). Idempotent.
vllm: $(STAMP)
	$(BIN)/python -m eagle3kit.vllm_env

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

clean:
	rm -rf $(VENV) .venv-vllm runs

# notebooks/NN_*.py (jupytext percent format) are the sources; this writes the paired .ipynb files.
notebooks: $(STAMP)
	$(BIN)/jupytext --sync notebooks/[0-9][0-9]_*.py

# docs/ read the package, never the reverse: the failure catalogue is package data (eagle3kit/doctor/catalogue/failures.md).
docs: $(STAMP)
	$(BIN)/python -m eagle3kit.doctor.catalogue.rows > docs/failures.md
