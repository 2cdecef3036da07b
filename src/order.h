/* order.h: per-key ordering (order_key): a message's key, and the blocked keys and their waiters
 * in the database (sql/012_idemd_order.sql, docs/ordering.md).
 */
#ifndef IDEMD_ORDER_H
#define IDEMD_ORDER_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stddef.h>

#include "db.h"
#include "db_port.h"

#define ORDER_KEY_MAX 255 /* bytes of a key (the okey column) */

/*
 * The key of a delivery by spec ("header:NAME": that application header, a
 * string or an integer; "json:PATH": the field of the JSON object body at
 * PATH, dots between nested names, a string, a number or a boolean). On
 * success 0 with the key in key (ORDER_KEY_MAX + 1 bytes, NUL-terminated;
 * it may hold any bytes) and *len. On failure -1 with the reason in why
 * (the message is bad input: dead-lettered, never retried). Borrows all.
 */
int order_key_of(const char *spec, const amqp_basic_properties_t *props, amqp_bytes_t body,
                 char *key, size_t *len, char *why, size_t whylen)
    __attribute__((warn_unused_result));

/*
 * The calls below run inside db's open transaction, lock the key's block
 * row (SELECT ... FOR UPDATE) first, and return 0 or the MySQL error number
 * (logged; 1213 and 1205 mean the transaction is to be redone). Every one
 * is idempotent: a redone transaction may call it again.
 */

/*
 * Of keys[0..n-1] (lens: their lengths; repeats allowed), which are blocked:
 * sets blocked[j]; their rows are locked. One statement. A key not blocked
 * now can only become blocked by this transaction (one consumer per
 * queue), so its messages need no order_check.
 */
unsigned order_blocked(db_t *db, const char *const *keys, const size_t *lens, int n, bool *blocked);

/* Where message id stands towards key: *place. */
unsigned order_check(db_t *db, const char *key, size_t klen, const char *id, size_t idlen,
                     order_place_t *place);

/* id waits behind the key's head: appended to the waiters once (its first arrival's place). */
unsigned order_wait(db_t *db, const char *key, size_t klen, const char *id, size_t idlen);

/*
 * id goes to a retry tier: the key is blocked with id at its head (a key
 * already blocked by another message makes id a waiter instead).
 */
unsigned order_block(db_t *db, const char *key, size_t klen, const char *id, size_t idlen);

/*
 * id is done with: committed, or dead-lettered with hold false. When it is
 * the key's head, the first waiter becomes the head (none left: the key is
 * free); when it is a waiter, it leaves the waiters. With hold (dead-lettered,
 * order_dead_letter = "hold"), the key stays blocked on id, held: only an
 * operator (order_skip_head) or a replay of id moves it on.
 */
unsigned order_done(db_t *db, const char *key, size_t klen, const char *id, size_t idlen,
                    bool hold);

/*
 * Whether both tables of sql/012_idemd_order.sql can be used: 0, or -1
 * (logged). Ends the transaction its reads opened.
 */
int order_tables(db_t *db) __attribute__((warn_unused_result));

/*
 * For idemctl order release: drop consumer's key's head whatever it is (the
 * first waiter becomes the head). *found: there was a block. Committed by the caller.
 */
unsigned order_skip_head(db_t *db, const char *key, size_t klen, bool *found);

#endif
