# Makefile: builds idemd, its plugins, the test tools; runs tests and benchmarks.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib
PLUGINDIR ?= $(LIBDIR)/idemd/plugins
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share/idemd
SYSCONFDIR ?= /etc
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
UNITDIR ?= $(LIBDIR)/systemd/system

CC ?= cc
# The MySQL client API from one of two libraries, one source (docs/compat.md): MariaDB
# Connector/C (DB_CLIENT=mariadb, pkg-config libmariadb) or Oracle's libmysqlclient
# (DB_CLIENT=mysqlclient, pkg-config mysqlclient). Default: the library of the stack IDEMD_DB
# names (mysql: libmysqlclient, as the tests' harness and tests/demo use it), else whichever is
# installed, MariaDB's when both are.
ifeq ($(IDEMD_DB),mysql)
DB_CLIENT ?= mysqlclient
endif
DB_CLIENT ?= $(if $(shell pkg-config --exists libmariadb && echo y),mariadb,$(if $(shell pkg-config --exists mysqlclient && echo y),mysqlclient,mariadb))
ifeq ($(DB_CLIENT),mariadb)
DB_PKG := libmariadb
else ifeq ($(DB_CLIENT),mysqlclient)
DB_PKG := mysqlclient
else
$(error DB_CLIENT must be mariadb or mysqlclient (got '$(DB_CLIENT)'))
endif
ifeq ($(shell pkg-config --exists $(DB_PKG) && echo y),)
$(warning DB_CLIENT=$(DB_CLIENT): pkg-config finds no $(DB_PKG): install $(if $(filter mariadb,$(DB_CLIENT)),libmariadb-dev,libmysqlclient-dev) (bash .ci/deps does), or choose the other library with DB_CLIENT=mariadb|mysqlclient)
endif
PKGS := librabbitmq $(DB_PKG) libconfig libsystemd json-c libmicrohttpd libssl libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
# The shipped plugins need the database client only: they read bodies through host->body_value.
PLUGIN_LIBS := $(shell pkg-config --libs $(DB_PKG))

# A user's or packager's CFLAGS, CPPFLAGS and LDFLAGS (make CFLAGS=..., dpkg-buildflags) are
# added after the build's own flags, never in place of them: the include paths, -D_GNU_SOURCE
# and the warnings stay. CFLAGS defaults to -O2 -g.
CFLAGS ?= -O2 -g
USER_FLAGS := $(CPPFLAGS) $(CFLAGS)
override CPPFLAGS := -D_GNU_SOURCE -Iinclude $(PKG_CFLAGS) $(CPPFLAGS)
override CFLAGS := -std=gnu11 -Wall -Wextra -Werror $(CPPFLAGS) $(CFLAGS)
# Hardening (tests/integration/t_hardening.sh checks the result): stack protector and
# stack clash checks everywhere; full RELRO (read-only GOT after start); idemd is a PIE.
# FORTIFY needs an optimising build and is left to ASan in SANITIZE=1 builds; a packager's
# own -D_FORTIFY_SOURCE (dpkg-buildflags) is kept as it is.
override CFLAGS += -fstack-protector-strong -fstack-clash-protection
override LDFLAGS := -Wl,-z,relro,-z,now $(LDFLAGS)
B := build
ifeq ($(SANITIZE),1)
B := build-asan
override CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
override LDFLAGS += -fsanitize=address,undefined
else ifneq ($(filter -O1 -O2 -O3 -Os -Og -Ofast,$(USER_FLAGS)),)
ifeq ($(findstring _FORTIFY_SOURCE,$(USER_FLAGS)),)
override CFLAGS += -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2
endif
endif
LDLIBS += $(PKG_LIBS) -ldl -lm -pthread

SRCS := $(wildcard src/*.c)
# idemctl is a second program: its own files (main, one per command family) and the modules it
# shares with the daemon.
CTL_OWN := idemctl ctl_common ctl_out ctl_dlq ctl_batch ctl_letter ctl_pace ctl_key ctl_order ctl_outbox ctl_records ctl_replay ctl_status ctl_try
CTL_MODULES := $(CTL_OWN) clock conf db delivery log mq mq_declare mq_pub order pubround copies version
# try runs a queue's handler the way a worker does: the worker's transaction files and what they
# stand on (worker_try.c is the entry point; worker.c, the process and its loop, is not among them).
CTL_MODULES += worker_try worker_base worker_handler worker_txn worker_order order_batch worker_ops worker_conn \
	worker_sweep step txn txn_result txn_state batch life settle guard outbox outbox_io plugin \
	trace metrics stall chores sqlh json_body plugin_host
# conf is one module in several files: the table (conf.c) and the code that walks it.
CONF_SRCS := src/conf.c src/conf_file.c src/conf_text.c src/conf_load.c src/conf_check.c src/conf_check_conn.c src/conf_show.c \
	src/conf_reload.c src/conf_sqlh.c
# conf refuses a config file other users may change with trust.c, as plugin.c refuses a plugin;
# it checks the SQL handler's sources with sqlh_param.c (which reads bodies with json_body.c) and
# its statements' kinds with sqlh_kind.c.
CONF_DEPS := src/trust.c src/sqlh_param.c src/json_body.c src/sqlh_kind.c
CTL_MODULES += $(filter-out conf,$(patsubst src/%.c,%,$(CONF_SRCS) $(CONF_DEPS)))
# db is one module in six files: connecting (db_open.c), the open connection (db.c), whether a
# server takes idemd's writes (db_gr.c: read-only, a Group Replication primary), the SQL on
# idemd's tables (db_sql.c), idemd's transaction (db_txn.c) and a statement's value-changing
# warnings (db_warn.c). db_open.c calls the others; none calls it, nor db_gr.c and db_txn.c db.c's
# callers, so they draw no circle.
CTL_MODULES += db_open db_gr db_sql db_txn db_warn
OBJS := $(patsubst src/%.c,$(B)/obj/%.o,$(filter-out $(CTL_OWN:%=src/%.c),$(SRCS)))
CTL_OBJS := $(CTL_MODULES:%=$(B)/obj/%.o)
# The test build: the same sources with -DIDEMD_TESTING, which compiles in the switches that put
# old behaviour back and the IDEMD_TEST_* hooks (docs/testing.md). Only the integration cases and
# chaos runs that set IDEMD_TEST_* run these binaries; idemd and idemctl have none of it.
TEST_OBJS := $(OBJS:$(B)/obj/%=$(B)/obj-test/%)
TEST_CTL_OBJS := $(CTL_OBJS:$(B)/obj/%=$(B)/obj-test/%)
PLUGINS := $(patsubst src/plugins/%.c,$(B)/plugins/%.so,$(wildcard src/plugins/*.c))
# Test plugins whose descriptors differ in one field are one source, tests/plugins/descriptor.c,
# built once per variant with the flags in TEST_VARIANT_<name>.
TEST_VARIANTS := minor0 newer_minor wrong_abi no_name no_handle no_symbol calls_log_msg
TEST_VARIANT_minor0 := -DTP_ABI_MAJOR=1 -DTP_ABI_MINOR=0
TEST_VARIANT_newer_minor := -DTP_ABI_MINOR='(IDEMD_HANDLER_ABI_MINOR + 1)'
TEST_VARIANT_wrong_abi := -DTP_ABI_MAJOR=99 -DTP_ABI_MINOR=0
TEST_VARIANT_no_name := -DTP_EMPTY_NAME
TEST_VARIANT_no_handle := -DTP_NO_HANDLE
TEST_VARIANT_no_symbol := -DTP_NO_HANDLE -DTP_SYMBOL=idemd_handler_v1
TEST_VARIANT_calls_log_msg := -DTP_CALLS_LOG_MSG
TEST_VARIANT_SOS := $(TEST_VARIANTS:%=$(B)/tests/plugins/%.so)
TEST_PLUGINS := $(patsubst tests/plugins/%.c,$(B)/tests/plugins/%.so,$(filter-out tests/plugins/descriptor.c,$(wildcard tests/plugins/*.c))) \
	$(TEST_VARIANT_SOS)
TEST_TOOLS := $(patsubst tests/tools/%.c,$(B)/tests/tools/%,$(wildcard tests/tools/*.c))
UNIT_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(wildcard tests/unit/test_*.c))

.PHONY: all check-build test unit sim readme integration bench bench-curves chaos chaos-high chaos-matrix chaos-order order-deadlocks cluster-chaos memcheck demo install uninstall clean format format-check \
	fuzz fuzz-build fuzz-short \
	install-bin install-plugins install-dev install-units install-data install-man install-list man-check

all: $(B)/idemd $(B)/idemctl $(PLUGINS)

# bench/pace paces the chaos runs' publishers (tests/chaos/run).
check-build: all $(B)/idemd-test $(B)/idemctl-test $(TEST_PLUGINS) $(TEST_TOOLS) $(UNIT_TESTS) $(B)/bench/pace $(B)/tests/sim/sim

$(B)/obj/%.o: src/%.c $(wildcard src/*.h) include/idemd/handler.h | $(B)/obj
	$(CC) $(CFLAGS) -fPIE -c -o $@ $<

$(B)/idemd: override LDFLAGS += -pie
$(B)/idemd: $(OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/idemctl: $(CTL_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/obj-test/%.o: src/%.c $(wildcard src/*.h) include/idemd/handler.h | $(B)/obj-test
	$(CC) $(CFLAGS) -DIDEMD_TESTING -fPIE -c -o $@ $<

$(B)/idemd-test: override LDFLAGS += -pie
$(B)/idemd-test: $(TEST_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/idemctl-test: $(TEST_CTL_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/plugins/%.so: src/plugins/%.c include/idemd/handler.h | $(B)/plugins
	$(CC) $(CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(PLUGIN_LIBS)

$(B)/tests/plugins/%.so: tests/plugins/%.c include/idemd/handler.h | $(B)/tests/plugins
	$(CC) $(CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(PKG_LIBS)

$(TEST_VARIANT_SOS): $(B)/tests/plugins/%.so: tests/plugins/descriptor.c include/idemd/handler.h Makefile | $(B)/tests/plugins
	$(CC) $(CFLAGS) -DTP_VARIANT='"$*"' $(TEST_VARIANT_$*) -fPIC -shared $(LDFLAGS) -o $@ $< $(PKG_LIBS)

$(B)/tests/tools/%: tests/tools/%.c | $(B)/tests/tools
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# A unit test links only the module under test (and logging, and the clock).
$(B)/tests/unit/test_%: tests/unit/test_%.c src/%.c src/log.c src/clock.c tests/unit/tap.h $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc -DIDEMD_TESTING -DIDEMD_TEST_BUILD='"$(B)"' $(LDFLAGS) -o $@ $< src/$*.c src/log.c src/clock.c $(LDLIBS)

# test_conf links all of conf's files.
$(B)/tests/unit/test_conf: tests/unit/test_conf.c $(CONF_SRCS) $(CONF_DEPS) src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc -DIDEMD_TEST_BUILD='"$(B)"' $(LDFLAGS) -o $@ $< $(CONF_SRCS) $(CONF_DEPS) src/log.c src/clock.c $(LDLIBS)

# The plugin loader checks who may change a plugin with trust.c; its host services (plugin_host.c)
# read bodies with json_body.c and warnings with db_warn.c.
TEST_PLUGIN_SRCS := src/plugin.c src/plugin_host.c src/json_body.c src/db_warn.c src/trust.c src/clock.c src/log.c
$(B)/tests/unit/test_plugin: tests/unit/test_plugin.c $(TEST_PLUGIN_SRCS) tests/unit/tap.h $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc -DIDEMD_TEST_BUILD='"$(B)"' $(LDFLAGS) -o $@ $< $(TEST_PLUGIN_SRCS) $(LDLIBS)

# outbox.c reaches the database and the broker only through its ops tables (outbox_io.c is the
# real side) and signs dead letters with copies.c.
$(B)/tests/unit/test_outbox: tests/unit/test_outbox.c tests/unit/tap.h src/outbox.c src/copies.c src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/outbox.c src/copies.c src/log.c src/clock.c $(LDLIBS)

# test_copies_sig tests copies.c too (its signatures), beside test_copies (its headers).
$(B)/tests/unit/test_copies_sig: tests/unit/test_copies_sig.c tests/unit/tap.h src/copies.c src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/copies.c src/log.c src/clock.c $(LDLIBS)

# The transaction protocol is txn.c, what results do to it (txn_result.c) and its message states
# (txn_state.c); it prints ids (delivery.c).
$(B)/tests/unit/test_txn: tests/unit/test_txn.c tests/unit/tap.h src/txn.c src/txn_result.c src/txn_state.c src/delivery.c src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc -DIDEMD_TESTING $(LDFLAGS) -o $@ $< src/txn.c src/txn_result.c src/txn_state.c src/delivery.c src/log.c src/clock.c $(LDLIBS)

# The crash guard moves txn_msg_t states (txn_state.c) and prints ids (delivery.c); its database
# is a fake in the test.
$(B)/tests/unit/test_guard: tests/unit/test_guard.c tests/unit/tap.h src/guard.c src/txn_state.c src/delivery.c src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/guard.c src/txn_state.c src/delivery.c src/log.c src/clock.c $(LDLIBS)

# test_order: the key of a delivery (order.c reads headers with delivery.c; the two db.c calls
# of its SQL are stubs in the test: the key rows are tested against real servers, t_order_*).
$(B)/tests/unit/test_order: tests/unit/test_order.c tests/unit/tap.h src/order.c src/delivery.c src/json_body.c src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/order.c src/delivery.c src/json_body.c src/log.c src/clock.c $(LDLIBS)

# test_sqlh_param: the parameter sources read the body with json_body.c.
$(B)/tests/unit/test_sqlh_param: tests/unit/test_sqlh_param.c tests/unit/tap.h src/sqlh_param.c src/json_body.c src/log.c src/clock.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc -DIDEMD_TESTING $(LDFLAGS) -o $@ $< src/sqlh_param.c src/json_body.c src/log.c src/clock.c $(LDLIBS)

# test_batch: collecting (batch.c) and settling (settle.c) a batch together, over fake ports; what
# they link: the delivery's life and states, copies, the crash guard, the publish round, traces.
TEST_BATCH_SRCS := src/batch.c src/settle.c src/life.c src/txn_state.c src/guard.c src/pubround.c \
	src/copies.c src/delivery.c src/trace.c src/log.c src/clock.c
$(B)/tests/unit/test_batch: tests/unit/test_batch.c tests/unit/tap.h $(TEST_BATCH_SRCS) $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< $(TEST_BATCH_SRCS) $(LDLIBS)

# test_framecount tests bench/framecount.h, the frame counter of bench/delayproxy.c (header-only).
$(B)/tests/unit/test_framecount: tests/unit/test_framecount.c bench/framecount.h tests/unit/tap.h | $(B)/tests/unit
	$(CC) $(CFLAGS) -Ibench $(LDFLAGS) -o $@ $<

# test_db tests db_classify, inline in db.h: no module to link (db.c needs the servers).
$(B)/tests/unit/test_db: tests/unit/test_db.c tests/unit/tap.h src/db.h src/conf.h | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< $(LDLIBS)

# test_log's module is log.c itself: the pattern above would link it twice.
$(B)/tests/unit/test_log: tests/unit/test_log.c tests/unit/tap.h src/log.c src/clock.c src/log.h | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/log.c src/clock.c $(LDLIBS)

$(B)/obj $(B)/obj-test $(B)/plugins $(B)/tests/plugins $(B)/tests/tools $(B)/tests/unit $(B)/tests/sim:
	mkdir -p $@

# The deterministic simulation (docs/simulation.md): the worker's own step (step.c, with the real
# txn.c, batch.c, settle.c, outbox.c) and the supervisor's (sup_step.c, on fake process ports) against a simulated broker and database, one process, no
# servers. Built with -DIDEMD_TESTING: the switches that put old bugs back. SIM_SEEDS=N for a longer search; SIM_SEED=S replays
# one seed with its trace.
SIM_SEEDS ?= 2000
SIM_SRCS := $(wildcard tests/sim/*.c) src/txn.c src/txn_result.c src/txn_state.c src/pubround.c \
	src/life.c src/batch.c src/guard.c src/settle.c src/step.c src/outbox.c src/copies.c src/delivery.c \
	src/trace.c src/log.c src/order.c src/json_body.c src/order_batch.c src/autoscale.c \
	src/sup_step.c src/sup_core.c src/sup_auto.c src/metrics.c src/clock.c
$(B)/tests/sim/sim: $(SIM_SRCS) tests/sim/sim.h $(wildcard src/*.h) | $(B)/tests/sim
	$(CC) $(CFLAGS) -Isrc -DIDEMD_TESTING $(LDFLAGS) -o $@ $(SIM_SRCS) $(LDLIBS)

# A simulated death is a longjmp: what the dead worker had allocated is not freed (a real exit
# frees it), so leak checking is off under SANITIZE=1.
# README.md's layout section, generated from each source file's first line (make test checks it).
readme:
	bash tests/readme --write

sim: $(B)/tests/sim/sim
	@export ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=0}; \
	if [ -n "$(SIM_SEED)" ]; then $< --seed $(SIM_SEED) --trace; \
	else $< --seeds $(SIM_SEEDS); fi

# Under ASan the crash tests' deliberate segfaults must still kill the worker by signal.
test: check-build
	H_BUILD=$(abspath $(B)) ASAN_OPTIONS=$${ASAN_OPTIONS:-handle_segv=0:detect_leaks=0} bash tests/run

unit: check-build
	H_BUILD=$(abspath $(B)) bash tests/run --unit-only

BENCH_TOOLS := $(patsubst bench/%.c,$(B)/bench/%,$(wildcard bench/*.c))

$(B)/bench/%: bench/%.c $(wildcard bench/*.h) | $(B)/bench
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS) -lpthread

$(B)/bench:
	mkdir -p $@

bench: check-build $(BENCH_TOOLS)
	bash bench/run

# Throughput against workers and batch_size for both handler kinds (docs/performance.md).
bench-curves: check-build $(BENCH_TOOLS)
	BENCH_CURVES=1 bash bench/run

# The chaos runs (tests/chaos/run --help); more flags through CHAOS_ARGS, e.g. CHAOS_ARGS=--short.
chaos: check-build
	H_BUILD=$(abspath $(B)) bash tests/chaos/run $(CHAOS_ARGS)

chaos-high: check-build
	H_BUILD=$(abspath $(B)) bash tests/chaos/run --high-load $(CHAOS_ARGS)

chaos-matrix: check-build
	H_BUILD=$(abspath $(B)) bash tests/chaos/run --matrix $(CHAOS_ARGS)

# Per-key ordering under retries, worker kills and a RabbitMQ restart, and its unordered control.
chaos-order: check-build
	H_BUILD=$(abspath $(B)) bash tests/chaos/run --order $(CHAOS_ARGS)

# Deadlocks between ordered queues sharing a database (tests/chaos/order_pair --help,
# docs/ordering.md); a few minutes, not part of make test.
order-deadlocks: check-build
	H_BUILD=$(abspath $(B)) bash tests/chaos/order_pair $(CHAOS_ARGS)

# The cluster chaos run (tests/chaos/cluster --help): 3-node RabbitMQ and Galera clusters, each
# node in a network namespace (needs root, iproute2, galera-4 and rsync; exits 77 without root
# or ip); not part of make test. CHAOS_ARGS=--short, --ci, --soak MIN.
cluster-chaos: check-build
	H_BUILD=$(abspath $(B)) bash tests/chaos/cluster $(CHAOS_ARGS)

memcheck: check-build
	bash tests/memcheck

demo: all $(TEST_TOOLS)
	bash tests/demo

# ---------- fuzzing ----------
# libFuzzer targets under ASan + UBSan (clang; Debian: clang, libclang-rt-dev). Each links
# only the module it tests; order_pay's target includes the plugin's source.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
F := build-fuzz
FUZZ_CFLAGS := -g -O1 -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc $(PKG_CFLAGS) \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(F)/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SRC_conf := $(CONF_SRCS) $(CONF_DEPS) src/log.c src/clock.c
FUZZ_SRC_delivery := src/delivery.c src/log.c src/clock.c
FUZZ_SRC_printable := src/delivery.c src/log.c src/clock.c
FUZZ_SRC_trace := src/trace.c
FUZZ_SRC_sqlh_param := src/sqlh_param.c src/json_body.c
# json_body's target checks the reader against jansson (libjansson-dev), an independent strict
# parser; only this target needs it (deferred: the other builds never ask pkg-config for it).
FUZZ_SRC_json_body := src/json_body.c
FUZZ_LIBS_json_body = $(shell pkg-config --cflags --libs jansson)
# order_pay reads bodies through host->body_value: the target hands it the host's own
# (plugin_host.c, which needs db_warn.c and the client library for value_check).
FUZZ_SRC_order_pay := src/plugin_host.c src/json_body.c src/db_warn.c

.SECONDEXPANSION:
$(F)/fuzz_%: tests/fuzz/fuzz_%.c $$(FUZZ_SRC_$$*) $(wildcard src/*.h) $(wildcard src/plugins/*.c) \
		include/idemd/handler.h | $(F)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_SRC_$*) $(FUZZ_LIBS_$*) $(LDLIBS)

$(F):
	mkdir -p $@

fuzz-build: $(FUZZ_BINS)

# Each target for FUZZ_SECONDS (default 60); TAP lines and "N passed, N failed".
fuzz: fuzz-build
	FUZZ_BUILD=$(F) bash tests/fuzz/run $(FUZZ_SECONDS)

# The short run CI does: 10 s each.
fuzz-short: fuzz-build
	FUZZ_BUILD=$(F) bash tests/fuzz/run 10

# ---------- install ----------
# Shipped files (units, man pages, sample config) are written for PREFIX=/usr/local and
# /etc/idemd; the installed copies get the real directories.
VERSION := $(shell grep -o 'IDEMD_VERSION "[^"]*"' src/main.c | cut -d'"' -f2)
INSTALL_SED = -e 's|/usr/local/lib/idemd/plugins|$(PLUGINDIR)|g' \
	-e 's|/usr/local/share/idemd|$(DATADIR)|g' \
	-e 's|/usr/local/include|$(INCLUDEDIR)|g' \
	-e 's|/usr/local/lib/systemd/system|$(UNITDIR)|g' \
	-e 's|/usr/local/sbin|$(BINDIR)|g' \
	-e 's|/etc/idemd|$(SYSCONFDIR)/idemd|g'
$(B)/obj/idemctl.o: override CFLAGS += -DIDEMCTL_VERSION='"$(VERSION)"'
# pkg-config: directories under PREFIX are written relative to ${prefix}.
PC_SED = -e 's|@PREFIX@|$(PREFIX)|g' \
	-e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|g' \
	-e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|g' \
	-e 's|@PLUGINDIR@|$(patsubst $(LIBDIR)/%,$${libdir}/%,$(PLUGINDIR))|g' \
	-e 's|@VERSION@|$(VERSION)|g' \
	-e 's|@ABI@|$(shell sed -n 's/^.define IDEMD_HANDLER_ABI_MAJOR //p' include/idemd/handler.h).$(shell sed -n 's/^.define IDEMD_HANDLER_ABI_MINOR //p' include/idemd/handler.h)|g'
UNITS := idemd.service idemd@.service
MANPAGES := docs/idemd.8 docs/idemctl.8 docs/idemd.conf.5

# Everything install puts down, without DESTDIR; uninstall removes exactly these, then the
# directories that only idemd uses if they are empty.
INSTALLED_FILES = $(BINDIR)/idemd $(BINDIR)/idemctl \
	$(patsubst $(B)/plugins/%,$(PLUGINDIR)/%,$(PLUGINS)) \
	$(INCLUDEDIR)/idemd/handler.h $(PKGCONFIGDIR)/idemd.pc \
	$(addprefix $(UNITDIR)/,$(UNITS)) \
	$(SYSCONFDIR)/idemd/idemd.conf.example \
	$(patsubst sql/%,$(DATADIR)/sql/%,$(wildcard sql/*.sql)) \
	$(DATADIR)/idemd-alerts.yml $(DATADIR)/idemd-dashboard.json \
	$(MANDIR)/man8/idemd.8 $(MANDIR)/man8/idemctl.8 $(MANDIR)/man5/idemd.conf.5
INSTALLED_DIRS = $(PLUGINDIR) $(LIBDIR)/idemd $(INCLUDEDIR)/idemd $(DATADIR)/sql $(DATADIR) \
	$(SYSCONFDIR)/idemd

install: all install-bin install-plugins install-dev install-units install-data install-man

install-bin: $(B)/idemd $(B)/idemctl
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(B)/idemd $(DESTDIR)$(BINDIR)/idemd
	install -m 0755 $(B)/idemctl $(DESTDIR)$(BINDIR)/idemctl

install-plugins: $(PLUGINS)
	install -d $(DESTDIR)$(PLUGINDIR)
	install -m 0755 $(PLUGINS) $(DESTDIR)$(PLUGINDIR)/

install-dev: include/idemd/handler.h include/idemd/idemd.pc.in
	install -d $(DESTDIR)$(INCLUDEDIR)/idemd $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0644 include/idemd/handler.h $(DESTDIR)$(INCLUDEDIR)/idemd/handler.h
	sed $(PC_SED) include/idemd/idemd.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/idemd.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/idemd.pc

install-units: $(addprefix systemd/,$(UNITS))
	install -d $(DESTDIR)$(UNITDIR)
	for u in $(UNITS); do \
		sed $(INSTALL_SED) systemd/$$u >$(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done

install-data: conf/idemd.conf $(wildcard sql/*.sql) conf/prometheus/idemd-alerts.yml conf/grafana/idemd-dashboard.json
	install -d $(DESTDIR)$(DATADIR)/sql $(DESTDIR)$(SYSCONFDIR)/idemd
	install -m 0644 sql/*.sql $(DESTDIR)$(DATADIR)/sql/
	install -m 0644 conf/prometheus/idemd-alerts.yml conf/grafana/idemd-dashboard.json $(DESTDIR)$(DATADIR)/
	sed $(INSTALL_SED) conf/idemd.conf >$(DESTDIR)$(SYSCONFDIR)/idemd/idemd.conf.example
	chmod 0640 $(DESTDIR)$(SYSCONFDIR)/idemd/idemd.conf.example

install-man: $(MANPAGES)
	install -d $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man5
	sed $(INSTALL_SED) docs/idemd.8 >$(DESTDIR)$(MANDIR)/man8/idemd.8
	sed $(INSTALL_SED) docs/idemctl.8 >$(DESTDIR)$(MANDIR)/man8/idemctl.8
	sed $(INSTALL_SED) docs/idemd.conf.5 >$(DESTDIR)$(MANDIR)/man5/idemd.conf.5
	chmod 0644 $(DESTDIR)$(MANDIR)/man8/idemd.8 $(DESTDIR)$(MANDIR)/man8/idemctl.8 \
		$(DESTDIR)$(MANDIR)/man5/idemd.conf.5

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED_FILES))
	-rmdir $(addprefix $(DESTDIR),$(INSTALLED_DIRS)) 2>/dev/null || true

# List what install puts down (one path a line, without DESTDIR).
install-list:
	@printf '%s\n' $(INSTALLED_FILES)

# The man pages render without a groff warning.
man-check: $(MANPAGES)
	@for m in $(MANPAGES); do \
		out=$$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z $$m 2>&1) || exit 1; \
		if [ -n "$$out" ]; then echo "$$m:"; echo "$$out"; exit 1; fi; \
	done; echo "man pages OK: $(MANPAGES)"

clean:
	rm -rf $(B) $(F)

FORMAT_FILES := $(wildcard src/*.c src/*.h src/plugins/*.c include/idemd/*.h tests/unit/*.c tests/unit/*.h tests/sim/*.c tests/sim/*.h tests/plugins/*.c tests/tools/*.c tests/fuzz/*.c bench/*.c bench/*.h)
# The layout is clang-format 14's (Debian 12) with .clang-format: newer versions lay out some
# constructs differently, so format-check uses clang-format-14 where it is installed, and only
# says it skipped where another version is all there is (Debian 13 has 19).
FORMAT_REF := 14
CLANG_FORMAT ?= $(shell for c in clang-format-$(FORMAT_REF) clang-format; do \
	v=$$($$c --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p'); \
	if [ "$$v" = $(FORMAT_REF) ]; then echo $$c; break; fi; done)
format:
	@[ -n "$(CLANG_FORMAT)" ] || { echo "format: needs clang-format $(FORMAT_REF) (Debian 12: clang-format)" >&2; exit 1; }
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

format-check:
	@if [ -z "$(CLANG_FORMAT)" ]; then \
		echo "format-check: skipped: clang-format $(FORMAT_REF) is not installed (the layout is that version's)"; \
	else $(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES) && echo "format-check: OK ($(CLANG_FORMAT))"; fi
