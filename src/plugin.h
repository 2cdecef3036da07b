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

/*
 * dlopen path and check the exported IDEMD_HANDLER_SYMBOL: present, abi_major
 * equal to ours, abi_minor not newer, name and handle() set. Returns 0 and a
 * new plugin_t in *out (free with plugin_free), or -1 with a message naming
 * the file in err. Logs nothing.
 */
int plugin_load(const char *path, plugin_t **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* dlclose and free; NULL is fine. */
void plugin_free(plugin_t *p);

/* The host services table handed to init(); static, never freed. */
const idemd_host_t *plugin_host(void);

/* What the host's publish() calls in this process (the worker's outbox); NULL: refuse. */
typedef int (*plugin_publish_fn)(void *ctx, struct st_mysql *db, const idemd_message_t *source,
                                 const idemd_publish_t *p, char *err, size_t errlen);
void plugin_set_publisher(plugin_publish_fn fn, void *ctx);

#endif
