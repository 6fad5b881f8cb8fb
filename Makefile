# ktune. `make` builds the library and the CLI; `make test` runs the CPU
# suite, then the same suite under AddressSanitizer and UBSan; `make gpu-test`
# and `make bench` need a GPU (without one they say so and skip).
VERSION := $(shell sed -n 's/^\#define KT_VERSION_STRING "\(.*\)"/\1/p' runtime/ktune.h)
MAJOR := $(shell sed -n 's/^\#define KT_VERSION_MAJOR \([0-9]*\)/\1/p' runtime/ktune.h)

B := build
CUDA_HOME ?= /usr/local/cuda
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
DESTDIR ?=
CC ?= cc
CFLAGS ?= -O2 -g
LDFLAGS ?=

PKGS := sqlite3 libcjson
# Deferred (=): tools/deps.sh may install the packages during this very run,
# after the Makefile was read, so pkg-config is asked when a recipe runs.
DEP_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEP_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lsqlite3 -lcjson)
LIBS = $(DEP_LIBS) -ldl -lpthread -lm

# The user's CFLAGS are never overridden; ours go beside them.
WARN := -Wall -Wextra -Werror -Wno-format-truncation
REAL_CFLAGS = $(CFLAGS) -std=c11 $(WARN) -D_GNU_SOURCE -fPIC -MMD -MP $(DEP_CFLAGS) \
  -I$(CUDA_HOME)/include -DKT_BUILDING_LIBRARY
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

# The library's files name the layer of each header they include
# ("base/alloc.h", "cache/store.h"). The CLI sees the public header alone:
# a copy of it is its only include directory, so an internal header cannot
# creep into tools/.
LIB_INC := -Iruntime -I.
PUBLIC_INC := -I$(B)/include
LIB_SRC := $(filter-out runtime/helper/%,$(wildcard runtime/*/*.c)) $(wildcard cache/*.c)
# ktune-nvrtc, the helper process NVRTC runs in (runtime/device/rcompile.h);
# the library looks for it beside itself.
HELPER_SRC := runtime/helper/ktune_nvrtc.c
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRC))
CLI_SRC := $(wildcard tools/*.c)
TEST_SRC := $(wildcard tests/t_*.c) tests/harness.c tests/faults.c $(FUZZ_SRC) tools/shape.c tools/tuneline.c
GPU_SRC := $(wildcard tests/gpu_*.c) tests/harness.c
BENCH_SRC := tests/bench.c tests/bench_async.c tests/gpu_util.c tests/harness.c tools/shape.c

OBJ = $(patsubst %.c,$(1)/obj/%.o,$(2))

.PHONY: all deps test check test-plain test-asan gpu-test gpu-test-multi gpu-sanitize jax bench demo install uninstall clean fuzz FORCE

# ktune._fastcall, the Python package's launch path in C, where Python's
# headers are installed (elsewhere the package packs arguments with ctypes).
# Against the public header alone; it links nothing (kt_launch comes as an
# address from the library ctypes loaded).
PY_INC := $(shell python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT := $(shell python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or "")' 2>/dev/null)
PY_FASTCALL := $(if $(and $(PY_EXT),$(wildcard $(PY_INC)/Python.h)),$(B)/_fastcall$(PY_EXT))

all: deps $(B)/libktune.a $(B)/libktune.so $(B)/ktune $(B)/ktune-nvrtc $(B)/ktune.pc $(PY_FASTCALL)

FASTCALL_SRC := $(addprefix tools/python/ktune/,_fastmod.c _fastcall.c _fastnorm.c _fastaten.c)
$(B)/_fastcall$(PY_EXT): $(FASTCALL_SRC) $(wildcard tools/python/ktune/_fast*.h) $(B)/include/ktune.h
	$(CC) $(CFLAGS) -std=c11 $(WARN) -D_GNU_SOURCE -fPIC -fexceptions -shared -fvisibility=hidden -I$(PY_INC) $(PUBLIC_INC) \
	  $(FASTCALL_SRC) -o $@

# A stand-in for torch's stable C ABI, for tests/python/test_fastaten.py:
# ktune._fastcall's torch norms tested without torch or a GPU.
FAKE_TORCH := $(if $(PY_FASTCALL),$(B)/libfake_torch_abi.so)
$(B)/libfake_torch_abi.so: tests/fake_torch_abi.c
	@mkdir -p $(B)
	$(CC) $(CFLAGS) -std=c11 $(WARN) -fPIC -shared -fvisibility=hidden $< -o $@

deps:
	@sh tools/deps.sh "$(CC)" "$(CUDA_HOME)"

# Include directories by what a file is: the library, the CLI, or a test.
inc = $(if $(filter tools/%,$(1)),$(PUBLIC_INC),$(LIB_INC) -Itests)

$(B)/obj/%.o: %.c | deps $(B)/include/ktune.h
	@mkdir -p $(dir $@)
	$(CC) $(REAL_CFLAGS) -fvisibility=hidden $(call inc,$<) -c $< -o $@

$(B)/asan/obj/%.o: %.c | deps $(B)/include/ktune.h
	@mkdir -p $(dir $@)
	$(CC) $(REAL_CFLAGS) $(SAN) $(call inc,$<) -c $< -o $@

# The XLA handler's offline test includes tools/jax/ffi.c, which needs
# jaxlib's C API header: where jax imports (JAX_INC, below) it is built with
# it, elsewhere it skips.
$(B)/obj/tests/t_jaxffi.o $(B)/asan/obj/tests/t_jaxffi.o: REAL_CFLAGS += $(if $(JAX_INC),-DKT_JAX_FFI -I$(JAX_INC))

-include $(shell find $(B) -name '*.d' 2>/dev/null)

$(B)/include/ktune.h: runtime/ktune.h
	@mkdir -p $(dir $@)
	@cp $< $@

$(B)/libktune.a: $(call OBJ,$(B),$(LIB_SRC))
	@rm -f $@
	ar rcs $@ $^

$(B)/libktune.so: $(call OBJ,$(B),$(LIB_SRC))
	$(CC) -shared -Wl,-soname,libktune.so.$(MAJOR) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/ktune: $(call OBJ,$(B),$(CLI_SRC)) $(B)/libktune.a
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/ktune-nvrtc: $(call OBJ,$(B),$(HELPER_SRC)) $(B)/libktune.a
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/asan/ktune-nvrtc: $(call OBJ,$(B)/asan,$(HELPER_SRC) $(LIB_SRC))
	$(CC) $(SAN) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/ktune-test: $(call OBJ,$(B),$(TEST_SRC)) $(B)/libktune.a
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/ktune-gpu-test: $(call OBJ,$(B),$(GPU_SRC)) $(B)/libktune.a
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/ktune-bench: $(call OBJ,$(B),$(BENCH_SRC)) $(B)/libktune.a
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/asan/ktune-test: $(call OBJ,$(B)/asan,$(TEST_SRC) $(LIB_SRC))
	$(CC) $(SAN) $(LDFLAGS) $^ $(LIBS) -o $@

$(B)/asan/ktune: $(call OBJ,$(B)/asan,$(CLI_SRC) $(LIB_SRC))
	$(CC) $(SAN) $(LDFLAGS) $^ $(LIBS) -o $@

# Written on every run, so that `make install PREFIX=... LIBDIR=...` records
# them. Libs carries an rpath, so that a program linked against a prefix the
# loader does not search (say $$HOME/.local) runs without LD_LIBRARY_PATH.
$(B)/ktune.pc: FORCE
	@mkdir -p $(B)
	@printf 'prefix=%s\nlibdir=%s\nincludedir=$${prefix}/include\n\nName: ktune\nDescription: autotuning GPU kernel runtime\nVersion: %s\nRequires.private: sqlite3 libcjson\nLibs: -L$${libdir} -Wl,-rpath,$${libdir} -lktune\nLibs.private: -ldl -lpthread -lm\nCflags: -I$${includedir}\n' \
	  "$(PREFIX)" "$(LIBDIR)" "$(VERSION)" > $@

# Tests run from the project root so that they find kernels_src/ and tests/.
test: all test-plain test-asan

# The conventional name of the same.
check: test

test-plain: $(B)/ktune-test $(B)/ktune $(B)/ktune-nvrtc $(FAKE_TORCH)
	KTUNE_BIN=$(B)/ktune $(B)/ktune-test

test-asan: $(B)/asan/ktune-test $(B)/asan/ktune $(B)/asan/ktune-nvrtc $(FAKE_TORCH)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0:use_tls=0 \
	UBSAN_OPTIONS=print_stacktrace=1 KTUNE_BIN=$(B)/asan/ktune $(B)/asan/ktune-test

gpu-test: all $(B)/ktune-gpu-test
	sh tests/gpu_test.sh $(B)

# The XLA FFI handler of ktune.jax, in C against jaxlib's C API header;
# where jax does not import, says so and builds nothing. It links the
# shared library, so that JAX, PyTorch and C users of one process share
# one runtime per device.
JAX_INC = $(shell python3 -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null)
jax: all
	@if [ -z "$(JAX_INC)" ]; then echo "make jax: jax does not import here; the XLA FFI handler is not built"; \
	else $(CC) $(CFLAGS) -std=c11 $(WARN) -fPIC -shared -fvisibility=hidden $(PUBLIC_INC) -I$(JAX_INC) \
	  tools/jax/ffi.c -L$(B) -l:libktune.so -Wl,-rpath,'$$ORIGIN' -o $(B)/libktune_jax.so && \
	  ln -sf libktune.so $(B)/libktune.so.$(MAJOR) && \
	  echo "make jax: $(B)/libktune_jax.so"; fi

# Ranks agreeing under torchrun and JAX processes through jax.distributed,
# record then pre-warm, --devices all, the sharded pre-warm: a GPU a rank,
# or ranks sharing one where the host has one.
gpu-test-multi: all
	sh tests/multigpu.sh $(B)

# The small GPU cases under compute-sanitizer: out-of-bounds and misaligned
# accesses (memcheck) and shared-memory races (racecheck). Default configs
# only (KTUNE_MODE=off), so the tuner's deliberate trials stay out of it.
SANITIZER ?= $(CUDA_HOME)/bin/compute-sanitizer
gpu-sanitize: all $(B)/ktune-gpu-test
	KTUNE_MODE=off $(SANITIZER) --tool memcheck --error-exitcode 3 $(B)/ktune-gpu-test small_
	KTUNE_MODE=off $(SANITIZER) --tool racecheck --racecheck-report all --error-exitcode 3 $(B)/ktune-gpu-test small_

# A cache of its own, so that every run measures cold tuning.
bench: all $(B)/ktune-bench
	rm -f $(B)/bench.db*
	KTUNE_CACHE=$(CURDIR)/$(B)/bench.db $(B)/ktune-bench
	@if python3 -c 'import torch' 2>/dev/null; then \
	  KTUNE_LIB=$(CURDIR)/$(B)/libktune.so KTUNE_MODE=tune KTUNE_CACHE=$(CURDIR)/$(B)/bench.db python3 tools/bench_kernels.py && \
	  KTUNE_LIB=$(CURDIR)/$(B)/libktune.so KTUNE_MODE=tune KTUNE_CACHE=$(CURDIR)/$(B)/bench.db python3 tools/bench_overhead.py; \
	else echo "bench_kernels.py: torch does not import here; the PyTorch comparison is skipped"; fi
	@if python3 -c 'import jax' 2>/dev/null; then $(MAKE) --no-print-directory jax && \
	  KTUNE_LIB=$(CURDIR)/$(B)/libktune.so PYTHONPATH=$(CURDIR)/tools/python KTUNE_MODE=tune \
	  KTUNE_CACHE=$(CURDIR)/$(B)/bench.db python3 tools/bench_jax.py; \
	else echo "bench_jax.py: jax does not import here; the JAX table is skipped"; fi

# libFuzzer with clang, ASan and UBSan: each target for FUZZ_SECONDS, new
# inputs kept under build/fuzz/corpus-TARGET, crashes as
# build/fuzz/crash-TARGET-*. Copy a crash into tests/fuzz/crashes/TARGET/
# and make test replays it from then on.
CLANG ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -fno-sanitize-recover=undefined \
  -I$(CUDA_HOME)/include -DKT_BUILDING_LIBRARY
FUZZ_LIB := $(patsubst %.c,$(B)/fuzz/obj/%.o,$(LIB_SRC) tools/shape.c)

$(B)/fuzz/obj/%.o: %.c | deps $(B)/include/ktune.h
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -MMD -MP $(DEP_CFLAGS) $(call inc,$<) -c $< -o $@

.SECONDARY: $(FUZZ_LIB)
$(B)/fuzz/fuzz-%: tests/fuzz/fuzz_%.c $(FUZZ_LIB)
	$(CLANG) $(FUZZ_FLAGS) -fsanitize=fuzzer -DKT_LIBFUZZER $(DEP_CFLAGS) $(LIB_INC) -Itests $^ $(LIBS) -o $@

fuzz:
	@command -v $(CLANG) >/dev/null || { echo "make fuzz needs clang with libFuzzer (Debian: apt-get install clang)"; exit 1; }
	@$(MAKE) --no-print-directory $(patsubst %,$(B)/fuzz/fuzz-%,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(B)/fuzz/corpus-$$t; \
	  echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	  $(B)/fuzz/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(B)/fuzz/crash-$$t- \
	    $(B)/fuzz/corpus-$$t tests/fuzz/corpus/$$t 2>&1 | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done' || exit 1; \
	done

demo: all
	$(B)/ktune demo kernels_src/rmsnorm.json

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(PREFIX)/share/ktune/kernels $(DESTDIR)$(LIBDIR)/ktune
	install -m 644 $(B)/libktune.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(B)/ktune-nvrtc $(DESTDIR)$(LIBDIR)/ktune/
	install -m 755 $(B)/libktune.so $(DESTDIR)$(LIBDIR)/libktune.so.$(VERSION)
	ln -sf libktune.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libktune.so.$(MAJOR)
	ln -sf libktune.so.$(MAJOR) $(DESTDIR)$(LIBDIR)/libktune.so
	install -m 644 runtime/ktune.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(B)/ktune $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(B)/ktune.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 kernels_src/*.json kernels_src/*.cu kernels_src/*.cuh $(DESTDIR)$(PREFIX)/share/ktune/kernels/

# What install wrote, and nothing else (the share/ktune folder only when
# it is left empty).
uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libktune.a $(DESTDIR)$(LIBDIR)/libktune.so.$(VERSION) \
	  $(DESTDIR)$(LIBDIR)/libktune.so.$(MAJOR) $(DESTDIR)$(LIBDIR)/libktune.so \
	  $(DESTDIR)$(PREFIX)/include/ktune.h $(DESTDIR)$(PREFIX)/bin/ktune $(DESTDIR)$(LIBDIR)/pkgconfig/ktune.pc \
	  $(DESTDIR)$(LIBDIR)/ktune/ktune-nvrtc
	-rmdir $(DESTDIR)$(LIBDIR)/ktune 2>/dev/null
	cd kernels_src && for f in *.json *.cu *.cuh; do rm -f "$(DESTDIR)$(PREFIX)/share/ktune/kernels/$$f"; done
	-rmdir $(DESTDIR)$(PREFIX)/share/ktune/kernels $(DESTDIR)$(PREFIX)/share/ktune 2>/dev/null

clean:
	rm -rf $(B)

FORCE:
