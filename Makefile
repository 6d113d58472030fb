# The two commands: `make run` brings Tidal up on embedded defaults; `make test` runs every check and test.
# Both install what is missing first (platform/install.sh) and start the local services (platform/stack.sh), the
# Kubernetes control plane among them (built from Go modules once per machine by platform/kube/build.sh, kubectl
# and helm too: tens of minutes the first time, a second when cached).
SHELL := /bin/bash
PY := .venv/bin/python
# Everything except the database: `make run` keeps DATABASE_URL if you set one, else uses the SQLite demo file.
SERVICE_ENV = eval "$$(bash platform/stack.sh env | grep -v '^export DATABASE_URL=')"

.PHONY: run test test-fast docs install services stop status manifests

# Ctrl-C stops the web server, worker and beat (manage.py up) and then the services the stack started.
run: services
	@trap 'bash platform/stack.sh stop' EXIT; $(SERVICE_ENV) && $(PY) manage.py up $(ARGS)

test: services
	@set -e; eval "$$(bash platform/stack.sh env)"; export TIDAL_REQUIRE_POSTGRES=1; \
	echo "== django checks, migrations, OpenAPI schema, import contract"; \
	$(PY) manage.py check --fail-level WARNING; \
	$(PY) manage.py makemigrations --check --dry-run >/dev/null || { echo "models changed without a migration"; exit 1; }; \
	$(PY) manage.py spectacular --validate --fail-on-warn --file .run/openapi.yml; \
	.venv/bin/lint-imports --no-cache; \
	echo "== docs site (mkdocs build --strict)"; NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict; \
	echo "== pytest"; \
	$(PY) -m pytest --durations=25 $(ARGS)

# The unit and integration tests, in minutes: no whole-stack (tests/system/), browser (tests/e2e/) or slow test.
test-fast: services
	@eval "$$(bash platform/stack.sh env)"; export TIDAL_REQUIRE_POSTGRES=1; \
	$(PY) -m pytest -m "not system and not browser and not slow" --durations=25 $(ARGS)

# The documentation site on 127.0.0.1 (reloads on edits); the reference pages are generated from the code.
docs: install
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve -a 127.0.0.1:$${TIDAL_DOCS_PORT:-8001}

install:
	@bash platform/install.sh

services: install
	@bash platform/kube/build.sh && bash platform/stack.sh start

stop:
	@bash platform/stack.sh stop

status:
	@bash platform/stack.sh status

# Tidal's plain Kubernetes manifests, rendered from its Helm chart (platform/kubernetes/chart) with the default values.
manifests:
	@f=platform/kubernetes/tidal.yaml; bash platform/kubernetes/render.sh > $$f.tmp && mv $$f.tmp $$f || { rm -f $$f.tmp; exit 1; }
