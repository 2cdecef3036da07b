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
PKGS := librabbitmq libmariadb libconfig libsystemd json-c
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))

CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude $(PKG_CFLAGS)
ifeq ($(SANITIZE),1)
CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
LDLIBS += $(PKG_LIBS) -ldl -lm

B := build
SRCS := $(wildcard src/*.c)
OBJS := $(SRCS:src/%.c=$(B)/obj/%.o)
PLUGINS := $(patsubst src/plugins/%.c,$(B)/plugins/%.so,$(wildcard src/plugins/*.c))
TEST_PLUGINS := $(patsubst tests/plugins/%.c,$(B)/tests/plugins/%.so,$(wildcard tests/plugins/*.c))
TEST_TOOLS := $(patsubst tests/tools/%.c,$(B)/tests/tools/%,$(wildcard tests/tools/*.c))
UNIT_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(wildcard tests/unit/test_*.c))

.PHONY: all check-build test unit integration bench chaos demo install uninstall clean format format-check

all: $(B)/idemd $(PLUGINS)

check-build: all $(TEST_PLUGINS) $(TEST_TOOLS) $(UNIT_TESTS)

$(B)/obj/%.o: src/%.c $(wildcard src/*.h) include/idemd/handler.h | $(B)/obj
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/idemd: $(OBJS)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

$(B)/plugins/%.so: src/plugins/%.c include/idemd/handler.h | $(B)/plugins
	$(CC) $(CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(PKG_LIBS)

$(B)/tests/plugins/%.so: tests/plugins/%.c include/idemd/handler.h | $(B)/tests/plugins
	$(CC) $(CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(PKG_LIBS)

$(B)/tests/tools/%: tests/tools/%.c | $(B)/tests/tools
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# A unit test links only the module under test (and logging).
$(B)/tests/unit/test_%: tests/unit/test_%.c src/%.c src/log.c $(wildcard src/*.h) | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/$*.c src/log.c $(LDLIBS)

# test_log's module is log.c itself: the pattern above would link it twice.
$(B)/tests/unit/test_log: tests/unit/test_log.c src/log.c src/log.h | $(B)/tests/unit
	$(CC) $(CFLAGS) -Isrc $(LDFLAGS) -o $@ $< src/log.c $(LDLIBS)

$(B)/obj $(B)/plugins $(B)/tests/plugins $(B)/tests/tools $(B)/tests/unit:
	mkdir -p $@

test: check-build
	bash tests/run

unit: check-build
	bash tests/run --unit-only

bench: check-build
	bash bench/run

chaos: check-build
	bash tests/chaos/run

demo: all $(TEST_TOOLS)
	bash tests/demo

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(INCLUDEDIR)/idemd \
		$(DESTDIR)$(DATADIR)/sql $(DESTDIR)$(SYSCONFDIR)/idemd
	install -m 0755 $(B)/idemd $(DESTDIR)$(BINDIR)/idemd
	install -m 0755 $(PLUGINS) $(DESTDIR)$(PLUGINDIR)/
	install -m 0644 include/idemd/handler.h $(DESTDIR)$(INCLUDEDIR)/idemd/handler.h
	install -m 0644 sql/*.sql $(DESTDIR)$(DATADIR)/sql/
	install -m 0640 conf/idemd.conf $(DESTDIR)$(SYSCONFDIR)/idemd/idemd.conf.example

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/idemd $(DESTDIR)$(INCLUDEDIR)/idemd/handler.h
	rm -f $(patsubst $(B)/plugins/%,$(DESTDIR)$(PLUGINDIR)/%,$(PLUGINS))
	rm -rf $(DESTDIR)$(DATADIR)
	rm -f $(DESTDIR)$(SYSCONFDIR)/idemd/idemd.conf.example
	-rmdir $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(LIBDIR)/idemd $(DESTDIR)$(INCLUDEDIR)/idemd $(DESTDIR)$(SYSCONFDIR)/idemd 2>/dev/null

clean:
	rm -rf $(B)

FORMAT_FILES := $(wildcard src/*.c src/*.h src/plugins/*.c include/idemd/*.h tests/unit/*.c tests/plugins/*.c tests/tools/*.c)
format:
	clang-format -i $(FORMAT_FILES)

format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)
