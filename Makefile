# Two commands for a learner: `make lab` and `make test`. See README.md.
SHELL := /bin/bash
export PYTHONPATH := $(CURDIR)/labs_src$(if $(PYTHONPATH),:$(PYTHONPATH))
LABS := $(wildcard labs_src/[0-9][0-9]_*.py)
WITHPY = PY=$$(scripts/env.sh $(1)) && export PATH="$$(dirname "$$(command -v $$PY)"):$$PATH" &&

.PHONY: lab test notebooks bench check-gpu clean

## make lab: set up (once), sync notebooks with labs_src, start JupyterLab on localhost (token on)
lab:
	@$(call WITHPY,lab) $$PY -m jupytext --sync $(LABS) && \
	  $$PY -m jupyter lab --ServerApp.ip=127.0.0.1 --notebook-dir=notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)

## make test: set up (once), run the whole suite: pytest + nbval over every notebook
test:
	@$(call WITHPY,test) MPLBACKEND=Agg $$PY -m pytest tests notebooks --nbval-lax -p no:cacheprovider $(PYTEST_ARGS)

## make notebooks: regenerate notebooks/*.ipynb (no outputs) from labs_src/*.py
notebooks:
	@$(call WITHPY,test) for f in $(LABS); do \
	  nb=notebooks/$$(basename $${f%.py}).ipynb; $$PY -m jupytext --quiet --to ipynb $$([ -f $$nb ] && echo --update) -o $$nb $$f; done

## make bench: on a GPU, record figures/reference/<device>/*.csv + meta.json (the recorded results)
bench:
	@$(call WITHPY,test) $$PY -m kernellab.record $(LABS_TO_RECORD)

clean:
	rm -rf figures/*.png .pytest_cache
