# shmtrain front door.  CMake does the build; this file names the jobs.
#
#   make run        install, build, and train LeNet on Fashion-MNIST with shmrun's
#                   default partitioning (>= 89% test accuracy); RUN_ARGS adds flags
#   make            install missing packages, configure and build (build/)
#   make test       build and run the ctest suite but its `long` label (a few
#                   minutes on 2 cores)
#   make test-long  the `long` label alone: the minutes-long numerics and the
#                   many-rank and many-seed runs (CI runs both)
#   make asan       the whole suite, long tests too, under AddressSanitizer +
#                   UBSan (build-asan/)
#   make fuzz       search every parser with libFuzzer (clang; build-fuzz/) for
#                   FUZZ_SECONDS each (default 60); a crash fails and is kept in
#                   build-fuzz/crashes/ (copy it to tests/fuzz/regressions/)
#   make mutate     plant each bug of tests/mutants/mutants.txt in a copy of the
#                   tree and run the suite against it (MUTANTS=regex; ~1 min each)
#   make python     install the torch.distributed backend "shm" (python/) into the
#                   PyTorch venv of install-deps.sh --bench (TORCH_PYTHON=yours: into
#                   the environment that has your torch)
#   make fresh-root the README's commands in a fresh Debian 13 root (root, network;
#                   scripts/fresh-root.sh; FRESH_ARGS="--suite bookworm")
#   make bench      run the benchmarks (docs/benchmarks.md says what each measures)
#   make install    install libraries, headers, binaries, pkg-config and CMake files
#                   (PREFIX=/usr/local)
#
# Knobs: WERROR=ON (warnings are errors), BUILD=dir, BUILD_TYPE=Release|Debug,
#        CTEST_ARGS="-L unit" (pass-through), JOBS=n.

BUILD      ?= build
BUILD_TYPE ?= Release
WERROR     ?= OFF
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
CTEST_ARGS ?=
SANITIZE   ?=

CMAKE_ARGS = -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DSHMTRAIN_WERROR=$(WERROR) \
             -DSHMTRAIN_SANITIZE=$(SANITIZE)

RUN_ARGS ?=
FUZZ_SECONDS ?= 60
FUZZERS ?= model ckpt idx cifar text placement npy tokens safetensors image folder metrics config tunekept
MUTANTS ?=
TORCH_PYTHON ?= .deps/torch-venv/bin/python

.PHONY: all deps build test test-long asan fuzz mutate python bench run install clean fresh-root

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The label a suite leaves out (test) or runs alone (test-long); asan runs all.
TEST_LABELS ?= -LE long

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(TEST_LABELS) $(CTEST_ARGS)

test-long:
	@$(MAKE) --no-print-directory test TEST_LABELS="-L long"

asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan BUILD_TYPE=RelWithDebInfo \
	  SANITIZE=address,undefined TEST_LABELS=

fuzz:
	@scripts/install-deps.sh --fuzz
	@cmake -S tests/fuzz -B build-fuzz -DCMAKE_C_COMPILER=clang >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@tests/fuzz/run-fuzzers.sh build-fuzz $(FUZZ_SECONDS) $(FUZZERS)

mutate: deps
	scripts/mutate.py --only '$(MUTANTS)'

# TORCH_PYTHON=your/python: into the environment that has your torch (nothing
# else installed); else into .deps/torch-venv, which install-deps.sh makes.
python:
ifeq ($(origin TORCH_PYTHON),file)
	@scripts/install-deps.sh --bench
	@test -x $(TORCH_PYTHON) || { echo "make python: no PyTorch for this system (scripts/install-deps.sh --bench said why)" >&2; exit 1; }
endif
	$(TORCH_PYTHON) -m pip install --quiet --no-build-isolation ./python
	@$(TORCH_PYTHON) -c 'import torch, shmtrain_torch; print("make python: shmtrain_torch installed in", __import__("sys").prefix, "over PyTorch", torch.__version__)'

bench: deps
	@scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory build
	bench/run-allreduce.sh $(BUILD)
	bench/run-torch-backend.sh $(BUILD)
	bench/run-step.sh $(BUILD)
	bench/run-train.sh $(BUILD)
	bench/run-gpt.sh $(BUILD)

run: build
	$(BUILD)/shmrun -- $(BUILD)/shmtrain --model lenet --epochs 8 --schedule cosine \
	  --lr 0.05 --momentum 0.9 --weight-decay 5e-4 --log-every 100 $(RUN_ARGS)

FRESH_ARGS ?=
fresh-root:
	scripts/fresh-root.sh $(FRESH_ARGS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf build build-asan
