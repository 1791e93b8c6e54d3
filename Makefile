# trainbench: the two README commands.
#   make run   installs what is missing, builds (Release), runs the main job:
#              GPUs present: `trainbench check`, then the default recipe; no GPU: the CPU demo recipe
#              (scripts/main-job.sh)
#   make test  installs what is missing, builds, runs the CPU tests (label cpu; CI runs this)
# Also: make build, make test-gpu (label gpu), make test-multigpu, make clean,
#       make install PREFIX=DIR (bin/trainbench, share/trainbench/{recipes,references,docs}; default /usr/local),
#       make package (a tarball of that tree in build/, through CPack).
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
TB := $(BUILD)/trainbench
PREFIX ?= /usr/local

.PHONY: all setup configure build run test test-gpu test-multigpu install package clean
all: build

setup:
	@./scripts/setup.sh

configure: setup
	@[ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@./scripts/main-job.sh $(TB)

test: build
	@cd $(BUILD) && ctest -L '^cpu$$' --output-on-failure -j $(JOBS)

test-gpu: build
	@cd $(BUILD) && ctest -L '^gpu$$' --output-on-failure

test-multigpu: build
	@cd $(BUILD) && ctest -L '^multigpu$$' --output-on-failure

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

package: build
	@cd $(BUILD) && cpack -G TGZ

clean:
	rm -rf $(BUILD)
