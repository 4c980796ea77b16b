# CUDA Kernel Labs. Learners: `make lab`. Authors: `make author`. CI: `make test`. See README.md.
SHELL := /bin/bash
export PYTHONPATH := $(CURDIR)/labs_src$(if $(PYTHONPATH),:$(PYTHONPATH))
LABS := $(wildcard labs_src/[0-9][0-9]_*.py)
MY_LABS ?= my-labs
# scripts/env.sh prints the python to use (and sets .venv up once); CUDA_PATH is exported on a Jetson.
WITHPY = PY=$$(scripts/env.sh $(1)) && export PATH="$$(dirname "$$(command -v $$PY)"):$$PATH" && \
  eval "$$(scripts/env.sh --exports)" &&
# JupyterLab on localhost with a token, no news pop-up, no update check; a second `make lab` points
# at the running server instead of starting one (scripts/lab.py). KERNELLAB_PORT=8890 picks a port.
JUPYTER = $$PY scripts/lab.py

.PHONY: lab author test test-browser notebooks clean-notebooks student solutions reset bench ncu \
        headline drift wheelhouse sanitize check-gpu clean

## make lab: (set up once) copy the labs without their solutions into my-labs/ (never overwriting
## your copies; new labs are added) and open JupyterLab there (localhost, token on); when one is
## already running for my-labs/, print its URL instead
lab:
	@$(call WITHPY,lab) $$PY scripts/notebooks.py learner $(MY_LABS) && \
	  $(JUPYTER) $(MY_LABS)

## make reset LAB=01: move my-labs/01_*.ipynb aside (my-labs/old/, timestamped), restore a fresh copy
reset:
	@[ -n "$(LAB)" ] || { echo "usage: make reset LAB=01"; exit 2; }
	@$(call WITHPY,test) $$PY scripts/notebooks.py reset $(LAB) $(MY_LABS)

## make student DEST=dir: the solution-free set for a classroom; FORCE=1 overwrites existing notebooks
student:
	@[ -n "$(DEST)" ] || { echo "usage: make student DEST=dir [FORCE=1]"; exit 2; }
	@$(call WITHPY,test) $$PY scripts/notebooks.py learner "$(DEST)" --no-links $(if $(FORCE),--force)

## make solutions [DEST=solutions]: the notebooks with their solutions (the answer key)
solutions:
	@$(call WITHPY,test) $$PY scripts/notebooks.py solutions "$(or $(DEST),solutions)" $(if $(FORCE),--force)

## make author: JupyterLab on the repository; saving notebooks/NN_x.ipynb writes labs_src/NN_x.py
## (jupytext pairing, jupytext.toml). Then `make clean-notebooks` before committing.
author:
	@$(call WITHPY,lab) $(JUPYTER) . --LabApp.default_url=/lab/tree/notebooks

## make test: (set up once) the whole suite, no GPU needed: pytest + nbval over notebooks/, on
## several workers when pytest-xdist is installed (after the tests marked serial, alone: scripts/test.py).
## PYTEST_ARGS="tests/test_compile.py -q" runs those paths only; KERNELLAB_TEST_WORKERS=1: one serial pass
test:
	@$(call WITHPY,test) MPLBACKEND=Agg $$PY scripts/test.py $(PYTEST_ARGS)

## make test-browser: optional; JupyterLab driven by Playwright + Chromium, which it installs into
## .venv when missing (scripts/browser_setup.py). KERNELLAB_SCREENSHOT=docs saves the walk-through.
test-browser:
	@$(call WITHPY,lab) export PLAYWRIGHT_BROWSERS_PATH=$${PLAYWRIGHT_BROWSERS_PATH:-$(CURDIR)/.venv/ms-playwright} && \
	  $$PY scripts/browser_setup.py && \
	  KERNELLAB_BROWSER=1 $$PY -m pytest tests/test_browser.py -p no:cacheprovider -rs $(PYTEST_ARGS); \
	rc=$$?; [ $$rc -eq 5 ] && echo "test-browser: skipped (the reason is above); nothing failed" && rc=0; exit $$rc

## make notebooks (= make clean-notebooks) [LAB=01]: notebooks/*.ipynb from labs_src/*.py, outputs
## cleared, kernelspec set. Where the two differ, the file with uncommitted edits wins (both: the
## newer), so a notebook edited in JupyterLab keeps its edits: they go into the .py first.
notebooks clean-notebooks:
	@$(call WITHPY,test) $$PY scripts/notebooks.py build $(LAB)

## make bench [LABS_TO_RECORD="vision vit_block" or a family key, "vision:layernorm"]: on a GPU, record
## figures/reference/<device>/*.csv + meta.json (the recorded results)
bench:
	@$(call WITHPY,test) $$PY -m kernellab.record $(LABS_TO_RECORD)

## make drift [LABS_TO_CHECK="gemv decoder"]: on a GPU with a record, time what a user calls today (each
## family's default step at one recorded case, lab 08's token step per path, lab 06's block and tower)
## against the record, with noise bands; fails when a live time is beyond 1.25x its record
drift:
	@$(call WITHPY,test) $$PY -m kernellab.drift $(LABS_TO_CHECK)

## make ncu: on a GPU with Nsight Compute, record the seeds' counter readings (the claims measured by
## ncu) and the families' limiters into figures/reference/<device>/ncu.csv, which the labs read;
## NCU_ARGS="--only=attention_decode,softmax --missing" records only those families' limiter launches
## this GPU has no readings of (kernellab/ncu_record.py lists every option)
ncu:
	@$(call WITHPY,test) $$PY -m kernellab.ncu_record $(NCU_ARGS)

## make sanitize: on a GPU, every variant of every family under compute-sanitizer (memcheck,
## racecheck, initcheck, synccheck), 0 errors required; TOOLS="memcheck" runs one
sanitize:
	@$(call WITHPY,test) $$PY -m kernellab.sanitize $(TOOLS)

## make headline: figures/headline.png (the README's figure) from the recorded results
headline:
	@$(call WITHPY,test) MPLBACKEND=Agg $$PY -m kernellab.labs headline

## make wheelhouse: on a connected machine, download every wheel a classroom needs into wheelhouse/
## (PLATFORM=jetson for aarch64 / Python 3.10 / JetPack 6); scripts/env.sh installs from it offline
wheelhouse:
	@scripts/wheelhouse.sh $(PLATFORM)

clean:
	rm -rf figures/*.png .pytest_cache
