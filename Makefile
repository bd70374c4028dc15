# shmtrain front door.  CMake does the build; this file names the jobs.
#
#   make            install missing packages, configure and build (build/)
#   make test       build and run the whole ctest suite
#   make asan       the same suite under AddressSanitizer + UBSan (build-asan/)
#   make bench      run the benchmarks (bench/README.md)
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

.PHONY: all deps build test asan bench install clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan BUILD_TYPE=RelWithDebInfo \
	  SANITIZE=address,undefined

bench: deps
	@scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory build
	bench/run-allreduce.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf build build-asan
