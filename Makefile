# `make run` opens the dashboard, `make test` runs every check; each sets itself up first.
.PHONY: run test screenshots bench accuracy

run:
	./scripts/run.sh $(ARGS)

test:
	./scripts/test.sh

screenshots:
	./scripts/run.sh --version >/dev/null && .venv/bin/python scripts/screenshots.py
