/* sqlh.h: the built-in SQL handler (handler = "sql"): the queue's statements from the config, run
 * through the same idemd_handler_t interface as a plugin. */
#ifndef IDEMD_SQLH_H
#define IDEMD_SQLH_H

#include <stdbool.h>
#include <stddef.h>

#include "../include/idemd/handler.h"
#include "conf.h"

/* Whether queue q uses the built-in SQL handler (handler = "sql"). */
bool sqlh_is(const conf_queue_t *q);

/*
 * The built-in SQL handler (static, never freed). Its init() takes, as settings, the
 * value of sqlh_settings(q); everything else is as for a plugin: a worker, or idemctl try,
 * calls init, handle and fini exactly as for a loaded .so.
 */
const idemd_handler_t *sqlh_handler(void);

/* What to hand to init() of queue q's handler: q itself for the SQL handler, else the
 * queue's "settings" group (NULL when it has none). */
const idemd_settings_t *sqlh_settings(const conf_queue_t *q);

/*
 * Prepare every statement of queue qi of conf on a new connection to the configured database,
 * then close it: --check-config, start and reload run it. 0; -1 with "FILE:LINE:
 * queues.[N].sql.[K].statement: statement K+1: ..." in err when a statement is refused (the
 * server's message) or its placeholders do not match params; -2 with the reason in err when
 * the database cannot be reached. Logs nothing but what db_open logs.
 */
int sqlh_check(const conf_t *conf, int qi, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* idemctl try -v: log every value the SQL handler binds, its source and how it is bound (a
 * debug line each, which try prints). Off unless called; not for the daemon. */
void sqlh_show_values(bool on);

#endif
