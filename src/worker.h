/* worker.h: one worker process: consume one queue, run each batch of messages in one transaction.
 */
#ifndef IDEMD_WORKER_H
#define IDEMD_WORKER_H

#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "log.h"
#include "metrics.h"
#include "plugin.h"
#include "slot.h"

/*
 * The body of a worker process: loads q's handler, then never returns,
 * exits with one of the codes in slot.h. conf and q are inherited from the
 * supervisor across fork.
 */
void worker_main(const conf_t *conf, const conf_queue_t *q, int index, worker_slot_t *slot)
    __attribute__((noreturn));

#endif
