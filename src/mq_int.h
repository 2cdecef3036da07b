/* mq_int.h: what mq.c shares with mq_pub.c and mq_declare.c; not part of mq.h's API. */
#ifndef IDEMD_MQ_INT_H
#define IDEMD_MQ_INT_H

#include "mq.h"

#define MQ_SLICE_MS 200 /* waits call the tick at least this often */

#include "clock.h"

/* Call mq's tick, if it has one. */
void mq_tick(mq_t *mq);

/* Fill one field-table entry; key and value are borrowed (they must outlive the table). */
void mq_entry_str(amqp_table_entry_t *e, const char *key, const char *value);
void mq_entry_int(amqp_table_entry_t *e, const char *key, int64_t value);

/* Log a failed RPC with what we tried and keep it in mq->error; returns -1 for tail calls. */
int mq_fail(mq_t *mq, const char *what, amqp_rpc_reply_t r);

/*
 * mq_connect to the nodes of cfg->hosts in turn, from hosts[start % n] on,
 * until one answers (or to host:port without hosts). See mq_open.
 */
int mq_connect_any(const conf_broker_t *cfg, int start, const char *owner, const char *role,
                   mq_tick_fn tick, void *arg, char *refused, size_t refused_len, mq_t **out);

/*
 * The broker closed the channel or the connection (f holds its close
 * method): log its reply code and text, answer with the close-ok it waits
 * for, and mark the channel closed. role prefixes "channel"/"connection" in
 * the message ("" or "publishing ").
 */
void mq_closed_by_broker(mq_t *mq, const amqp_frame_t *f, const char *role);

#endif
