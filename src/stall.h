/* stall.h: handler_timeout for one worker, which tells a hung handler from one the database holds
 * up.
 */
#ifndef IDEMD_STALL_H
#define IDEMD_STALL_H

#include "conf.h"
#include "db.h"
#include "slot.h"

typedef struct stall stall_t;

/*
 * Start the watchdog thread of a worker process. cfg and slot are
 * borrowed for the watchdog's life. Returns NULL when the thread cannot be
 * started (logged); the caller then falls back to alarm().
 */
stall_t *stall_start(const conf_database_t *cfg, worker_slot_t *slot);

/*
 * Before a handler call on db: the handler has timeout_s seconds of its own.
 * When they pass, the watchdog looks at db's session from a second
 * connection. Inside a statement that waits for a lock (metadata, table,
 * global read or backup lock, an InnoDB row lock): not the handler's fault;
 * warned about once and looked at again every second (the server's timeouts
 * and database.read_timeout bound that wait). Otherwise the handler runs its
 * own code past the limit: SIGALRM kills the worker, as alarm() did, and the
 * successor counts a crash. When the session cannot be looked at, the worker
 * exits as one that lost its database (no crash is counted). db must stay
 * open until stall_disarm.
 */
void stall_arm(stall_t *s, const db_t *db, int timeout_s);

/* After the handler call: the watchdog stops watching. */
void stall_disarm(stall_t *s);

/* Stop the thread and free s; NULL is fine. */
void stall_stop(stall_t *s);

#endif
