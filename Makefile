# The two commands of README.md, and the pieces they are made of.
#   make run   — install what is missing, build, start kvtierd in the foreground
#   make test  — install what is missing, build and run the whole suite,
#                in release mode and again under ASan + UBSan
#   make install [PREFIX=/usr/local] [DESTDIR=]  — install the release build
#   make package — the Debian package, in build/release/package/
#   make docs    — the documentation site, in build/site/ (mkdocs, strict)
#   make bench-report [REPORT_ARGS=...] — the docs' tables from docs/results/*.json
#                (REPORT_ARGS="--run dram,peers" reruns those benches first,
#                "--from dram=FILE" takes a bench's JSON; scripts/bench_report.py)
#   make bench-peers [PEERS_ARGS=...] — kvtier beside Mooncake Store and
#                LMCache (docs/peers-bench.md); not part of `make test`
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
PREFIX ?= /usr/local
DESTDIR ?=
# The package test installs the .deb with dpkg -i and removes it: on by
# default for root (CI runs as root on a throwaway machine); off with
# KVT_TEST_DPKG=OFF.
KVT_TEST_DPKG ?= $(if $(filter 0,$(shell id -u)),ON,OFF)

.PHONY: all deps vllm-venv sglang-venv release asan tsan run test test-release test-asan test-tsan install package docs bench-peers bench-report clean

all: release

deps:
	@sh scripts/install-deps.sh

# the pinned vLLM (PyPI) for the vLLM connector's tests, in build/venv-vllm;
# no registry: a message, and those tests skip
vllm-venv:
	@sh scripts/vllm-venv.sh || [ $$? -eq 77 ]

# the pinned SGLang (PyPI) for the HiCache storage backend's tests, in
# build/venv-sglang over the vLLM venv's torch; no registry: those tests skip
sglang-venv: vllm-venv
	@sh scripts/sglang-venv.sh || [ $$? -eq 77 ]

release: deps
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

asan: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)

tsan: deps
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS)

# kvtierd in the foreground with its embedded defaults (Ctrl-C stops it
# gracefully); ARGS="--dram 4G --socket /tmp/kvtierd.sock" to override.
run: deps
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS) --target kvtierd
	./build/release/app/kvtierd $(ARGS)

# the package test, the vLLM and the SGLang tests are registered in the release build only
test-release: deps vllm-venv sglang-venv
	cmake --preset release -DKVT_TEST_DPKG=$(KVT_TEST_DPKG) >/dev/null
	cmake --build --preset release -j $(JOBS)
	ctest --preset release -j $(JOBS) $(CTEST_ARGS)

test-asan: asan
	ctest --preset asan -j $(JOBS) $(CTEST_ARGS)

test-tsan: tsan
	ctest --preset tsan -j $(JOBS) $(CTEST_ARGS)

test: test-release test-asan

install: release
	DESTDIR="$(DESTDIR)" cmake --install build/release --prefix "$(PREFIX)"

package: release
	cd build/release && cpack --config CPackConfig.cmake

# The site from docs/ and mkdocs.yml, strict: a broken link or a missing
# page fails. The diagrams are rendered from their Graphviz sources first.
# make test checks the same (ctest -L docs), and runs the docs' samples.
docs: deps
	python3 scripts/docs_check.py diagrams --write
	python3 scripts/docs_check.py links
	mkdocs build --strict --quiet --site-dir build/site

# The peers are installed into build/venv-peers on first use (several GB
# from PyPI); without the registry the target says so and does nothing.
# Their files and kvtierd's go under build/peers-bench (one file system).
PEERS_ARGS ?=
bench-peers: release
	@sh scripts/peers-venv.sh build/venv-peers || { rc=$$?; [ $$rc -eq 77 ] && exit 0; exit $$rc; }; \
	mkdir -p build/peers-bench && \
	PYTHONPATH=python KVTIERD=build/release/app/kvtierd \
	KVTIER_CLIENT_LIB=build/release/transport/libkvtier-client.so.0 \
	build/venv-peers/bin/python bench/peers/peers_bench.py --dir build/peers-bench \
	  --json build/peers-bench/peers.json $(PEERS_ARGS)

# The docs' tables regenerated from docs/results/*.json; make test fails
# where a table differs from its file (ctest -R docs_tables).
bench-report:
	python3 scripts/bench_report.py $(REPORT_ARGS)

clean:
	rm -rf build
