# The two commands of README.md, and the pieces they are made of.
#   make run   — install what is missing, build, start kvtierd in the foreground
#   make test  — install what is missing, build and run the whole suite,
#                in release mode and again under ASan + UBSan
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps release asan tsan run test test-release test-asan test-tsan clean

all: release

deps:
	@sh scripts/install-deps.sh

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

test-release: release
	ctest --preset release -j $(JOBS) $(CTEST_ARGS)

test-asan: asan
	ctest --preset asan -j $(JOBS) $(CTEST_ARGS)

test-tsan: tsan
	ctest --preset tsan -j $(JOBS) $(CTEST_ARGS)

test: test-release test-asan

clean:
	rm -rf build
