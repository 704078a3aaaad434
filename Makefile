# tokenscope build. `make` builds everything; `make check` runs every test; `make demo` builds the
# tracer and the bundled reference server alone and runs one against the other; `make bench`
# prints the overhead figures.
# V=1 shows the commands. STATIC=1 also builds .output/static/tokenscope, linked statically.
# `make image` builds the OCI image of the static binary (deploy/README.md, "The image").

HOST_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
# ARCH from the command line only: an ARCH in the environment may be a kernel build's or
# another tool's, with other names.
ifneq ($(origin ARCH),command line)
ARCH := $(HOST_ARCH)
endif
# The BPF program matches syscalls by number and reads registers by name: it has the tables of
# these architectures alone (bpf/lib/syscalls.bpf.h); another would trace the wrong syscalls.
SUPPORTED_ARCHS := x86 arm64
ifeq ($(filter $(ARCH),$(SUPPORTED_ARCHS)),)
$(error tokenscope builds for $(SUPPORTED_ARCHS) only: its BPF program has no syscall table for $(ARCH))
endif
CLANG ?= clang
LLVM_STRIP ?= llvm-strip
BPFTOOL ?= bpftool
CC ?= cc

# make ARCH=arm64 on x86: a cross build (docs/building.md), in its own folder so
# the native one is left alone. Its unit tests run under qemu-user (tests/run.sh, group arm64),
# where AddressSanitizer's shadow memory does not map: they are built with UBSan alone.
CROSS :=
ifneq ($(ARCH),$(HOST_ARCH))
ifneq ($(ARCH)-$(HOST_ARCH),arm64-x86)
$(error cross builds go from x86 to arm64 only, not from $(HOST_ARCH) to $(ARCH))
endif
CROSS := 1
ifeq ($(origin CC),default)
CC := aarch64-linux-gnu-gcc
endif
OUTPUT := .output/arm64
else
OUTPUT := .output
endif

CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Werror
USER_CFLAGS := $(CFLAGS) $(WARN) -std=gnu11 -D_GNU_SOURCE -Iinclude -Iuser -I$(OUTPUT)
# Objects of user/ record the headers they include (.d files beside them, read below).
DEPFLAGS = -MMD -MP -MF $(@:.o=.d)
# usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> is in the multiarch folder.
BPF_CFLAGS := -g -O2 -Wall -Werror -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) \
	-Ivmlinux/$(ARCH) -Iinclude -idirafter /usr/include/$(shell $(CC) -print-multiarch)

# libcapstone and libmicrohttpd are opened at run time (user/loader/insn.c, user/sinks/httpd.c),
# or linked into the static build.
LDLIBS := -lbpf -lelf -lz -lnghttp2 -lm -lpthread -ldl
# The static build (docs/building.md "Static build"): the same objects, linked with Debian's static
# archives and glibc's into .output/static/tokenscope, beside the dynamic one. libelf's archive
# needs zstd's; static/gnutls_none.c stands in for GnuTLS, which libmicrohttpd.a refers to and
# Debian's archives cannot link statically. The linker warns that dlopen (nvml.c, otlp_http.c)
# needs glibc's shared libraries at run time: a static tokenscope never calls it (lib/dl.h).
STATIC_BIN := $(OUTPUT)/static/tokenscope
STATIC_LDLIBS := -static -Wl,--undefined=cs_open -Wl,--undefined=MHD_start_daemon -lbpf -lelf -lz -lzstd -lnghttp2 -lcapstone -lm -lmicrohttpd \
	-lpthread

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

# user/ is in folders by the data flow (docs/architecture.md): cli, session, loader, pipeline,
# record, sinks, lib. Every file but main.c, the loader's skeleton users (trace.c, uprobes.c, run.c,
# hold.c, kernel.c) and elf.c (libelf, which the unit tests do not link) is code the tests link
# too.
LOADER_SRCS := user/cli/main.c user/loader/trace.c user/loader/uprobes.c user/loader/elf.c \
	user/loader/tracefs.c user/loader/run.c user/loader/hold.c user/loader/release.c \
	user/loader/features.c user/loader/check.c user/loader/kernel_legacy.c \
	user/loader/kernel.c user/loader/cost.c
LIB_SRCS := $(filter-out $(LOADER_SRCS),$(wildcard user/*/*.c))
LIB_OBJS := $(patsubst user/%.c,$(OUTPUT)/user/%.o,$(LIB_SRCS))
TOOL_OBJS := $(patsubst user/%.c,$(OUTPUT)/user/%.o,$(LOADER_SRCS))
# Unit tests run under AddressSanitizer and UBSan, against their own build of the pipeline.
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ifeq ($(CROSS),1)
SAN_FLAGS := -O1 -g -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
	-static-libubsan
endif
SAN_OBJS := $(patsubst user/%.c,$(OUTPUT)/san/%.o,$(LIB_SRCS))
UNIT_TESTS := $(patsubst tests/unit/%.c,$(OUTPUT)/tests/%,$(wildcard tests/unit/test_*.c))
BPF_TESTS := $(patsubst tests/bpf/%.c,$(OUTPUT)/tests/%,$(wildcard tests/bpf/test_*.c))
TOOLS := $(OUTPUT)/refserver $(OUTPUT)/gtclient $(OUTPUT)/writeloop $(OUTPUT)/cudaloop \
	$(OUTPUT)/standin/libcudart.so.13 $(OUTPUT)/peekcost $(OUTPUT)/standin/libnvidia-ml.so.1 \
	$(OUTPUT)/standin/nvml-old/libnvidia-ml.so.1
CUDART_STATIC := $(wildcard /usr/local/cuda/lib64/libcudart_static.a)
ifneq ($(CUDART_STATIC),)
TOOLS += $(OUTPUT)/cudaloop-static
endif

# The CUPTI injection library (cupti/), built where the CUDA toolkit's CUPTI headers are; it
# opens libcupti with dlopen at run time, so it links against nothing of CUDA's.
CUDA_INC ?= /usr/local/cuda/include
HAVE_CUPTI := $(wildcard $(CUDA_INC)/cupti_activity.h)
CUPTI_SRCS := $(wildcard cupti/*.c)
CUPTI_CFLAGS := $(CFLAGS) $(WARN) -std=gnu11 -D_GNU_SOURCE -Iinclude -Icupti -I$(CUDA_INC)
ifneq ($(HAVE_CUPTI),)
TOOLS += $(OUTPUT)/libtokenscope_cupti.so $(OUTPUT)/standin/libcupti.so.13
else
$(info CUPTI headers not found in $(CUDA_INC) (CUDA_INC=...): libtokenscope_cupti.so is not built)
endif
# test_cupti_runs and fuzz_cupti build the coalescer and the record reader alone, which read
# the toolkit's record structs: neither is built without the headers.
CUPTI_TESTED := cupti/runs.c cupti/records.c
ifeq ($(HAVE_CUPTI),)
UNIT_TESTS := $(filter-out $(OUTPUT)/tests/test_cupti_runs,$(UNIT_TESTS))
endif

.DELETE_ON_ERROR:
# The sanitizer objects are only prerequisites of tests: keep them, or every build redoes them.
.SECONDARY: $(SAN_OBJS)
.PHONY: all install uninstall cross check demo bench fuzz fuzz-regress stress deps deps-demo deps-test deps-check \
	deps-bench deps-image image clean format vmlinux

ifeq ($(CROSS),1)
# The tracer, the unit tests (run under qemu-user: tests/run.sh, group arm64), and the BPF tests
# with the init that runs them in an emulated arm64 machine (group arm64-vm). The test tools
# are the x86 build's.
all: $(OUTPUT)/tokenscope $(UNIT_TESTS) $(BPF_TESTS) $(OUTPUT)/vminit
else
all: $(OUTPUT)/tokenscope $(TOOLS) $(UNIT_TESTS) $(BPF_TESTS) $(if $(filter 1,$(STATIC)),$(STATIC_BIN))
endif

# The init of tests/arm64/run_vm.sh's initramfs: static, as nothing else is there to load it.
$(OUTPUT)/vminit: tests/arm64/vminit.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -static $< -o $@

# The arm64 cross build, for make check on an x86 machine (nothing to do on another).
cross:
ifeq ($(HOST_ARCH),x86)
	$(Q)$(MAKE) --no-print-directory ARCH=arm64 all
endif

$(OUTPUT) $(OUTPUT)/tests:
	$(Q)mkdir -p $@

$(OUTPUT)/tokenscope.bpf.o $(OUTPUT)/bench/tokenscope.bpf.o $(OUTPUT)/legacy/tokenscope.bpf.o: \
		bpf/tokenscope.bpf.c \
		$(wildcard bpf/lib/*.h) $(wildcard include/*.h) vmlinux/$(ARCH)/vmlinux.h | $(OUTPUT)
	$(call msg,BPF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) $(BPF_EXTRA) -c $< -o $@.tmp
	$(Q)$(LLVM_STRIP) -g $@.tmp -o $@
	$(Q)rm -f $@.tmp

$(OUTPUT)/tokenscope.skel.h $(OUTPUT)/bench/tokenscope.skel.h $(OUTPUT)/legacy/tokenscope.skel.h: \
		%.skel.h: %.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name tokenscope_bpf > $@

# The same programs for kernels before 5.12, which refuse any atomic instruction but add
# (bpf/lib/common.bpf.h: TS_LEGACY). The loader opens the skeleton with this object's bytes in
# its place there (kernel.c): the two must have the same maps, programs and global variables,
# which the build checks by their skeletons' declarations.
$(OUTPUT)/legacy/tokenscope.bpf.o: BPF_EXTRA := -DTS_LEGACY
$(OUTPUT)/legacy/layout.ok: $(OUTPUT)/tokenscope.skel.h $(OUTPUT)/legacy/tokenscope.skel.h
	$(call msg,CHECK,$@)
	$(Q)for h in $^; do sed -n '/^struct tokenscope_bpf {/,/^};/p' $$h; done | \
		awk '/^struct tokenscope_bpf {/ { n++ } { print > "$(@D)/layout." n }'
	$(Q)cmp -s $(@D)/layout.1 $(@D)/layout.2 || { echo "the legacy object's skeleton differs \
		from the default one's: diff $(@D)/layout.1 $(@D)/layout.2"; exit 1; }
	$(Q)touch $@

# kernel.c alone includes the skeleton (kernel.h: the loader's kernel side); kernel_legacy.c
# the legacy object's bytes.
$(OUTPUT)/user/loader/kernel.o: $(OUTPUT)/tokenscope.skel.h
$(OUTPUT)/user/loader/kernel_legacy.o: $(OUTPUT)/legacy/tokenscope.skel.h $(OUTPUT)/legacy/layout.ok

# The HTML report's page (user/sinks/html_page.html: its CSS and script) as a C string literal,
# which html.c alone includes: the page is edited as a page, and built into the binary.
$(OUTPUT)/html_page.h: user/sinks/html_page.html | $(OUTPUT)
	$(call msg,GEN,$@)
	$(Q)sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< >$@.tmp
	$(Q)mv $@.tmp $@
$(OUTPUT)/user/sinks/html.o $(OUTPUT)/san/sinks/html.o $(OUTPUT)/fuzz/obj/sinks/html.o: \
	$(OUTPUT)/html_page.h

$(OUTPUT)/user/%.o: user/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(USER_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(OUTPUT)/tokenscope: $(LIB_OBJS) $(TOOL_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

# For make bench alone: tokenscope with syscall programs that return at once (TS_BENCH_NOOP), whose
# run times are the hooks' own cost, and sysloop, a bystander's syscalls timed.
BENCH_TOOLS := $(OUTPUT)/bench/tokenscope-noop $(OUTPUT)/sysloop
$(OUTPUT)/bench/tokenscope.bpf.o: BPF_EXTRA := -DTS_BENCH_NOOP

$(OUTPUT)/bench/kernel.o: user/loader/kernel.c $(OUTPUT)/bench/tokenscope.skel.h
	$(call msg,CC,$@)
	$(Q)$(CC) -I$(OUTPUT)/bench $(USER_CFLAGS) -c $< -o $@

$(OUTPUT)/bench/tokenscope-noop: $(LIB_OBJS) $(filter-out %/kernel.o,$(TOOL_OBJS)) \
		$(OUTPUT)/bench/kernel.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

$(OUTPUT)/sysloop: tests/bench/sysloop.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 $< -o $@

# GnuTLS's declarations, defined without using every argument.
$(OUTPUT)/static/gnutls_none.o: static/gnutls_none.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(WARN) -Wno-unused-parameter -std=gnu11 -c $< -o $@

$(STATIC_BIN): $(LIB_OBJS) $(TOOL_OBJS) $(OUTPUT)/static/gnutls_none.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ $(STATIC_LDLIBS) -o $@

$(OUTPUT)/refserver: tests/refserver.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -pthread $< -o $@ -lcjson -lm -ldl

$(OUTPUT)/gtclient: tests/gtclient.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -pthread $< -o $@ -lcjson -lm -lnghttp2 -lssl -lcrypto

$(OUTPUT)/writeloop: tests/writeloop.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 $< -o $@ -lssl -lcrypto

# Loads the BPF programs itself (the skeleton) to measure passive discovery for the bench.
$(OUTPUT)/peekcost: tests/peekcost.c $(OUTPUT)/tokenscope.skel.h | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(USER_CFLAGS) $< -o $@ $(LDLIBS)

$(OUTPUT)/san/%.o: user/%.c
	$(call msg,CC-SAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(USER_CFLAGS) $(SAN_FLAGS) $(DEPFLAGS) -c $< -o $@

# libFuzzer targets (tests/fuzz/, run by scripts/fuzz.sh): clang, and the pipeline built again
# with the fuzzer's coverage instrumentation, so it can steer into the parsers.
FUZZ_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_OBJS := $(patsubst user/%.c,$(OUTPUT)/fuzz/obj/%.o,$(LIB_SRCS))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(OUTPUT)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
ifeq ($(HAVE_CUPTI),)
FUZZ_BINS := $(filter-out $(OUTPUT)/fuzz/fuzz_cupti,$(FUZZ_BINS))
endif
.SECONDARY: $(FUZZ_OBJS)
.PHONY: fuzz-build
fuzz-build: $(FUZZ_BINS)

$(OUTPUT)/fuzz/obj:
	$(Q)mkdir -p $@

$(OUTPUT)/fuzz/obj/%.o: user/%.c
	$(call msg,CC-FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(USER_CFLAGS) $(FUZZ_FLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(OUTPUT)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) tests/unit/json_compare.h $(FUZZ_OBJS)
	$(call msg,FUZZ,$@)
	$(Q)$(CLANG) $(USER_CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer -Itests/fuzz $< $(FUZZ_OBJS) \
		-o $@ -lnghttp2 -lcjson -lm -lmicrohttpd -lpthread

# The injection library's coalescer and record reader, instrumented: none of the pipeline.
$(OUTPUT)/fuzz/fuzz_cupti: tests/fuzz/fuzz_cupti.c tests/fuzz/fuzz.h $(CUPTI_TESTED) \
		$(wildcard cupti/*.h) include/devtime_abi.h | $(OUTPUT)/fuzz/obj
	$(call msg,FUZZ,$@)
	$(Q)$(CLANG) $(CUPTI_CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer -Itests/fuzz $< $(CUPTI_TESTED) \
		-o $@

$(OUTPUT)/libtokenscope_cupti.so: $(CUPTI_SRCS) $(wildcard cupti/*.h) include/devtime_abi.h | $(OUTPUT)
	$(call msg,CC-LIB,$@)
	$(Q)test -f /usr/include/$(shell $(CC) -print-multiarch)/sys/sdt.h -o -f /usr/include/sys/sdt.h || \
		{ echo "sys/sdt.h is missing: install systemtap-sdt-dev (scripts/deps.sh)" >&2; exit 1; }
	$(Q)$(CC) $(CUPTI_CFLAGS) -fPIC -shared -fvisibility=hidden $(CUPTI_SRCS) -o $@ \
		-ldl -lpthread

# A stand-in for CUPTI (tests/cuptistub.c): the injection library's tests, without a GPU.
$(OUTPUT)/standin/libcupti.so.13: tests/cuptistub.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -shared -fPIC $< -o $@ -lpthread

# Where no CUDA toolkit is installed, the CUDA tests hook this stand-in for the runtime.
$(OUTPUT)/standin/libcudart.so.13: tests/cudastub.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -shared -fPIC $< -o $@ -ldl -lpthread

# A stand-in NVML (tests/nvmlstub.c) whose devices come from TS_NVML_STUB, and one as old as a
# library without the SM clock and process queries.
$(OUTPUT)/standin/libnvidia-ml.so.1: tests/nvmlstub.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -shared -fPIC $< -o $@

$(OUTPUT)/standin/nvml-old/libnvidia-ml.so.1: tests/nvmlstub.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -DNVMLSTUB_OLD -shared -fPIC $< -o $@

# test_nvml loads both stand-ins, and the CUDA one as a library that is not NVML: those of its
# own build (a cross build's are in its own folder).
$(OUTPUT)/tests/test_nvml: $(OUTPUT)/standin/libnvidia-ml.so.1 \
	$(OUTPUT)/standin/nvml-old/libnvidia-ml.so.1 $(OUTPUT)/standin/libcudart.so.13
$(OUTPUT)/tests/test_nvml: TEST_DEFS := -DTS_STANDIN_DIR='"$(OUTPUT)/standin"'

$(OUTPUT)/cudaloop: tests/cudaloop.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 $< -o $@ -ldl

# The same with the CUDA runtime linked into the executable (CUDART_STATIC, where the toolkit
# has it).
$(OUTPUT)/cudaloop-static: tests/cudaloop.c | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -DCUDALOOP_STATIC $< -o $@ $(CUDART_STATIC) -ldl \
		-lpthread -lrt

# bpf/lib helpers compile on the host too (-Ibpf): unit tests feed them captured bytes.
$(OUTPUT)/tests/%: tests/unit/%.c tests/unit/check.h $(wildcard tests/unit/*.h) $(wildcard bpf/lib/*.h) $(SAN_OBJS) | $(OUTPUT)/tests
	$(call msg,TEST,$@)
	$(Q)$(CC) $(USER_CFLAGS) $(SAN_FLAGS) $(TEST_DEFS) -Ibpf -Itests/unit $< $(SAN_OBJS) -o $@ -lnghttp2 -lcjson -lm -lmicrohttpd

# test_arch: bpf/lib/syscalls.bpf.h and libbpf's register macros, for each architecture, checked
# against the kernel's own headers. arch_bpf.c includes a vmlinux.h, which cannot share a file
# with libc's headers: it is built once per architecture and linked in.
ARCH_TEST_OBJS := $(OUTPUT)/tests/arch_x86.o $(OUTPUT)/tests/arch_arm64.o
$(OUTPUT)/tests/arch_%.o: tests/unit/arch_bpf.c tests/unit/arch.h bpf/lib/syscalls.bpf.h \
		vmlinux/%/vmlinux.h | $(OUTPUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(WARN) -std=gnu11 -D__TARGET_ARCH_$* -DARCH_FN=arch_$*_info \
		-isystem vmlinux/$* -Ibpf -idirafter /usr/include/x86_64-linux-gnu -c $< -o $@

$(OUTPUT)/tests/test_arch: tests/unit/test_arch.c tests/unit/check.h tests/unit/arch.h \
		$(ARCH_TEST_OBJS) | $(OUTPUT)/tests
	$(call msg,TEST,$@)
	$(Q)$(CC) $(USER_CFLAGS) $(SAN_FLAGS) -Itests/unit $< $(ARCH_TEST_OBJS) -o $@

# For make bench alone (section 8): the library's record reading, timed per record kind.
$(OUTPUT)/bench/recordcost: tests/bench/recordcost.c $(CUPTI_TESTED) $(wildcard cupti/*.h) \
		include/devtime_abi.h | $(OUTPUT)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CUPTI_CFLAGS) -O2 $< $(CUPTI_TESTED) -o $@
ifneq ($(HAVE_CUPTI),)
BENCH_TOOLS += $(OUTPUT)/bench/recordcost
endif

# The pattern above links user/ objects; this one the injection library's coalescer and
# record reader.
$(OUTPUT)/tests/test_cupti_runs: tests/unit/test_cupti_runs.c tests/unit/check.h $(CUPTI_TESTED) \
		$(wildcard cupti/*.h) include/devtime_abi.h | $(OUTPUT)/tests
	$(call msg,TEST,$@)
	$(Q)$(CC) $(CUPTI_CFLAGS) $(SAN_FLAGS) -Itests/unit $< $(CUPTI_TESTED) -o $@

BPF_TEST_LOADER := $(OUTPUT)/user/loader/uprobes.o $(OUTPUT)/user/loader/elf.o \
	$(OUTPUT)/user/loader/tracefs.o \
	$(OUTPUT)/user/loader/kernel.o $(OUTPUT)/user/loader/kernel_legacy.o \
	$(OUTPUT)/user/loader/features.o
$(OUTPUT)/tests/%: tests/bpf/%.c tests/unit/check.h $(LIB_OBJS) $(BPF_TEST_LOADER) \
		$(OUTPUT)/tokenscope.skel.h | $(OUTPUT)/tests
	$(call msg,TEST,$@)
	$(Q)$(CC) $(USER_CFLAGS) $(TEST_DEFS) -Itests/unit $< $(LIB_OBJS) $(BPF_TEST_LOADER) -o $@ \
		$(LDLIBS) -ldl -lssl -lcrypto

# Both ends of a Go crypto/tls connection, for test_bpf_gotls: built for the build's
# architecture (static, so the arm64 machine of tests/arm64/run_vm.sh needs nothing more).
GOARCH_OF_x86 := amd64
GOARCH_OF_arm64 := arm64
$(OUTPUT)/gotlspair: tests/gotlspair.go | $(OUTPUT)
	$(call msg,GO,$@)
	$(Q)GOARCH=$(GOARCH_OF_$(ARCH)) CGO_ENABLED=0 go build -o $@ $<

$(OUTPUT)/tests/test_bpf_gotls: $(OUTPUT)/gotlspair
$(OUTPUT)/tests/test_bpf_gotls: TEST_DEFS := -DTS_GOTLSPAIR='"$(OUTPUT)/gotlspair"'

# The Debian packages of a purpose (scripts/deps.sh says what each needs): make deps installs
# them all, each target below only those of its own work.
deps:
	$(Q)scripts/deps.sh
deps-demo:
	$(Q)scripts/deps.sh demo
deps-test:
	$(Q)scripts/deps.sh test
deps-check:
	$(Q)scripts/deps.sh test cross browser
deps-bench:
	$(Q)scripts/deps.sh bench
deps-image:
	$(Q)scripts/deps.sh image

# The static binary too: its bare-root test (tests/static/) is part of the run.
check: deps-check
	$(Q)$(MAKE) --no-print-directory STATIC=1 all
	$(Q)$(MAKE) --no-print-directory cross
	$(Q)tests/run.sh

# What scripts/demo.sh runs, and nothing more: no tests, no sanitizer or fuzzer builds, no
# stand-in libraries.
DEMO_BINS := $(OUTPUT)/tokenscope $(OUTPUT)/refserver $(OUTPUT)/gtclient

demo: deps-demo
	$(Q)$(MAKE) --no-print-directory $(DEMO_BINS)
	$(Q)scripts/demo.sh

bench: deps-bench
	$(Q)$(MAKE) --no-print-directory all $(BENCH_TOOLS)
	$(Q)scripts/bench.sh

# Every libFuzzer target in tests/fuzz/ for FUZZ_SECONDS each (docs/security.md).
fuzz: deps-test
	$(Q)scripts/fuzz.sh

# Hostile clients against the traced reference server (docs/security.md).
stress: deps-test
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/stress/run_stress.sh

# The OCI image, FROM scratch, built offline with umoci and skopeo (scripts/image.sh): the
# default build and exactly the shared libraries it loads, so that the node agent sends OTLP
# and reads the driver's NVML. $(IMAGE_DIR)/oci, an OCI image layout tagged $(VERSION), and
# $(IMAGE_ARCHIVE), the same as an oci-archive named tokenscope:$(VERSION), to push with
# `skopeo copy oci-archive:$(IMAGE_ARCHIVE) docker://REGISTRY/tokenscope:$(VERSION)`.
VERSION := $(shell sed -n 's/^\#define TOKENSCOPE_VERSION "\(.*\)"/\1/p' user/lib/version.h)
IMAGE_DIR := $(OUTPUT)/image
IMAGE_ARCHIVE := $(IMAGE_DIR)/tokenscope-$(VERSION).oci.tar

image: deps-image
	$(Q)$(MAKE) --no-print-directory $(IMAGE_ARCHIVE)

$(IMAGE_ARCHIVE): $(OUTPUT)/tokenscope scripts/image.sh
	$(call msg,IMAGE,$@)
	$(Q)scripts/image.sh $(OUTPUT)/tokenscope $(VERSION) $(IMAGE_DIR)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary, the CUPTI library where it was
# built (in lib/tokenscope/, where the binary looks for it), and the manual page made from the
# binary's help (scripts/manpage.sh).
PREFIX ?= /usr/local
MAN_PAGE := $(OUTPUT)/tokenscope.1

$(MAN_PAGE): $(OUTPUT)/tokenscope scripts/manpage.sh
	$(call msg,MAN,$@)
	$(Q)scripts/manpage.sh $(OUTPUT)/tokenscope > $@

install: $(OUTPUT)/tokenscope $(MAN_PAGE) $(if $(HAVE_CUPTI),$(OUTPUT)/libtokenscope_cupti.so)
	install -D -m 0755 $(OUTPUT)/tokenscope $(DESTDIR)$(PREFIX)/bin/tokenscope
	install -D -m 0644 $(MAN_PAGE) $(DESTDIR)$(PREFIX)/share/man/man1/tokenscope.1
	$(if $(HAVE_CUPTI),install -D -m 0644 $(OUTPUT)/libtokenscope_cupti.so \
		$(DESTDIR)$(PREFIX)/lib/tokenscope/libtokenscope_cupti.so)

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/tokenscope $(DESTDIR)$(PREFIX)/share/man/man1/tokenscope.1 \
		$(DESTDIR)$(PREFIX)/lib/tokenscope/libtokenscope_cupti.so
	-rmdir $(DESTDIR)$(PREFIX)/lib/tokenscope 2>/dev/null

vmlinux:
	$(Q)scripts/gen-vmlinux.sh

format:
	$(Q)clang-format -i bpf/*.c include/*.h $(filter-out user/record/record.c,$(wildcard user/*/*.[ch])) tests/*.c tests/unit/*.[ch] tests/bpf/*.c static/*.c

clean:
	$(Q)rm -rf $(OUTPUT)

# The headers each object included when it was last built (none before the first build, when
# everything is built anyway).
-include $(wildcard $(OUTPUT)/user/*/*.d $(OUTPUT)/san/*/*.d $(OUTPUT)/fuzz/obj/*/*.d)

# For scripts that build the pipeline on their own (tests/otlp/run_live.sh): what they leave out.
.PHONY: print-loader-srcs
print-loader-srcs:
	@echo $(LOADER_SRCS)
