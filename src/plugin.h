/* plugin.h: loading handler plugins (dlopen) and checking their ABI; the host services table. */
#ifndef IDEMD_PLUGIN_H
#define IDEMD_PLUGIN_H

#include <stddef.h>

#include "../include/idemd/handler.h"

typedef struct plugin {
    char *path;
    void *dl;
    const idemd_handler_t *handler; /* points into the loaded object */
} plugin_t;

/* How long plugin_check waits for the child that loads a plugin. */
#define PLUGIN_CHECK_TIMEOUT_MS 10000

/*
 * dlopen path and check the exported IDEMD_HANDLER_SYMBOL: present, abi_major
 * equal to ours, abi_minor not newer, name and handle() set. First the file
 * (symlinks resolved) and every directory above it must be owned by root or
 * the user idemd runs as (euid) and writable by their owner only (a sticky
 * root directory like /tmp is accepted); it is checked on the descriptor
 * that is then loaded (/proc/self/fd/N), so no path can be swapped between. This runs the plugin's
 * constructors in the caller. Returns 0 and a new plugin_t in *out (free with plugin_free), or -1
 * with a message naming the file in err. Logs nothing.
 */
int plugin_load(const char *path, plugin_t **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * plugin_load in a short-lived child process, so that nothing of the
 * plugin (constructors, threads, changed globals) reaches the caller: the
 * supervisor never runs plugin code. Waits at most PLUGIN_CHECK_TIMEOUT_MS.
 * Returns 0 and the handler's name in name (namelen bytes), or -1 with the
 * child's refusal, or why the child died, naming the file in err. Logs
 * nothing.
 */
int plugin_check(const char *path, char *name, size_t namelen, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* dlclose and free; NULL is fine. */
void plugin_free(plugin_t *p);

/* The host services table handed to init(); static, never freed. */
const idemd_host_t *plugin_host(void);

/* plugin_host.c: host->value_check and host->body_value (ABI 1.6; handler.h says what they
 * answer). */
int plugin_host_value_check(MYSQL *db, char *why, size_t whylen);
int plugin_host_body_value(const idemd_message_t *msg, const char *path, char *out, size_t outlen,
                           char *err, size_t errlen);

/* What the host's publish() calls in this process (the worker's outbox); NULL: refuse. */
typedef int (*plugin_publish_fn)(void *ctx, MYSQL *db, const idemd_message_t *source,
                                 const idemd_publish_t *p, char *err, size_t errlen);
void plugin_set_publisher(plugin_publish_fn fn, void *ctx);

#endif
