/* mq_pub.c: the publishing side of an mq_t: confirm mode, publishes, confirms and returns. */
#include "mq.h"
#include "clock.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "delivery.h"
#include "log.h"
#include "mq_int.h"

/* A queue name the broker reserves ("amq." prefix): nobody can declare it, so a probe sent
 * there is returned and stored nowhere. */
#define MQ_PROBE_QUEUE "amq.idemd.probe"

/*
 * Bounding a publish. rabbitmq-c writes a publish with no deadline, so a
 * broker that stops reading (a resource alarm blocks a publishing connection
 * that way) would hold us for ever. A one-shot timer's signal shuts the
 * socket down (shutdown() is async-signal-safe): the library's poll wakes up
 * and its write fails. One publisher per worker process, hence the statics.
 */
static volatile sig_atomic_t mq_abort_fd = -1;
static volatile sig_atomic_t mq_aborted;
static timer_t mq_abort_timer;
static bool mq_abort_ready;

static void mq_on_abort(int sig)
{
    int fd = mq_abort_fd;
    (void)sig;
    if (fd >= 0) {
        shutdown(fd, SHUT_RDWR);
        mq_aborted = 1;
    }
}

/* Set up the timer once per process; 0, or -1 (logged). */
static int mq_abort_init(void)
{
    struct sigaction sa;
    struct sigevent sev;

    if (mq_abort_ready)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = mq_on_abort;
    sa.sa_flags = SA_RESTART; /* a late signal must not fail an unrelated call with EINTR */
    sigemptyset(&sa.sa_mask);
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGRTMIN;
    if (sigaction(SIGRTMIN, &sa, NULL) != 0 ||
        timer_create(CLOCK_MONOTONIC, &sev, &mq_abort_timer) != 0) {
        log_error("cannot set up the publish timer: %s", strerror(errno));
        return -1;
    }
    mq_abort_ready = true;
    return 0;
}

/* Shut fd down unless mq_abort_disarm is called within ms. */
static void mq_abort_arm(int fd, int ms)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    mq_aborted = 0;
    mq_abort_fd = fd;
    timer_settime(mq_abort_timer, 0, &its, NULL);
}

/* Stop the timer; returns whether it fired. */
static bool mq_abort_disarm(void)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    timer_settime(mq_abort_timer, 0, &its, NULL);
    mq_abort_fd = -1;
    return mq_aborted != 0;
}

static int mq_probe(mq_t *mq);

int mq_open_publisher(const conf_broker_t *cfg, const char *owner, int start, mq_tick_fn tick,
                      void *arg, mq_t **out)
{
    amqp_rpc_reply_t r;
    mq_t *mq;

    if (mq_abort_init() != 0)
        return -1;
    /* The consumer's connection checked the version already: a refusal here is logged. */
    if (mq_connect_any(cfg, start, owner, "republisher", tick, arg, NULL, 0, out) != 0)
        return -1;
    mq = *out;
    amqp_confirm_select(mq->conn, MQ_CHANNEL);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        mq_fail(mq, "confirm.select", r);
        goto fail;
    }
    mq->confirms = true;
    if (mq_probe(mq) != 0)
        goto fail;
    return 0;
fail:
    mq_close(mq);
    *out = NULL;
    return -1;
}

bool mq_blocked(const mq_t *mq)
{
    return mq->blocked;
}

void mq_round_begin(mq_t *mq)
{
    pubround_begin(&mq->round);
    mq->returning = false;
}

int mq_publish(mq_t *mq, const char *routing_key, const amqp_basic_properties_t *props,
               amqp_bytes_t body)
{
    return mq_publish_to(mq, "", routing_key, props, body);
}

/*
 * props with header MQ_H_PUBLISH = seq added (one of the same name left
 * out) into *out, its table in tab (cap entries) or, when that is too
 * small, in *heap (the caller frees it). 0, or -1 when out of memory.
 */
static int mq_tag_props(const amqp_basic_properties_t *props, uint64_t seq, amqp_table_entry_t *tab,
                        int cap, amqp_table_entry_t **heap, amqp_basic_properties_t *out)
{
    int have = (props->_flags & AMQP_BASIC_HEADERS_FLAG) ? props->headers.num_entries : 0, n = 0;
    amqp_table_entry_t *e = tab;

    *out = *props;
    if (have + 1 > cap && (e = *heap = calloc((size_t)have + 1, sizeof(*e))) == NULL)
        return -1;
    for (int i = 0; i < have; i++) {
        amqp_bytes_t k = props->headers.entries[i].key;
        if (k.len == sizeof(MQ_H_PUBLISH) - 1 && memcmp(k.bytes, MQ_H_PUBLISH, k.len) == 0)
            continue;
        e[n++] = props->headers.entries[i];
    }
    e[n].key = amqp_cstring_bytes(MQ_H_PUBLISH);
    e[n].value.kind = AMQP_FIELD_KIND_I64;
    e[n].value.value.i64 = (int64_t)seq;
    out->_flags |= AMQP_BASIC_HEADERS_FLAG;
    out->headers.entries = e;
    out->headers.num_entries = n + 1;
    return 0;
}

int mq_publish_to(mq_t *mq, const char *exchange, const char *routing_key,
                  const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    amqp_table_entry_t tab[MQ_TAG_ENTRIES], *heap = NULL;
    amqp_basic_properties_t tagged;
    int rc = -1, index;

    if (mq->blocked || mq->broken || !mq->channel_open) {
        log_error("broker %s: not publishing to '%s': %s", mq->where, routing_key,
                  mq->blocked  ? "the broker blocks this connection (resource alarm)"
                  : mq->broken ? "the connection is broken"
                               : "the channel is closed");
        return -1;
    }
    /* Tracked before it is sent (nothing is read meanwhile), forgotten if the send fails. */
    index = pubround_add(&mq->round, mq->pub_seq + 1, exchange, routing_key,
                         strcmp(routing_key, MQ_PROBE_QUEUE) == 0);
    if (index < 0) {
        log_error("broker %s: out of memory publishing to '%s'", mq->where, routing_key);
        return -1;
    }
    if (mq_tag_props(props, mq->pub_seq + 1, tab, MQ_TAG_ENTRIES, &heap, &tagged) != 0) {
        log_error("broker %s: out of memory publishing to '%s'", mq->where, routing_key);
        goto fail;
    }
    mq_abort_arm(amqp_get_sockfd(mq->conn), MQ_SEND_MS);
    int st = amqp_basic_publish(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(exchange),
                                amqp_cstring_bytes(routing_key), 1, 0, &tagged, body);
    bool aborted = mq_abort_disarm();
    mq_tick(mq);
    if (aborted)
        mq->broken = true; /* the socket is shut down even if the write got through */
    if (st != AMQP_STATUS_OK) {
        if (aborted)
            log_error("broker %s: publishing to '%s': the broker took no data for %d ms "
                      "(blocked by a resource alarm, or the network stalled): giving up",
                      mq->where, routing_key, MQ_SEND_MS);
        else
            log_error("broker %s: publishing to '%s' (exchange '%s'): %s", mq->where, routing_key,
                      exchange, amqp_error_string2(st));
        mq->broken = true;
        goto fail;
    }
    mq->pub_seq++;
    rc = index;
    goto out;
fail:
    pubround_drop_last(&mq->round);
out:
    free(heap);
    return rc;
}

/*
 * The content header of a basic.return (props): mark the copy it answers.
 * Its MQ_H_PUBLISH header names the copy exactly; without it (a broker that
 * dropped it), the first pending copy of the same exchange and routing key,
 * as the broker returns in publishing order.
 */
static void mq_returned(mq_t *mq, const amqp_basic_properties_t *props)
{
    long long seq = props ? delivery_header_int(props, MQ_H_PUBLISH) : -1;

    mq->returning = false;
    (void)pubround_return(&mq->round, seq, mq->ret_exchange, mq->ret_key, mq->ret_code,
                          mq->ret_text);
}

/*
 * Act on one frame that arrived on a publishing connection: confirms,
 * returns, connection.blocked / unblocked, close. 0, or -1 when the broker
 * closed the channel or the connection (logged).
 */
static int mq_pub_frame(mq_t *mq, const amqp_frame_t *f)
{
    if (f->frame_type == AMQP_FRAME_HEADER && mq->returning) {
        mq_returned(mq, f->payload.properties.decoded);
        return 0;
    }
    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0; /* the body of a basic.return */
    switch (f->payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = f->payload.method.decoded;
        pubround_ack(&mq->round, a->delivery_tag, a->multiple);
        return 0;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *n = f->payload.method.decoded;
        pubround_nack(&mq->round, n->delivery_tag, n->multiple);
        return 0;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        /* No tag on a return: its content header names the copy (mq_returned). */
        amqp_basic_return_t *m = f->payload.method.decoded;
        mq->returning = true;
        mq->ret_code = m->reply_code;
        snprintf(mq->ret_text, sizeof(mq->ret_text), "%.*s", (int)m->reply_text.len,
                 (char *)m->reply_text.bytes);
        snprintf(mq->ret_exchange, sizeof(mq->ret_exchange), "%.*s", (int)m->exchange.len,
                 (char *)m->exchange.bytes);
        snprintf(mq->ret_key, sizeof(mq->ret_key), "%.*s", (int)m->routing_key.len,
                 (char *)m->routing_key.bytes);
        return 0;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
        amqp_connection_blocked_t *m = f->payload.method.decoded;
        if (!mq->blocked)
            log_warn("broker %s: publishing connection blocked by the broker (%.*s): copies wait "
                     "in their queues until it unblocks",
                     mq->where, (int)m->reason.len, (char *)m->reason.bytes);
        mq->blocked = true;
        return 0;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        if (mq->blocked)
            log_info("broker %s: publishing connection unblocked", mq->where);
        mq->blocked = false;
        return 0;
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
        mq_closed_by_broker(mq, f, "publishing ");
        return -1;
    default:
        return 0;
    }
}

int mq_wait_confirms(mq_t *mq, int timeout_ms)
{
    uint64_t deadline = clock_mono_ms() + (uint64_t)timeout_ms, blocked_end = 0;
    struct timeval tv;
    amqp_frame_t f;
    int rc = 0;

    while (pubround_pending(&mq->round) > 0) {
        uint64_t now = clock_mono_ms();
        /* Blocked, the broker reads nothing more: only confirms already under way come. */
        if (!mq->blocked)
            blocked_end = 0;
        else if (blocked_end == 0)
            blocked_end = now + MQ_BLOCKED_MS;
        uint64_t end = blocked_end && blocked_end < deadline ? blocked_end : deadline;
        if (now >= end) {
            log_error("broker %s: %d of %d copies not confirmed after %d ms%s: giving up on them",
                      mq->where, pubround_pending(&mq->round), mq->round.n,
                      (int)(now + (uint64_t)timeout_ms - deadline),
                      mq->blocked ? " (the broker blocks publishing: resource alarm)" : "");
            mq->broken = true; /* unconfirmed copies must not be taken in later */
            rc = -1;
            break;
        }
        uint64_t slice = end - now < MQ_SLICE_MS ? end - now : MQ_SLICE_MS;
        tv.tv_sec = 0;
        tv.tv_usec = (suseconds_t)slice * 1000;
        int st = amqp_simple_wait_frame_noblock(mq->conn, &f, &tv);
        mq_tick(mq);
        if (st == AMQP_STATUS_TIMEOUT)
            continue;
        if (st != AMQP_STATUS_OK) {
            log_error("broker %s: waiting for publisher confirms: %s", mq->where,
                      amqp_error_string2(st));
            mq->broken = true;
            rc = -1;
            break;
        }
        if ((rc = mq_pub_frame(mq, &f)) != 0)
            break;
    }
    if (pubround_finish(&mq->round) != 0)
        rc = -1;
    amqp_maybe_release_buffers(mq->conn);
    return rc;
}

int mq_service(mq_t *mq)
{
    struct timeval tv = {0, 0};
    amqp_frame_t f;

    if (mq->broken || !mq->channel_open)
        return -1;
    for (;;) {
        int st = amqp_simple_wait_frame_noblock(mq->conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT)
            break;
        if (st != AMQP_STATUS_OK) {
            log_warn("broker %s: publishing connection lost: %s", mq->where,
                     amqp_error_string2(st));
            mq->broken = true;
            return -1;
        }
        if (mq_pub_frame(mq, &f) != 0)
            return -1;
    }
    amqp_maybe_release_buffers(mq->conn);
    return 0;
}

/*
 * Publish one probe (transient, mandatory, to MQ_PROBE_QUEUE: returned, stored
 * nowhere) and wait for its confirm: a broker under a resource alarm blocks
 * the connection at its first publish and says so. 0 (see mq->blocked), or
 * -1 (logged).
 */
static int mq_probe(mq_t *mq)
{
    amqp_basic_properties_t props;
    memset(&props, 0, sizeof(props));
    mq_round_begin(mq);
    if (mq_publish(mq, MQ_PROBE_QUEUE, &props, amqp_empty_bytes) < 0)
        return -1;
    int rc = mq_wait_confirms(mq, MQ_RPC_MS); /* returned, so never 0 */
    mq_round_begin(mq);
    return rc == 0 || mq->broken || !mq->channel_open ? -1 : 0;
}

bool mq_round_ok(const mq_t *mq, int index)
{
    return pubround_ok(&mq->round, index);
}

bool mq_channel_usable(const mq_t *mq)
{
    return mq->channel_open && !mq->broken;
}

const char *mq_round_why(const mq_t *mq, int index)
{
    return pubround_why(&mq->round, index);
}

bool mq_round_returned(const mq_t *mq, int index)
{
    return pubround_returned(&mq->round, index);
}

int mq_channel_restore(mq_t *mq)
{
    amqp_rpc_reply_t r;

    if (mq->broken)
        return -1;
    if (mq->channel_open)
        return 0;
    amqp_channel_open(mq->conn, MQ_CHANNEL);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return mq_fail(mq, "channel.open", r);
    mq->channel_open = true;
    if (mq->confirms) {
        /* A new channel: confirm mode again, and its publish sequence starts at 1. */
        amqp_confirm_select(mq->conn, MQ_CHANNEL);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            return mq_fail(mq, "confirm.select", r);
        mq_round_begin(mq);
        mq->pub_seq = 0;
    }
    return 0;
}
