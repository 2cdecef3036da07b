/* worker_try.h: one message through a worker's transaction as a dry run, for idemctl try. */
#ifndef IDEMD_WORKER_TRY_H
#define IDEMD_WORKER_TRY_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stddef.h>

#include "conf.h"
#include "txn.h"

#define WORKER_TRY_TEXT 512   /* a log line or a header value, cut to this */
#define WORKER_TRY_HEADERS 32 /* headers shown per onward message */

/* A line logged while the handler ran (the handler's own, DEBUG included, and idemd's). */
typedef struct worker_try_line {
    int level; /* log_level_t */
    char text[WORKER_TRY_TEXT];
} worker_try_line_t;

/* An onward message the handler wrote to the outbox, as read back before the rollback. */
typedef struct worker_try_pub {
    char msg_id[256], exchange[256], routing_key[256], content_type[256];
    int n_headers; /* shown; more_headers: how many more there were */
    int more_headers;
    struct {
        char key[256];
        char value[WORKER_TRY_TEXT];
    } headers[WORKER_TRY_HEADERS];
    long long body_len;
} worker_try_pub_t;

/* What the dry run found. Free with worker_try_out_free. */
typedef struct worker_try_out {
    char handler[128];       /* the handler's name */
    char id[TXN_ID_MAX + 1]; /* the message's id as the worker reads it (id_header) */
    size_t id_len;
    bool no_id;   /* it has none (dedup = "none": keyed by its body for the guard) */
    int recorded; /* its id has a committed record: 1, 0, -1 not looked (no record) */
    char record_table[65], consumer[129]; /* where it was looked up */
    char recorded_at[32];                 /* the record's create_time ("" when not read) */
    bool ran;            /* the transaction ran (not: refused before it, or a duplicate) */
    bool recorded_skip;  /* ran without the record INSERT (recorded, --force-run) */
    txn_state_t outcome; /* the message's txn state at the end: HANDLED: ok; RETRY, REJECT;
                            DUPLICATE (not run) */
    unsigned attempt;
    char reason[512];
    int redos; /* transactions lost and redone */
    worker_try_line_t *lines;
    int n_lines, cap_lines;
    worker_try_pub_t *pubs;
    int n_pubs, cap_pubs;
    char peek_err[256]; /* the outbox could not be read back: why ("" when it was) */
    bool tried_end;     /* the handler tried to end idemd's transaction; the server refused */
} worker_try_out_t;

/* What worker_try returns besides 0. */
#define WORKER_TRY_CONFIG (-1)  /* the handler cannot be loaded or started, tables missing */
#define WORKER_TRY_CONNECT (-2) /* the database cannot be reached */
#define WORKER_TRY_LOST (-3)    /* the connection failed in the transaction: nothing committed */
#define WORKER_TRY_ENDED                                                                           \
    (-4) /* the handler ended the transaction where the server could not                           \
          * refuse it (Galera): what it did before is committed */

/*
 * Run queue q's handler on the message env (borrowed; its delivery fields
 * as a worker would have them) the way one of q's workers does: the same
 * id reading, record INSERT, savepoints and handler calls (txn_run over the
 * worker's txn ops, through step_try), then ROLLBACK where COMMIT would
 * be. Before it, whether the id is recorded: a recorded one is not run
 * (outcome DUPLICATE) unless force, and then without its record INSERT.
 * Nothing is committed, acked or published; the broker is not touched.
 * Loads the handler in this process (its trust check as in the worker),
 * calls its init and fini. Returns 0 with the outcome in *out (free with
 * worker_try_out_free, also after a failure), or WORKER_TRY_* with the
 * reason in err.
 */
int worker_try(const conf_t *conf, const conf_queue_t *q, const amqp_envelope_t *env, bool force,
               worker_try_out_t *out, char *err, size_t errlen) __attribute__((warn_unused_result));

/* Free what out holds (out itself is the caller's). */
void worker_try_out_free(worker_try_out_t *out);

#endif
