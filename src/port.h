/* port.h: the worker's three ports: the consuming connection, the publishing channel and the clock
 * (one real adapter each in worker_ops.c, one fake each in tests/sim/sim_ports.c).
 */
#ifndef IDEMD_PORT_H
#define IDEMD_PORT_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include "mq.h"

/*
 * The consuming connection. Each call is on ctx; failures are logged by the
 * implementation.
 */
typedef struct port_consume_ops {
    /* The next delivery, as mq_next. */
    mq_status_t (*next)(void *ctx, const struct timeval *timeout, size_t max_body,
                        amqp_envelope_t *env, uint64_t *dropped);
    int (*ack)(void *ctx, uint64_t tag, bool multiple); /* 0 or -1 (channel unusable) */
    int (*nack)(void *ctx, uint64_t tag, bool requeue); /* 0 or -1 (channel unusable) */
    int (*cancel)(void *ctx); /* basic.cancel: nothing new comes after; 0 or -1 (none to cancel) */
} port_consume_ops_t;

/*
 * The publishing channel (confirm mode, its connection opened when first
 * needed). A round is: round_begin, publish each copy (persistent,
 * mandatory), wait_confirms, then round_ok / returned / why per copy.
 */
typedef struct port_publish_ops {
    /* Have a connection open and serviced (replace one lost while idle; declare the queues
     * idemd owns after a failed round). 0, or -1 (none to be had). */
    int (*open)(void *ctx);
    bool (*blocked)(void *ctx); /* the broker blocks publishing (resource alarm) */
    void (*round_begin)(void *ctx);
    /* Publish one copy; its index in the round, or -1. */
    int (*publish)(void *ctx, const char *exchange, const char *routing_key,
                   const amqp_basic_properties_t *props, amqp_bytes_t body);
    /* 0 when every copy of the round was confirmed; -1 otherwise (as mq_wait_confirms). */
    int (*wait_confirms)(void *ctx, int timeout_ms);
    bool (*round_ok)(void *ctx, int i);
    bool (*round_returned)(void *ctx, int i);
    const char *(*round_why)(void *ctx, int i); /* NULL when acked */
    bool (*usable)(void *ctx);                  /* the channel is open */
    bool (*broken)(void *ctx);                  /* the connection is lost */
    int (*restore)(void *ctx);                  /* reopen a channel the broker closed: 0 or -1 */
    /* Close the connection after a failed round (the next open declares). */
    void (*close)(void *ctx);
    /* The broker's max message size once a copy was refused for it; 0: unknown. */
    uint64_t (*max_message)(void *ctx);
} port_publish_ops_t;

/* Time and waiting, passed in so that a simulator owns the clock. */
typedef struct port_clock_ops {
    uint64_t (*now_ms)(void *ctx);    /* monotonic */
    uint64_t (*now_us)(void *ctx);    /* monotonic, in microseconds */
    uint64_t (*wall_ms)(void *ctx);   /* CLOCK_REALTIME, for copies' headers */
    void (*pause)(void *ctx, int ms); /* sleep, showing progress; returns early on stop */
} port_clock_ops_t;

/* A port: its table and the context its calls are on. */
typedef struct port_consume {
    const port_consume_ops_t *ops;
    void *ctx;
} port_consume_t;

typedef struct port_publish {
    const port_publish_ops_t *ops;
    void *ctx;
} port_publish_t;

typedef struct port_clock {
    const port_clock_ops_t *ops;
    void *ctx;
} port_clock_t;

#endif
