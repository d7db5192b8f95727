# dressage-replay developer targets. `make` alone lists them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help demo test test-slow test-all lint docs bench bench-large whatif sample-data figures clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP) ## Set up the virtual environment and run the main job on sample_data/
	$(BIN)/python sample_data/generate.py
	$(BIN)/dressage-replay inspect sample_data/rollouts.jsonl
	$(BIN)/dressage-replay replay sample_data/rollouts.jsonl --keep-versions 2 --max-preempts 2
	$(BIN)/dressage-replay replay sample_data/dumps --keep-versions 1 --max-preempts 1 --json
	@echo
	@echo "Next: put the command on your PATH, then try the README's first example:"
	@echo "  source $(VENV)/bin/activate"
	@echo "  dressage-replay replay sample_data/rollouts.jsonl --keep-versions 1 --max-preempts 2"

test: $(STAMP) ## Install what the tests need and run them, except those marked slow (4 min of CPU)
	$(BIN)/python -m pytest -m "not slow"

test-slow: $(STAMP) ## Only the tests marked slow: property tests at full size, robustness
	$(BIN)/python -m pytest -m slow

test-all: $(STAMP) ## Every test (what CI runs: make test, then make test-slow)
	$(BIN)/python -m pytest

lint: $(STAMP) ## ruff check (with a complexity limit), ruff format --check, mypy --strict
	$(BIN)/ruff check analysis cli tests sample_data docs/hooks.py
	$(BIN)/ruff format --check analysis cli tests sample_data docs/hooks.py
	$(BIN)/mypy --strict analysis cli tests

docs: $(STAMP) ## Build the documentation site into build/docs/ (strict: any warning fails)
	$(BIN)/pip install --quiet -e '.[dev,docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f docs/mkdocs.yml

bench: $(STAMP) ## Measure the performance targets (generates logs into bench_data/ once)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/pip install --quiet -e '.[dev,bench,ray]' || echo "the ray extra is not installable here; the Ray row is left out"
	$(BIN)/python -m tests.bench.bench

bench-large: $(STAMP) ## The same plus the multi-GB convert (peak memory)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m tests.bench.bench --large

whatif: $(STAMP) ## Measure the what-if predictions on the paired real runs (MAE beside the noise floor)
	$(BIN)/python -m tests.paired_runs $(if $(RUNS),--runs $(RUNS))

sample-data: $(STAMP) ## Regenerate sample_data/ with the simulator
	$(BIN)/python sample_data/generate.py

figures: $(STAMP) ## Draw the README's figures from sample_data/ into sample_data/figures/
	mkdir -p sample_data/figures
	$(BIN)/dressage-replay plot sweep sample_data/rollouts.jsonl -k 0..4 -m none,0..3 -o sample_data/figures/sweep.png --force
	$(BIN)/dressage-replay plot heatmap sample_data/rollouts.jsonl -k 0..4 -m none,0..3 -o sample_data/figures/heatmap.png --force
	$(BIN)/dressage-replay plot spans sample_data/rollouts.jsonl -k 2 -m 1 -o sample_data/figures/spans.png --force
	$(BIN)/dressage-replay plot timeline sample_data/rollouts.jsonl -k 2 -m 1 -o sample_data/figures/timeline.png --force
	runs=$$(mktemp -d) && tar xJf tests/fixtures/real_runs/k3-m2-n8.tar.xz -C $$runs && \
	$(BIN)/dressage-replay plot sweep $$runs/k3-m2-n8 -o sample_data/figures/policies.png --force --policy dressage:k=3,m=2 \
	  --policy dressage:k=2 --policy prime-rl:max_off_policy_steps=1 --policy prime-rl:max_off_policy_steps=1,clock=versions \
	  --policy verl-drop:max_off_policy_threshold=2 --policy nemo-windowed:max_staleness_versions=1; rm -rf $$runs

clean: ## Remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info build dist
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
