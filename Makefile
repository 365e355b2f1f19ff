# mgt — Megatron-style LLM training toolkit in C.
#
# Targets:
#   all (default)  libmgt.a and the programs in bin/
#   check          the quick tier (what CI runs): unit tests (C), check-sim (the CUDA backend's
#                  op checks on a CPU simulation of CUDA, tests/sim/) and the program tests (TAP
#                  shell scripts, run by prove) in their quick tier (tests/cli/lib.sh); each part's
#                  wall time printed at the end; with the CUDA backend also check-kernels (every
#                  sm_90a kernel's spills, register-limited occupancy and tensor-core instructions
#                  against tests/kernels/bounds.txt).  Under SANITIZE: units, fuzz corpora, sim op
#                  checks and check-smoke (one quick run of each program)
#   check-full     everything: check with the program tests' full tier (MGT_TEST_FULL=1: every
#                  layout, model family and export type, the long numeric comparisons); run it
#                  before resolving an issue whose paths it covers
#   check-unit, check-sim, check-cli, check-smoke   one part (check-cli: MGT_TEST_FULL=1 for all)
#   demo           the main job on the bundled data: preprocess KJV, train the tiny GPT on it
#   bench          benchmarks in tests/bench/ (throughput, peak memory); raw results in build/bench/
#   mutate-sim     tests/sim/mutate.py: planted kernel bugs against check-sim's op checks (not in CI)
#   check-sim-access  check-sim's op checks with the simulator's access profile: coalescing and
#                  bank conflicts against tests/sim/access-bounds.txt (not in CI; tests/sim/README)
#   kernel-report  every kernel's registers, spills, stack, static shared memory, occupancy and
#                  tensor-core instructions, from ptxas -v and the PTX of the build (no GPU needed);
#                  kernel-bounds rewrites tests/kernels/bounds.txt from the build
#   check-gpu      every CUDA op against the CPU op, whole-model and training checks (needs a GPU)
#   bench-gpu      GPU benchmarks: GEMM ceiling, gpt2-124m and llama-3.2-1b tokens/s and MFU
#   bundle         dist/mgt-bundle/: programs with mgt's Debian libraries linked in statically
#                  (no MPI), for a machine with only the CUDA libraries (bundle/README)
#   install        PREFIX (default /usr/local) and DESTDIR as usual
#   clean
#
# Knobs (make VAR=value, or put them in config.mak):
#   CUDA=auto|0|1        build the CUDA backend: kernels/ with nvcc, lib/backend/cuda*.c, NCCL
#                        (auto: when nvcc is on PATH or in CUDA_HOME); programs then run on the
#                        CPU or a GPU (mgt-train --device)
#   CUDA_HOME=...        CUDA toolkit (default /usr/local/cuda: nvcc, cuBLASLt, NCCL)
#   CUDA_ARCH=...        nvcc -gencode list (default sm_80 and sm_90a)
#   MPI=auto|0|1         build with MPI (OpenMPI), for multi-process runs under mpirun (auto: when
#                        mpicc is found or DEPS=1 installs it); without it a program runs as one
#                        process and refuses to start under mpirun with more than one
#   SANITIZE=address,undefined   build everything with these sanitizers
#   DEVELOPER=1          extra warnings (-Wshadow -Wconversion-lite set) and -O1 -g
#   DEPS=0               do not check for (and apt-get install) missing Debian packages
#   V=1                  print whole compiler command lines
-include config.mak

# Build on every core unless a -j was given (make -j1 for a serial build): a fresh clone's first
# `make demo` or `make check` builds in parallel (issue 46).
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

PREFIX   ?= /usr/local
DESTDIR  ?=
CC       ?= cc
CUDA     ?= auto
MPI      ?= auto
DEPS     ?= 1
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a

OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
WARN      = -Wall -Wextra -Werror -Wno-unused-parameter
ifeq ($(DEVELOPER),1)
WARN     += -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wvla
CFLAGS    = -O1 -g
endif
ifneq ($(SANITIZE),)
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=$(SANITIZE)
endif
# HDF5 (serial) and OpenBLAS (OpenMP build) come from pkg-config; recursively expanded so that
# they are asked after contrib/install-deps.sh has run on a fresh machine.
PKG_CFLAGS = $(shell pkg-config --cflags hdf5 openblas 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs hdf5 openblas 2>/dev/null)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread -fopenmp $(WARN) -Ilib -Icmd $(PKG_CFLAGS) $(MPI_CFLAGS) $(CUDA_CFLAGS) $(CFLAGS)
LIBS       = -lpcre2-8 -lzstd -ljansson -lzip -lutf8proc -licuuc -licudata -lsentencepiece -lstdc++ $(PKG_LIBS) $(MPI_LIBS) $(CUDA_LIBS) -fopenmp -lpthread -lm
# lib/*/*.cc (lib/tok/spm_shim.cc: the libsentencepiece shim) with the C warnings that apply to C++
CXX      ?= g++
ALL_CXXFLAGS = -std=c++17 -D_GNU_SOURCE -pthread $(filter-out -Wstrict-prototypes -Wmissing-prototypes,$(WARN)) -Ilib $(CFLAGS)

CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(CUDA_HOME)/bin/nvcc)
ifeq ($(CUDA),auto)
CUDA := $(if $(wildcard $(NVCC)),1,0)
endif
# CUDA: kernels compiled by nvcc into libmgt.a; the backend's host side (plain C) against the
# toolkit's C headers; the CUDA runtime linked statically, NCCL dynamically, and cuBLASLt opened
# at its first use (lib/backend/cuda_lt.c: linked, it added about 125 ms to every program start),
# both found through the rpath, or LD_LIBRARY_PATH on machines that keep them elsewhere.
ifeq ($(CUDA),1)
CUDA_CFLAGS = -DMGT_HAVE_CUDA -DMGT_HAVE_NCCL -isystem $(CUDA_HOME)/include -Ikernels
CUDA_LIBS   = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart_static -lstdc++ -ldl -lrt
NVCCFLAGS   = -std=c++17 -O3 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -Ikernels -Ilib
KERN_LONG   = kernels/attn_tc_bwd.cu kernels/attn.cu kernels/attn_tc.cu
KERN_SRC    = $(KERN_LONG) $(filter-out $(KERN_LONG),$(wildcard kernels/*.cu))
endif
ifeq ($(MPI),auto)
MPI := $(if $(shell command -v mpicc 2>/dev/null),1,$(if $(filter 1,$(DEPS)),1,0))
endif
# OpenMPI's flags, asked when used (after install-deps.sh), from pkg-config or the mpicc wrapper.
ifeq ($(MPI),1)
MPI_CFLAGS = -DMGT_HAVE_MPI $(shell pkg-config --cflags ompi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null)
MPI_LIBS   = $(shell pkg-config --libs ompi-c 2>/dev/null || mpicc --showme:link 2>/dev/null)
endif

B = build
ifeq ($(V),1)
Q =
say = @true
else
Q = @
say = @printf '  %-6s %s\n'
endif
# lib/backend/cuda*.c with CUDA, lib/backend/nocuda.c (the stubs) without
LIB_SRC  = $(filter-out $(if $(filter 1,$(CUDA)),lib/backend/nocuda.c,lib/backend/cuda%.c),$(wildcard lib/*/*.c))
# the kernels first, the longest (KERN_LONG) leading: on few cores the long nvcc runs then start
# at once and the C files fill the other cores around them (issue 46: 3.5 minutes on 2 cores before)
LIB_OBJ  = $(KERN_SRC:%.cu=build/%.o) $(LIB_SRC:%.c=$(B)/%.o) $(patsubst %.cc,$(B)/%.o,$(wildcard lib/*/*.cc))
CMD_SRC  = $(wildcard cmd/mgt*.c)
BIN     ?= bin
PROGS    = $(CMD_SRC:cmd/%.c=$(BIN)/%)
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNITS    = $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ     = $(FUZZ_SRC:tests/fuzz/%.c=$(B)/fuzz/%)

.PHONY: all check check-unit check-cli check-smoke demo bench install clean deps bundle check-gpu bench-gpu gpu-progs device-pack
all: $(PROGS)

$(B)/.deps-ok: contrib/install-deps.sh
	@mkdir -p $(B)
	@if [ "$(DEPS)" = 1 ]; then sh contrib/install-deps.sh build; fi
	@touch $@

# lib/util/xxh3_avx2.c: XXH3 for AVX2, chosen at run time by xxh3.c (x86-64 only)
ifeq ($(shell uname -m),x86_64)
$(B)/lib/util/xxh3_avx2.o: ALL_CFLAGS += -mavx2
$(B)/lib/util/xxh3.o: ALL_CFLAGS += -DMGT_HAVE_AVX2_TU
endif

$(B)/%.o: %.c $(wildcard lib/*/*.h cmd/*.h tests/unit/*.h) | $(B)/.deps-ok
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/%.o: %.cc $(wildcard lib/*/*.h) | $(B)/.deps-ok
	@mkdir -p $(dir $@)
	$(say) CXX $<
	$(Q)$(CXX) $(ALL_CXXFLAGS) -c $< -o $@

# ptxas's resource report of every kernel (-Xptxas -v) goes to build/kernels/NAME.ptxas and the
# PTX stays in build/kernels/keep/ (-keep): what make kernel-report reads; other messages are shown
build/kernels/%.o: kernels/%.cu $(wildcard kernels/*.h kernels/*.cuh) | $(B)/.deps-ok
	@mkdir -p $(dir $@) build/kernels/keep
	$(say) NVCC $<
	$(Q)$(NVCC) $(NVCCFLAGS) -Xptxas -v -keep -keep-dir build/kernels/keep -c $< -o $@ 2>$@.log || { cat $@.log >&2; exit 1; }
	$(Q)grep -v -e '^ptxas info' -e 'bytes stack frame' $@.log >&2 || true
	$(Q)grep -e '^ptxas info' -e 'bytes stack frame' $@.log >build/kernels/$*.ptxas || true; rm -f $@.log

$(B)/libmgt.a: $(LIB_OBJ)
	$(say) AR $@
	$(Q)rm -f $@ && ar rcs $@ $^

$(BIN)/%: $(B)/cmd/%.o $(B)/cmd/cli.o $(B)/libmgt.a
	@mkdir -p $(BIN)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) $(filter %.o,$^) $(B)/libmgt.a $(LIBS) -o $@

# mgt-eval's commands live in cmd/eval_*.c (one file a command, cmd/eval_cmd.h)
$(BIN)/mgt-eval: $(patsubst %.c,$(B)/%.o,$(wildcard cmd/eval_*.c))

$(B)/tests/%: $(B)/tests/unit/%.o $(B)/libmgt.a
	@mkdir -p $(dir $@)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(B)/libmgt.a $(LIBS) -o $@

# Fuzz targets double as corpus replayers (tests/fuzz/README): each reads files named on its
# command line; built with libFuzzer when FUZZ_ENGINE=libfuzzer.
$(B)/fuzz/%: tests/fuzz/%.c tests/fuzz/replay.c $(B)/libmgt.a
	@mkdir -p $(dir $@)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< tests/fuzz/replay.c $(B)/libmgt.a $(LIBS) -o $@

# make check: the quick tier, each part timed (tests/parts.sh).  Under SANITIZE the sanitized
# pass: the unit tests, the fuzz corpora, the simulator's op checks and one quick run of each
# program (check-smoke: tests/cli/t0050-smoke.sh), not the long numeric comparisons, which the
# sanitizers cannot make more exact.
CHECK_PARTS = unit sim $(if $(filter 1,$(CUDA)),kernels) $(if $(SANITIZE),smoke,cli)
check: $(PROGS) $(UNITS)
	@sh tests/parts.sh "$(MAKE)" $(CHECK_PARTS)

# make kernel-report: every kernel built for sm_90a (and sm_80) from ptxas's report and the PTX:
# registers, spills, stack, static shared memory, register-limited occupancy, tensor-core
# instructions (tests/kernels/report.py); check-kernels (part of check with CUDA) compares it with
# tests/kernels/bounds.txt: a new spill, an occupancy drop or a lost tensor-core instruction fails.
# make kernel-bounds writes the bounds from the current build (after a deliberate change).
.PHONY: kernel-report check-kernels kernel-bounds
kernel-report: $(if $(filter 1,$(CUDA)),$(KERN_SRC:%.cu=build/%.o))
	@/usr/bin/python3 tests/kernels/report.py build/kernels
check-kernels: $(if $(filter 1,$(CUDA)),$(KERN_SRC:%.cu=build/%.o))
	@sh tests/kernels/test_report.sh
	@/usr/bin/python3 tests/kernels/report.py build/kernels --check tests/kernels/bounds.txt
kernel-bounds: $(if $(filter 1,$(CUDA)),$(KERN_SRC:%.cu=build/%.o))
	@/usr/bin/python3 tests/kernels/report.py build/kernels --write-bounds tests/kernels/bounds.txt

# make check-full: the same parts with the program tests' full tier (tests/cli/lib.sh)
.PHONY: check-full
check-full: $(PROGS) $(UNITS)
	@MGT_TEST_FULL=1 sh tests/parts.sh "$(MAKE)" unit sim cli

check-unit: $(PROGS) $(UNITS) $(FUZZ)
	@set -e; for t in $(UNITS); do echo "== $$t"; $$t; done
	@set -e; for f in $(FUZZ); do n=$$(basename $$f); \
	  if [ -d tests/fuzz/corpus/$$n ]; then echo "== $$n (corpus replay)"; $$f tests/fuzz/corpus/$$n/*; fi; done

check-cli: $(PROGS) $(UNITS)
	@if [ "$(DEPS)" = 1 ]; then sh contrib/install-deps.sh test; fi
	prove -j2 --timer tests/cli/t*.sh

check-smoke: $(PROGS)
	prove -v --timer tests/cli/t0050-smoke.sh

demo: $(PROGS)
	sh contrib/demo.sh

bench: $(PROGS)
	sh tests/bench/run.sh

install: $(PROGS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/mgt $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	cp -R share/mgt/. $(DESTDIR)$(PREFIX)/share/mgt/
	install -m 644 man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/man5/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 644 man/man7/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/

# ---- GPU tests and benchmarks (tests/gpu/, tests/bench/gpu.sh): built wherever libmgt.a is
# (CUDA=1 to be useful; without CUDA they print "skip: no CUDA device" and exit 77), run on a
# machine with a GPU.  BENCH_DATA=PREFIX|kjv adds runs on a tokenized dataset to bench-gpu.
GPU_TEST  = $(B)/tests/gpu/test_cuda_ops
GPU_BENCH = $(B)/bench/gemm_ceiling

$(B)/tests/gpu/test_cuda_ops: $(B)/tests/gpu/test_cuda_ops.o $(B)/libmgt.a
	@mkdir -p $(dir $@)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(B)/libmgt.a $(LIBS) -o $@

$(B)/bench/gemm_ceiling: $(B)/tests/bench/gemm_ceiling.o $(B)/libmgt.a
	@mkdir -p $(dir $@)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(B)/libmgt.a $(LIBS) -o $@

gpu-progs: $(GPU_TEST) $(GPU_BENCH)

# tests/bench/ckpt_sweep.c: the checkpoint corruption sweep (tests/bench/ckpt_corruption.sh, t3410)
CKPT_SWEEP = $(B)/bench/ckpt_sweep
$(CKPT_SWEEP): $(B)/tests/bench/ckpt_sweep.o $(B)/libmgt.a
	@mkdir -p $(dir $@)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(B)/libmgt.a $(LIBS) -o $@
check-cli: $(CKPT_SWEEP)

# check-unit builds them too (not run there): an op interface change that misses them fails in
# make check, not first in CI's gpu-progs
check-unit: $(GPU_TEST) $(GPU_BENCH)

check-gpu: $(PROGS) $(GPU_TEST)
	MGT_BIN=$(abspath $(BIN)) TEST_CUDA_OPS=$(abspath $(GPU_TEST)) sh tests/gpu/check.sh

bench-gpu: $(PROGS) $(GPU_BENCH)
	MGT_BIN=$(abspath $(BIN)) GEMM_CEILING=$(abspath $(GPU_BENCH)) sh tests/bench/gpu.sh $(BENCH_DATA)

# ---- check-sim (part of check): the launch machinery under back-to-back launches
# (tests/sim/pool_test.cc), tests/gpu/test_cuda_ops.c with MGT_TEST_SMALL=1, and mgt-train
# against the CPU (tests/sim/train.sh), on a CPU
# simulation of CUDA (tests/sim/): kernels/*.cu compiled as host C++ against tests/sim/cuda_sim.h,
# lib/backend/cuda*.c against the toolkit's headers, cudart and cuBLASLt replaced by
# tests/sim/sim_runtime.cc; the reference is the CPU backend of a libmgt.a built without CUDA
# ($(B)/libmgt.a when CUDA=0, else one in $(B)/sim/host).  Needs g++ and $(CUDA_HOME)/include (no
# nvcc, no GPU); skipped with a message without them.  Under SANITIZE only the op checks run, with
# the kernels instrumented by the sanitizers themselves.
SIM_B    = $(B)/sim
SIM_OK   = $(and $(shell command -v g++ 2>/dev/null),$(wildcard $(CUDA_HOME)/include/cublasLt.h))
SIM_HOST = $(if $(filter 1,$(CUDA)),$(SIM_B)/host/libmgt.a,$(B)/libmgt.a)
SIM_HDR  = tests/sim/cuda_sim.h tests/sim/mma_sim.h
SIM_KOBJ = $(patsubst kernels/%.cu,$(SIM_B)/k_%.o,$(wildcard kernels/*.cu))
SIM_OBJ  = $(SIM_B)/cuda.o $(SIM_B)/cuda_attn.o $(SIM_B)/cuda_gemm.o $(SIM_B)/cuda_vmm.o $(SIM_KOBJ) $(SIM_B)/cuda_sim.o $(SIM_B)/sim_runtime.o \
           $(SIM_B)/sim_mem.o $(SIM_B)/sim_prof.o
SIM_TEST = $(SIM_B)/test_cuda_ops_sim
SIM_POOL = $(SIM_B)/pool_test
SIM_PROFT = $(SIM_B)/prof_test
SIM_FP8  = $(SIM_B)/fp8_nvidia
SIM_TRAIN = $(SIM_B)/mgt-train
SIM_CMD  = $(if $(filter 1,$(CUDA)),$(SIM_B)/host/cmd,$(B)/cmd)
SIM_CC   = $(CC) -std=c11 -D_GNU_SOURCE -pthread $(WARN) -Ilib -Icmd -Ikernels -isystem $(CUDA_HOME)/include $(CFLAGS)
SIM_CXX  = g++ -std=c++17 -pthread $(WARN) -Wno-unused-function -Wno-unknown-pragmas -fno-strict-aliasing \
           -isystem $(CUDA_HOME)/include -Ikernels -Ilib $(CFLAGS)
# The kernels call tests/sim/sim_mem.cc on every load and store (the kernel-address sanitizer's
# outline calls, with sim_mem.cc as their runtime); under SANITIZE=address they carry ASan's own
# checks instead, and sim_mem.cc poisons its guards for ASan.  -fno-tree-sra keeps a float4 or
# 8-byte vector load one access (split into 4-byte loads it looked uncoalesced to the access profile).
SIM_ASAN = $(findstring address,$(SANITIZE))
SIM_KFLAGS = -fno-tree-sra $(if $(SIM_ASAN),-DMGT_SIM_ASAN,-fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 \
             --param asan-stack=0 --param asan-globals=0 --param asan-use-after-return=0)
SIM_LIBS = -lpcre2-8 -lzstd -ljansson -lzip -lutf8proc -licuuc -licudata -lsentencepiece $(PKG_LIBS) $(MPI_LIBS) -fopenmp -lpthread -lm

.PHONY: check-sim
ifeq ($(SIM_OK),)
check-sim:
	@echo "check-sim: skipped (needs g++ and $(CUDA_HOME)/include)"
else ifneq ($(SANITIZE),)
# under the sanitizers: the op checks alone (the kernels carry ASan's checks, not sim_mem.cc's)
check-sim: $(SIM_POOL) $(SIM_TEST)
	$(SIM_POOL) 2000
	MGT_TEST_SMALL=1 MGT_TEST_ALARM=3600 $(SIM_TEST)
else
check-sim: $(SIM_POOL) $(SIM_PROFT) $(SIM_TEST) $(SIM_TRAIN) $(PROGS) $(SIM_FP8)
	$(SIM_POOL) 2000
	$(SIM_PROFT)
	$(SIM_FP8)
	MGT_TEST_SMALL=1 MGT_TEST_ALARM=3600 $(SIM_TEST)
	SIM_TRAIN=$(abspath $(SIM_TRAIN)) CPU_TRAIN=$(abspath $(BIN)/mgt-train) sh tests/sim/train.sh
endif

# ---- check-sim-access (not in make check: the profile doubles the op checks' time, about 5
# minutes on two cores): the op checks with MGT_SIM_PROFILE (tests/sim/sim_prof.cc), fixed seeds;
# the table goes to $(SIM_B)/access-profile.txt (the checked-in one: tests/sim/results/
# access-profile.txt) and each kernel's worst sectors/request, sectors/ideal and bank-conflict
# wavefronts/shared access are held to tests/sim/access-bounds.txt.
.PHONY: check-sim-access
check-sim-access: $(SIM_PROFT) $(SIM_TEST)
	$(SIM_PROFT)
	MGT_TEST_SMALL=1 MGT_TEST_ALARM=3600 MGT_TEST_SEED=1 MGT_SIM_SEED=1 MGT_SIM_PROFILE=$(SIM_B)/access-profile.txt \
	  MGT_SIM_PROFILE_BOUNDS=tests/sim/access-bounds.txt $(SIM_TEST) > $(SIM_B)/access-ops.log || \
	  { grep -a "not ok" $(SIM_B)/access-ops.log; exit 1; }
	@grep -a "access bounds" $(SIM_B)/access-ops.log

.PHONY: mutate-sim
mutate-sim:
	/usr/bin/python3 tests/sim/mutate.py

$(SIM_B)/cuda.o $(SIM_B)/cuda_attn.o $(SIM_B)/cuda_gemm.o $(SIM_B)/cuda_vmm.o: $(SIM_B)/%.o: lib/backend/%.c $(wildcard lib/*/*.h kernels/*.h)
	@mkdir -p $(dir $@)
	$(say) SIMCC $<
	$(Q)$(SIM_CC) -c $< -o $@

$(SIM_B)/test_cuda_ops.o: tests/gpu/test_cuda_ops.c $(wildcard lib/*/*.h) tests/unit/check.h
	@mkdir -p $(dir $@)
	$(say) SIMCC $<
	$(Q)$(SIM_CC) -DMGT_CUDA_SIM -c $< -o $@

$(SIM_KOBJ): $(SIM_B)/k_%.o: kernels/%.cu $(wildcard kernels/*.h kernels/*.cuh) $(SIM_HDR)
	@mkdir -p $(dir $@)
	$(say) SIMCXX $<
	$(Q)$(SIM_CXX) $(SIM_KFLAGS) -x c++ -include tests/sim/cuda_sim.h -DMGT_CUDA_SIM -c $< -o $@

$(SIM_B)/cuda_sim.o $(SIM_B)/sim_runtime.o $(SIM_B)/sim_mem.o $(SIM_B)/sim_prof.o: $(SIM_B)/%.o: tests/sim/%.cc $(SIM_HDR)
	@mkdir -p $(dir $@)
	$(say) SIMCXX $<
	$(Q)$(SIM_CXX) $(if $(SIM_ASAN),-DMGT_SIM_ASAN) -c $< -o $@

# The simulated objects come first, so that libmgt.a's nocuda.o (mgt_backend_cuda_*) is not pulled.
$(SIM_TEST): $(SIM_B)/test_cuda_ops.o $(SIM_OBJ) $(SIM_HOST)
	$(say) LINK $@
	$(Q)g++ $(CFLAGS) $(LDFLAGS) $(SIM_B)/test_cuda_ops.o $(SIM_OBJ) $(SIM_HOST) $(SIM_LIBS) -o $@

# lib/util's fp8 conversions against the toolkit's cuda_fp8.hpp host reference (tests/sim/fp8_nvidia.cc)
$(SIM_FP8): tests/sim/fp8_nvidia.cc lib/util/util.h $(SIM_HOST)
	@mkdir -p $(dir $@)
	$(say) SIMCXX $<
	$(Q)$(SIM_CXX) $< $(SIM_HOST) -lm -o $@

# the launch machinery alone (tests/sim/pool_test.cc)
$(SIM_B)/pool_test.o: tests/sim/pool_test.cc $(SIM_HDR)
	@mkdir -p $(dir $@)
	$(say) SIMCXX $<
	$(Q)$(SIM_CXX) -x c++ -include tests/sim/cuda_sim.h -DMGT_CUDA_SIM -c $< -o $@

$(SIM_POOL): $(SIM_B)/pool_test.o $(SIM_B)/cuda_sim.o $(SIM_B)/sim_mem.o $(SIM_B)/sim_runtime.o $(SIM_B)/sim_prof.o
	$(say) LINK $@
	$(Q)g++ $(CFLAGS) $(LDFLAGS) $^ -pthread -o $@

# the access profile on kernels of known patterns (tests/sim/prof_test.cc; instrumented as the kernels are)
$(SIM_B)/prof_test.o: tests/sim/prof_test.cc $(SIM_HDR)
	@mkdir -p $(dir $@)
	$(say) SIMCXX $<
	$(Q)$(SIM_CXX) $(SIM_KFLAGS) -x c++ -include tests/sim/cuda_sim.h -DMGT_CUDA_SIM -c $< -o $@

$(SIM_PROFT): $(SIM_B)/prof_test.o $(SIM_B)/cuda_sim.o $(SIM_B)/sim_mem.o $(SIM_B)/sim_runtime.o $(SIM_B)/sim_prof.o
	$(say) LINK $@
	$(Q)g++ $(CFLAGS) $(LDFLAGS) $^ -pthread -o $@

# mgt-train on the simulated CUDA backend (tests/sim/train.sh trains with it)
$(SIM_TRAIN): $(SIM_CMD)/mgt-train.o $(SIM_CMD)/cli.o $(SIM_OBJ) $(SIM_HOST)
	$(say) LINK $@
	$(Q)g++ $(CFLAGS) $(LDFLAGS) $(SIM_CMD)/mgt-train.o $(SIM_CMD)/cli.o $(SIM_OBJ) $(SIM_HOST) $(SIM_LIBS) -o $@

ifeq ($(CUDA),1)
.PHONY: sim-host-lib
# The empty recipe makes make look at their times again after the sub-make: without one, a
# change to lib/ rebuilt the host library but relinked the simulated programs only at the next make.
$(SIM_B)/host/libmgt.a $(SIM_B)/host/cmd/mgt-train.o $(SIM_B)/host/cmd/cli.o: sim-host-lib ; @:
sim-host-lib:
	$(Q)$(MAKE) --no-print-directory CUDA=0 MPI=$(MPI) DEPS=0 B=$(SIM_B)/host $(SIM_B)/host/libmgt.a \
	  $(SIM_B)/host/cmd/mgt-train.o $(SIM_B)/host/cmd/cli.o
endif

# The bundle: the same programs built without MPI into build/bundle, with HDF5 (and its szip/
# zlib), jansson, zstd, PCRE2, utf8proc, ICU (common + data: mgt-preprocess's sentence splitter),
# OpenBLAS and libgomp linked statically; glibc,
# libstdc++ and, with CUDA, cuBLASLt and NCCL stay dynamic (contrib/bundle.sh checks with ldd).
# Debian ships libsentencepiece as a shared library only (no .a; it carries its own protobuf-lite
# and needs only libstdc++): it is linked dynamically and copied into the bundle's lib/, found
# through the rpath $ORIGIN/../lib.  So is libzip (lib/ckpt/torchfile.c; no .a either), with its
# own libbz2, libcrypto and libz; the rpath is written as DT_RPATH (--disable-new-dtags), which,
# unlike DT_RUNPATH, the loader also searches for those indirect dependencies.
ifeq ($(BUNDLE),1)
STATIC_A  = /usr/lib/x86_64-linux-gnu
LIBS      = -Wl,-Bstatic -lpcre2-8 -lzstd -ljansson -lutf8proc -licuuc -licudata -L$(STATIC_A)/hdf5/serial -lhdf5 -lsz -laec -lz \
            -L$(STATIC_A)/openblas-openmp -lopenblas -Wl,-Bdynamic $(shell $(CC) -print-file-name=libgomp.a) \
            -lsentencepiece -lzip -lstdc++ $(CUDA_LIBS) -lpthread -ldl -lm
LDFLAGS  += -Wl,--as-needed -no-pie -Wl,-rpath,'$$ORIGIN/../lib' -Wl,--disable-new-dtags
endif
bundle:
	$(MAKE) B=build/bundle BIN=build/bundle/bin BUNDLE=1 MPI=0 DEPS=$(DEPS) CUDA=$(CUDA) \
	  $(CMD_SRC:cmd/%.c=build/bundle/bin/%) build/bundle/tests/gpu/test_cuda_ops build/bundle/bench/gemm_ceiling
	sh contrib/bundle.sh build/bundle dist/mgt-bundle

# For the device tool: the bundle's programs, xz-compressed, in the ignored folder .device/ (carry
# it; tests/gpu/device-run.sh unpacks and runs there).
device-pack: bundle
	mkdir -p .device
	cd dist && tar cf - mgt-bundle/bin mgt-bundle/lib mgt-bundle/libexec mgt-bundle/env.sh | xz -T2 -6 >../.device/mgt-bundle.tar.xz.tmp
	mv .device/mgt-bundle.tar.xz.tmp .device/mgt-bundle.tar.xz
	@ls -l .device/mgt-bundle.tar.xz

clean:
	rm -rf $(B) bin dist

.SECONDARY:
