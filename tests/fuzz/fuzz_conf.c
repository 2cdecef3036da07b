/* fuzz_conf.c: libFuzzer target: the config loader and checker (conf_load, conf_dump, the reload
 * comparisons, the risk notes) on arbitrary file contents. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"

/* A private directory for the file, so that relative @include and *_file names find nothing. */
static char fuzz_dir[] = "/tmp/fuzz_conf.XXXXXX";
static char fuzz_path[64];
static FILE *fuzz_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024], what[600], note[1024];
    conf_t *a = NULL, *b = NULL;
    FILE *f;

    if (fuzz_null == NULL) {
        if (mkdtemp(fuzz_dir) == NULL)
            abort();
        snprintf(fuzz_path, sizeof(fuzz_path), "%s/f.conf", fuzz_dir);
        fuzz_null = fopen("/dev/null", "w");
        if (fuzz_null == NULL)
            abort();
    }
    f = fopen(fuzz_path, "w");
    if (f == NULL)
        abort();
    if (size > 0 && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    chmod(fuzz_path, 0600);

    memset(err, 'x', sizeof(err));
    if (conf_load(fuzz_path, &a, err, sizeof(err)) != 0) {
        /* A refusal always says where and why, in a terminated string. */
        if (a != NULL || memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0')
            abort();
        return 0;
    }
    if (a == NULL || a->n_queues < 1)
        abort();
    conf_dump(a, fuzz_null);
    for (int i = 0; i < a->n_queues; i++) {
        /* A plugin's path is absolute; "sql" is the built-in SQL handler, with statements. */
        const conf_queue_t *q = &a->queues[i];
        bool sql = q->handler != NULL && strcmp(q->handler, "sql") == 0;
        if (q->name == NULL || q->handler == NULL || (q->handler[0] != '/' && !sql) ||
            (sql && q->n_sql < 1) || (!sql && (q->n_sql > 0 || q->n_publish > 0)))
            abort();
        (void)conf_queue_risk(a, i, note, sizeof(note));
    }
    /* The same file twice: a reload sees no difference. */
    if (conf_load(fuzz_path, &b, err, sizeof(err)) != 0)
        abort();
    if (conf_connections_differ(a, b, what, sizeof(what)))
        abort();
    for (int i = 0; i < a->n_queues; i++)
        if (conf_queue_differs(&a->queues[i], &b->queues[i], what, sizeof(what)))
            abort();
    conf_free(b);
    conf_free(a);
    return 0;
}
