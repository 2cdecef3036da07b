/* mq.c: one AMQP connection with one channel (rabbitmq-c): declare, consume, ack, publish. */
#include "mq.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "delivery.h"
#include "log.h"
#include "relay.h"
#include "version.h"

/* A queue name the broker reserves ("amq." prefix): nobody can declare it, so a probe sent
 * there is returned and stored nowhere. */
#define MQ_PROBE_QUEUE "amq.idemd.probe"
#define MQ_SLICE_MS 200  /* waits call the tick at least this often */
#define MQ_DRAIN_MS 5000 /* a deaf connection's close: wait at most this long (mq_close_deaf) */
#define MQ_DRAIN_QUIET_MS 1000 /* ... and over TLS at least this long */

static uint64_t mq_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void mq_tick(mq_t *mq)
{
    if (mq->tick)
        mq->tick(mq->tick_arg);
}

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

/* Fill one field-table entry; key and value are borrowed (they must outlive the table). */
static void mq_entry_str(amqp_table_entry_t *e, const char *key, const char *value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(value);
}

static void mq_entry_int(amqp_table_entry_t *e, const char *key, int64_t value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = value;
}

static void mq_entry_bool(amqp_table_entry_t *e, const char *key, bool value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e->value.value.boolean = value;
}

const char *mq_reply_text(amqp_rpc_reply_t r, char *buf, size_t len)
{
    char q[600]; /* the broker's text, quoted: it must not forge a field or a line */
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(buf, len, "ok");
        break;
    case AMQP_RESPONSE_NONE:
        snprintf(buf, len, "missing RPC reply");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(buf, len, "%s", amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, len, "connection closed by broker: %u %s", m->reply_code,
                     log_quote(m->reply_text.bytes, m->reply_text.len, q, sizeof(q)));
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, len, "channel closed by broker: %u %s", m->reply_code,
                     log_quote(m->reply_text.bytes, m->reply_text.len, q, sizeof(q)));
        } else {
            snprintf(buf, len, "unexpected server method 0x%08x", r.reply.id);
        }
        break;
    }
    return buf;
}

/* Log a failed RPC with what we tried and keep it in mq->error; returns -1 for tail calls. */
static int mq_fail(mq_t *mq, const char *what, amqp_rpc_reply_t r)
{
    char buf[256];
    snprintf(mq->error, sizeof(mq->error), "%s: %s", what, mq_reply_text(r, buf, sizeof(buf)));
    log_msg(mq->quiet ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR, "broker %s: %s", mq->where, mq->error);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION)
        mq->channel_open = false;
    else
        mq->broken = true; /* a timeout or a socket error: nothing more to say to it */
    return -1;
}

/*
 * The connection's socket: plain TCP, or TLS 1.2+ set up from cfg->tls. The
 * socket belongs to mq->conn (freed with it). NULL after logging why.
 */
static amqp_socket_t *mq_socket_new(mq_t *mq, const conf_broker_t *cfg)
{
    const conf_broker_tls_t *t = &cfg->tls;
    amqp_socket_t *sock;
    int st;

    if (!t->enabled) {
        if ((sock = amqp_tcp_socket_new(mq->conn)) == NULL)
            log_error("broker %s: out of memory", mq->where);
        return sock;
    }
    if ((sock = amqp_ssl_socket_new(mq->conn)) == NULL) {
        log_error("broker %s: TLS: cannot create a TLS socket (OpenSSL initialisation failed or "
                  "out of memory)",
                  mq->where);
        return NULL;
    }
    /* rabbitmq-c 0.11 would otherwise still offer TLS 1.0 and 1.1. */
    st = amqp_ssl_socket_set_ssl_versions(sock, AMQP_TLSv1_2, AMQP_TLSvLATEST);
    if (st != AMQP_STATUS_OK) {
        log_error("broker %s: TLS: cannot require TLS 1.2 or newer: %s", mq->where,
                  amqp_error_string2(st));
        return NULL;
    }
    if (t->ca_file && (st = amqp_ssl_socket_set_cacert(sock, t->ca_file)) != AMQP_STATUS_OK) {
        log_error("broker %s: TLS: cannot load CA certificates from tls.ca_file \"%s\" (not "
                  "PEM?): %s",
                  mq->where, t->ca_file, amqp_error_string2(st));
        return NULL;
    }
    if (t->cert_file) {
        /* An empty passphrase: an encrypted key fails here instead of OpenSSL
         * prompting on a terminal. */
        amqp_ssl_socket_set_key_passwd(sock, "");
        st = amqp_ssl_socket_set_key(sock, t->cert_file, t->key_file);
        if (st != AMQP_STATUS_OK) {
            log_error("broker %s: TLS: cannot load tls.cert_file \"%s\" with tls.key_file "
                      "\"%s\" (PEM, the key unencrypted and matching the certificate): %s",
                      mq->where, t->cert_file, t->key_file, amqp_error_string2(st));
            return NULL;
        }
    }
    amqp_ssl_socket_set_verify_peer(sock, t->verify_peer ? 1 : 0);
    amqp_ssl_socket_set_verify_hostname(sock, t->verify_hostname ? 1 : 0);
    return sock;
}

/* Log why amqp_socket_open failed; TLS failures say which check refused. */
static void mq_log_open_error(mq_t *mq, const conf_broker_t *cfg, int st)
{
    switch (st) {
    case AMQP_STATUS_SSL_PEER_VERIFY_FAILED:
        log_error("broker %s: TLS: the broker's certificate is not trusted: it does not chain to "
                  "tls.ca_file \"%s\", or is expired or not yet valid (%s)",
                  mq->where, cfg->tls.ca_file ? cfg->tls.ca_file : "", amqp_error_string2(st));
        break;
    case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED:
        log_error("broker %s: TLS: the broker's certificate is not issued to \"%s\": no DNS name "
                  "in its subjectAltName (or, without any, its CN) matches; rabbitmq-c ignores "
                  "IP address entries (%s)",
                  mq->where, cfg->host, amqp_error_string2(st));
        break;
    case AMQP_STATUS_SSL_CONNECTION_FAILED:
    case AMQP_STATUS_SSL_ERROR:
        log_error("broker %s: TLS handshake failed: not a TLS port, no common protocol version "
                  "(1.2 or newer), or the broker refused our certificate (%s)",
                  mq->where, amqp_error_string2(st));
        break;
    default:
        log_error("broker %s: cannot connect: %s", mq->where, amqp_error_string2(st));
        break;
    }
}

/*
 * Hold the broker's version (connection.start server-properties "product"
 * and "version") against the oldest idemd supports, and note its major
 * version in mq->broker_major (0: unknown). 0, or -1 when it is
 * older: the reason goes to refused (the caller reports it), or is logged
 * when refused is NULL. A broker that is not RabbitMQ or sends no version
 * we can read is warned about and used.
 */
static int mq_check_version(mq_t *mq, char *refused, size_t refused_len)
{
    amqp_table_t *props = amqp_get_server_properties(mq->conn);
    char product[64] = "", version[64] = "", msg[400], qv[200];
    version_t min;

    for (int i = 0; props && i < props->num_entries; i++) {
        const amqp_table_entry_t *e = &props->entries[i];
        char *to = NULL;
        if (e->value.kind != AMQP_FIELD_KIND_UTF8 && e->value.kind != AMQP_FIELD_KIND_BYTES)
            continue;
        if (e->key.len == 7 && memcmp(e->key.bytes, "product", 7) == 0)
            to = product;
        else if (e->key.len == 7 && memcmp(e->key.bytes, "version", 7) == 0)
            to = version;
        if (to) {
            size_t n = e->value.value.bytes.len < 63 ? e->value.value.bytes.len : 63;
            memcpy(to, e->value.value.bytes.bytes, n);
            to[n] = '\0';
        }
    }
    version_t got;
    mq->broker_major = version_parse(version, &got) == 0 ? got.major : 0;
    if (strcmp(product, "RabbitMQ") != 0) {
        log_warn("broker %s: the server is %s, not RabbitMQ: idemd is tested with RabbitMQ only; "
                 "going on without a version check",
                 mq->where, product[0] ? log_quote_str(product, qv, sizeof(qv)) : "unnamed");
        return 0;
    }
    version_minimum(VERSION_RABBITMQ, &min);
    switch (version_check(VERSION_RABBITMQ, version[0] ? version : NULL, &min, msg, sizeof(msg))) {
    case VERSION_OK:
        log_debug("broker %s: RabbitMQ %s", mq->where, log_quote_str(version, qv, sizeof(qv)));
        return 0;
    case VERSION_UNKNOWN:
        log_warn("broker %s: %s", mq->where, msg);
        return 0;
    case VERSION_TOO_OLD:
        break;
    }
    if (refused)
        snprintf(refused, refused_len, "broker %s: %s", mq->where, msg);
    else
        log_error("broker %s: %s", mq->where, msg);
    return -1;
}

/*
 * Connect and open MQ_CHANNEL with the given heartbeat, each step bounded
 * (MQ_OPEN_MS, MQ_RPC_MS), calling tick(arg) between them. See mq_open;
 * MQ_OPEN_REFUSED when the broker's version is refused.
 */
static int mq_connect(const conf_broker_t *cfg, int heartbeat, const char *owner, const char *role,
                      mq_tick_fn tick, void *arg, char *refused, size_t refused_len, mq_t **out)
{
    mq_t *mq = calloc(1, sizeof(*mq));
    amqp_socket_t *sock;
    char name[300];
    amqp_table_entry_t caps_e[2], props_e[3];
    amqp_table_t caps, props;
    amqp_rpc_reply_t r;
    struct timeval tv;
    int st, rc = -1;

    *out = NULL;
    if (mq == NULL)
        return -1;
    mq->tick = tick;
    mq->tick_arg = arg;
    mq->tls = cfg->tls.enabled;
    snprintf(mq->where, sizeof(mq->where), "%s:%d%s vhost %s", cfg->host, cfg->port,
             cfg->tls.enabled ? " (TLS)" : "", cfg->vhost);
    mq->conn = amqp_new_connection();
    if (mq->conn == NULL) {
        log_error("broker %s: out of memory", mq->where);
        goto fail;
    }
    if ((sock = mq_socket_new(mq, cfg)) == NULL)
        goto fail;
    tv.tv_sec = MQ_OPEN_MS / 1000;
    tv.tv_usec = 0;
    st = amqp_socket_open_noblock(sock, cfg->host, cfg->port, &tv);
    if (st != AMQP_STATUS_OK) {
        mq_log_open_error(mq, cfg, st);
        goto fail;
    }
    mq_tick(mq);
    /* Without these, a broker that accepted the TCP connection and went silent holds us. */
    tv.tv_sec = MQ_RPC_MS / 1000;
    if (amqp_set_handshake_timeout(mq->conn, &tv) != AMQP_STATUS_OK ||
        amqp_set_rpc_timeout(mq->conn, &tv) != AMQP_STATUS_OK) {
        log_error("broker %s: cannot set the RPC timeouts", mq->where);
        goto fail;
    }
    /* Without this capability the broker never tells us our queue was deleted. */
    mq_entry_bool(&caps_e[0], "consumer_cancel_notify", true);
    mq_entry_bool(&caps_e[1], "connection.blocked", true);
    caps.num_entries = 2;
    caps.entries = caps_e;
    props_e[0].key = amqp_cstring_bytes("capabilities");
    props_e[0].value.kind = AMQP_FIELD_KIND_TABLE;
    props_e[0].value.value.table = caps;
    mq_entry_str(&props_e[1], "product", "idemd");
    snprintf(name, sizeof(name), "idemd %s %s", owner, role);
    mq_entry_str(&props_e[2], "connection_name", name);
    props.num_entries = 3;
    props.entries = props_e;
    r = amqp_login_with_properties(mq->conn, cfg->vhost, 0, RELAY_FRAME_MAX, heartbeat, &props,
                                   AMQP_SASL_METHOD_PLAIN, cfg->user, cfg->password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        mq_fail(mq, "login", r);
        goto fail;
    }
    if (mq_check_version(mq, refused, refused_len) != 0) {
        rc = MQ_OPEN_REFUSED;
        goto fail;
    }
    mq_tick(mq);
    amqp_channel_open(mq->conn, MQ_CHANNEL);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        mq_fail(mq, "channel.open", r);
        goto fail;
    }
    mq->channel_open = true;
    *out = mq;
    return 0;
fail:
    mq_close(mq);
    return rc;
}

/*
 * mq_connect to the nodes of cfg->hosts in turn, from hosts[start % n] on,
 * until one answers (or to host:port without hosts). See mq_open.
 */
static int mq_connect_any(const conf_broker_t *cfg, int start, const char *owner, const char *role,
                          mq_tick_fn tick, void *arg, char *refused, size_t refused_len, mq_t **out)
{
    int n = cfg->n_hosts > 0 ? cfg->n_hosts : 1, n_refused = 0;

    *out = NULL;
    if (cfg->n_hosts == 0)
        return mq_connect(cfg, cfg->heartbeat, owner, role, tick, arg, refused, refused_len, out);
    start = start < 0 ? 0 : start % n;
    for (int k = 0; k < n; k++) {
        conf_broker_t one = *cfg;
        const char *spec = cfg->hosts[(start + k) % n];
        char host[256];
        if (conf_endpoint(spec, cfg->port, host, sizeof(host), &one.port) != 0) {
            log_error("broker: malformed hosts entry \"%s\"", spec);
            continue;
        }
        one.host = host;
        int rc =
            mq_connect(&one, cfg->heartbeat, owner, role, tick, arg, refused, refused_len, out);
        if (rc == 0)
            return 0;
        n_refused += rc == MQ_OPEN_REFUSED;
        if (k + 1 < n)
            log_info("broker: trying the next of %d hosts", n);
    }
    if (n_refused == n)
        return MQ_OPEN_REFUSED;
    /* Some nodes down, some too old: a temporary failure, but say why the old ones were not used.
     */
    if (n_refused > 0 && refused)
        log_error("%s", refused);
    return -1;
}

int mq_open(const conf_broker_t *cfg, const char *owner, int start, char *refused,
            size_t refused_len, mq_t **out)
{
    return mq_connect_any(cfg, start, owner, "consumer", NULL, NULL, refused, refused_len, out);
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

typedef enum mq_copy_state { MQ_COPY_PENDING, MQ_COPY_ACKED, MQ_COPY_REFUSED } mq_copy_state_t;

/* One publish of the round and what the broker said of it. */
typedef struct mq_copy {
    uint64_t seq;
    char *exchange;    /* owned */
    char *routing_key; /* owned */
    bool returned;     /* its basic.return came: its ack means "refused" */
    mq_copy_state_t state;
    char why[MQ_WHY_MAX]; /* refused: the broker's words */
} mq_copy_t;

void mq_round_begin(mq_t *mq)
{
    for (int i = 0; i < mq->round_n; i++) {
        free(mq->round[i].exchange);
        free(mq->round[i].routing_key);
    }
    mq->round_n = 0;
    mq->returning = false;
    mq->closed_why[0] = '\0';
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
    int rc = -1;

    if (mq->blocked || mq->broken || !mq->channel_open) {
        log_error("broker %s: not publishing to '%s': %s", mq->where, routing_key,
                  mq->blocked  ? "the broker blocks this connection (resource alarm)"
                  : mq->broken ? "the connection is broken"
                               : "the channel is closed");
        return -1;
    }
    if (mq->round_n == mq->round_cap) {
        int cap = mq->round_cap ? mq->round_cap * 2 : 16;
        mq_copy_t *r = realloc(mq->round, sizeof(*r) * (size_t)cap);
        if (r == NULL)
            return -1;
        mq->round = r;
        mq->round_cap = cap;
    }
    mq_copy_t *c = &mq->round[mq->round_n];
    c->exchange = strdup(exchange);
    c->routing_key = strdup(routing_key);
    if (c->exchange == NULL || c->routing_key == NULL ||
        mq_tag_props(props, mq->pub_seq + 1, tab, MQ_TAG_ENTRIES, &heap, &tagged) != 0) {
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
    c->seq = ++mq->pub_seq;
    c->returned = false;
    c->state = MQ_COPY_PENDING;
    c->why[0] = '\0';
    rc = mq->round_n++;
    goto out;
fail:
    free(c->exchange);
    free(c->routing_key);
out:
    free(heap);
    return rc;
}

/* Settle the round's copies covered by a basic.ack or basic.nack. */
static void mq_settle(mq_t *mq, uint64_t tag, bool multiple, bool acked)
{
    for (int i = 0; i < mq->round_n; i++) {
        mq_copy_t *c = &mq->round[i];
        if (c->state != MQ_COPY_PENDING || (multiple ? c->seq > tag : c->seq != tag))
            continue;
        c->state = acked && !c->returned ? MQ_COPY_ACKED : MQ_COPY_REFUSED;
        if (!acked)
            snprintf(c->why, sizeof(c->why), "refused by the broker (basic.nack)");
        if (c->state == MQ_COPY_REFUSED && strcmp(c->routing_key, MQ_PROBE_QUEUE) != 0)
            log_error("broker %s: copy to exchange '%s' routing key '%s' refused: %s", mq->where,
                      c->exchange, c->routing_key, c->why);
    }
}

static int mq_round_pending(const mq_t *mq)
{
    int n = 0;
    for (int i = 0; i < mq->round_n; i++)
        n += mq->round[i].state == MQ_COPY_PENDING;
    return n;
}

/*
 * A publish the broker refused for its size closes the channel with 406 and
 * "message size N is larger than configured max size M" (RabbitMQ 3.x and
 * 4.x; 4.0 lowered the default M from 128 MiB to 16 MiB): keep M in
 * mq->max_message, so that the publisher's owner sends such copies without
 * their body.
 */
static void mq_learn_max_message(mq_t *mq, const amqp_channel_close_t *m)
{
    static const char tag[] = "configured max size ";
    char text[256];
    unsigned long long max;

    if (m->reply_code != AMQP_PRECONDITION_FAILED || m->reply_text.len >= sizeof(text))
        return;
    memcpy(text, m->reply_text.bytes, m->reply_text.len);
    text[m->reply_text.len] = '\0';
    const char *at = strstr(text, tag);
    if (strstr(text, "message size ") == NULL || at == NULL ||
        sscanf(at + sizeof(tag) - 1, "%llu", &max) != 1 || max == 0)
        return;
    mq->max_message = max;
    log_warn("broker %s: its max message size is %llu bytes: copies with a larger body go out "
             "without it (header idemd-body-dropped)",
             mq->where, max);
}

/*
 * The broker closed the channel or the connection (f holds its close
 * method): log its reply code and text, answer with the close-ok it waits
 * for, and mark the channel closed. role prefixes "channel"/"connection" in
 * the message ("" or "publishing ").
 */
static void mq_closed_by_broker(mq_t *mq, const amqp_frame_t *f, const char *role)
{
    char q[600];
    if (f->payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = f->payload.method.decoded;
        amqp_channel_close_ok_t ok;
        log_error("broker %s: %schannel closed by broker: %u %s", mq->where, role, m->reply_code,
                  log_quote(m->reply_text.bytes, m->reply_text.len, q, sizeof(q)));
        snprintf(mq->closed_why, sizeof(mq->closed_why), "channel closed by the broker: %u %.*s",
                 m->reply_code, (int)m->reply_text.len, (char *)m->reply_text.bytes);
        mq_learn_max_message(mq, m);
        amqp_send_method(mq->conn, MQ_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    } else {
        amqp_connection_close_t *m = f->payload.method.decoded;
        amqp_connection_close_ok_t ok;
        log_error("broker %s: %sconnection closed by broker: %u %s", mq->where, role, m->reply_code,
                  log_quote(m->reply_text.bytes, m->reply_text.len, q, sizeof(q)));
        amqp_send_method(mq->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        mq->broken = true; /* closed: nothing more to say to it */
    }
    mq->channel_open = false;
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
    mq_copy_t *hit = NULL;

    mq->returning = false;
    for (int i = 0; i < mq->round_n && hit == NULL; i++) {
        mq_copy_t *c = &mq->round[i];
        if (c->state != MQ_COPY_PENDING || c->returned)
            continue;
        if (seq >= 0 ? c->seq == (uint64_t)seq
                     : strcmp(c->exchange, mq->ret_exchange) == 0 &&
                           strcmp(c->routing_key, mq->ret_key) == 0)
            hit = c;
    }
    if (hit == NULL)
        return; /* a copy of an earlier round, given up already */
    hit->returned = true;
    snprintf(hit->why, sizeof(hit->why), "unroutable: returned by the broker: %d %s", mq->ret_code,
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
        mq_settle(mq, a->delivery_tag, a->multiple, true);
        return 0;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *n = f->payload.method.decoded;
        mq_settle(mq, n->delivery_tag, n->multiple, false);
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
    uint64_t deadline = mq_now_ms() + (uint64_t)timeout_ms, blocked_end = 0;
    struct timeval tv;
    amqp_frame_t f;
    int rc = 0;

    while (mq_round_pending(mq) > 0) {
        uint64_t now = mq_now_ms();
        /* Blocked, the broker reads nothing more: only confirms already under way come. */
        if (!mq->blocked)
            blocked_end = 0;
        else if (blocked_end == 0)
            blocked_end = now + MQ_BLOCKED_MS;
        uint64_t end = blocked_end && blocked_end < deadline ? blocked_end : deadline;
        if (now >= end) {
            log_error("broker %s: %d of %d copies not confirmed after %d ms%s: giving up on them",
                      mq->where, mq_round_pending(mq), mq->round_n,
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
    for (int i = 0; i < mq->round_n; i++) {
        if (mq->round[i].state == MQ_COPY_PENDING) {
            mq->round[i].state = MQ_COPY_REFUSED;
            snprintf(mq->round[i].why, sizeof(mq->round[i].why), "not confirmed%s%s",
                     mq->closed_why[0] ? ": " : "", mq->closed_why);
        }
        if (mq->round[i].state != MQ_COPY_ACKED)
            rc = -1;
    }
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

void mq_keepalive(mq_t *mq)
{
    uint64_t now = mq_now_ms();
    amqp_frame_t hb;

    if (mq == NULL || mq->broken || amqp_get_heartbeat(mq->conn) <= 0 ||
        now < mq->next_keepalive_ms)
        return;
    mq->next_keepalive_ms = now + 1000;
    memset(&hb, 0, sizeof(hb));
    hb.frame_type = AMQP_FRAME_HEARTBEAT;
    hb.channel = 0;
    (void)amqp_send_frame(mq->conn, &hb); /* a failure shows at the next read */
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
    return index >= 0 && index < mq->round_n && mq->round[index].state == MQ_COPY_ACKED;
}

bool mq_channel_usable(const mq_t *mq)
{
    return mq->channel_open && !mq->broken;
}

const char *mq_round_why(const mq_t *mq, int index)
{
    if (index < 0 || index >= mq->round_n)
        return "not published";
    const mq_copy_t *c = &mq->round[index];
    return c->state == MQ_COPY_ACKED ? NULL : c->why[0] ? c->why : "not confirmed";
}

bool mq_round_returned(const mq_t *mq, int index)
{
    return index >= 0 && index < mq->round_n && mq->round[index].returned;
}

/* Whether the broker closed the channel with reply code 406 and a text containing what. */
static bool mq_refused_for(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION || r.reply.id != AMQP_CHANNEL_CLOSE_METHOD)
        return false;
    const amqp_channel_close_t *m = r.reply.decoded;
    return m->reply_code == AMQP_PRECONDITION_FAILED &&
           memmem(m->reply_text.bytes, m->reply_text.len, what, strlen(what)) != NULL;
}

/*
 * After the broker closed MQ_CHANNEL (a refused RPC): answer with the
 * close-ok it waits for and open the channel again. 0, or -1 (logged).
 */
static int mq_channel_reopen(mq_t *mq)
{
    amqp_channel_close_ok_t ok;

    if (amqp_send_method(mq->conn, MQ_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) !=
        AMQP_STATUS_OK) {
        mq->broken = true;
        log_error("broker %s: cannot answer the channel's close", mq->where);
        return -1;
    }
    return mq_channel_restore(mq);
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

/* What mq_declare_args had to leave off an existing queue (a bit mask). */
#define MQ_LEFT_LIMIT 1 /* the delivery limit arguments (mq_limit_args) */
#define MQ_LEFT_DL 2    /* the dead-letter arguments (mq_dead_letter_args) */

/*
 * queue.declare with arguments: args holds the fixed ones, then n_dl from
 * mq_dead_letter_args, then n_limit from mq_limit_args (last). A queue that
 * exists without one of those groups (declared by an older idemd) cannot get
 * it now: the broker refuses the declaration as inequivalent, naming the
 * argument, so the group it names is left off and the queue declared again
 * (the limit: logged with the remedy; dead letters: the caller warns).
 * quorum: say how to move an older classic queue. Returns the MQ_LEFT_* mask
 * of what was left off (0: declared as asked), or -1 (logged).
 */
static int mq_declare_args(mq_t *mq, const char *name, bool durable, bool quorum, amqp_table_t args,
                           int n_dl, int n_limit)
{
    char what[300];
    bool quiet = mq->quiet;
    amqp_rpc_reply_t r;
    int left = 0;

    for (;;) {
        amqp_queue_declare(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(name), 0, durable, 0, 0, args);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type == AMQP_RESPONSE_NORMAL)
            return left;
        bool limit = n_limit > 0 && mq_refused_for(r, "x-delivery-limit");
        bool dl = !limit && n_dl > 0 &&
                  (mq_refused_for(r, "x-dead-letter-") || mq_refused_for(r, "x-overflow"));
        if (!limit && !dl)
            break;
        mq->quiet = true; /* expected from an older deployment: said below or by the caller */
        snprintf(what, sizeof(what), "declaring queue '%s' with %s", name,
                 limit ? "x-delivery-limit" : "its dead-letter arguments");
        mq_fail(mq, what, r);
        mq->quiet = quiet;
        if (mq_channel_reopen(mq) != 0)
            return -1;
        if (limit) {
            log_warn("queue '%s' exists without x-delivery-limit (declared by an older idemd): "
                     "on RabbitMQ 4.x it keeps the broker's delivery limit (default 20), past "
                     "which a message returned that often is deleted or dead-lettered by the "
                     "broker; idemd cannot change an existing queue's arguments: apply a policy "
                     "with \"delivery-limit\": -1 to it (docs/rabbitmq.md, \"Delivery limits\")",
                     name);
            args.num_entries -= n_limit;
            n_limit = 0;
            left |= MQ_LEFT_LIMIT;
        } else {
            /* The limit group, if still there, moves down over the dead-letter one. */
            amqp_table_entry_t *dl_at = &args.entries[args.num_entries - n_limit - n_dl];
            memmove(dl_at, dl_at + n_dl, (size_t)n_limit * sizeof(*dl_at));
            args.num_entries -= n_dl;
            n_dl = 0;
            left |= MQ_LEFT_DL;
        }
    }
    snprintf(what, sizeof(what), "declaring queue '%s'", name);
    mq_fail(mq, what, r);
    if (quorum && mq_refused_for(r, ""))
        log_error("queue '%s' exists with other arguments, e.g. as a classic queue from before "
                  "declare.quorum = true: drain and delete it (README: \"Moving to quorum "
                  "queues\")",
                  name);
    return -1;
}

/*
 * The arguments that keep the broker from deleting a message of a quorum
 * queue idemd declares, for every queue idemd declares or reads (the main
 * queue, delay tiers, dead letters). RabbitMQ 4.0+ gives a quorum queue
 * without x-delivery-limit a limit of 20 returns, past which a message is
 * dead-lettered, or deleted where the queue has no dead-letter exchange
 * (idemd's own queues have none): -1 turns it off. RabbitMQ 3.x has no
 * default limit, and takes -1 as a limit that every return passes (the
 * message is deleted at its first return): nothing there. Fills e[0..] and
 * returns how many (0 or 1). Keep every change of these lists here.
 */
static int mq_limit_args(const mq_t *mq, amqp_table_entry_t *e)
{
    if (mq->broker_major < 4)
        return 0;
    mq_entry_int(&e[0], "x-delivery-limit", -1);
    return 1;
}

/*
 * The arguments that make one of idemd's own queues (delay tier, dead
 * letters) a quorum queue whose dead-lettering is at-least-once: the broker
 * keeps an expired message until the target confirmed it. That needs
 * x-overflow = reject-publish; with drop-head it silently falls back to
 * at-most-once. Fills e[0..2]; returns 3.
 */
static size_t mq_quorum_args(amqp_table_entry_t *e)
{
    mq_entry_str(&e[0], "x-queue-type", "quorum");
    mq_entry_str(&e[1], "x-dead-letter-strategy", "at-least-once");
    mq_entry_str(&e[2], "x-overflow", "reject-publish");
    return 3;
}

int mq_declare_plain(mq_t *mq, const char *name, bool durable, bool quorum)
{
    amqp_table_entry_t e[4];
    amqp_table_t args = {0, e};
    int n_limit = 0;
    if (quorum) {
        args.num_entries = (int)mq_quorum_args(e);
        n_limit = mq_limit_args(mq, &e[args.num_entries]);
        args.num_entries += n_limit;
    }
    return mq_declare_args(mq, name, durable, quorum, args, 0, n_limit) < 0 ? -1 : 0;
}

int mq_declare_delay(mq_t *mq, const char *name, int ttl_ms, const char *target, bool durable,
                     bool quorum)
{
    amqp_table_entry_t e[7];
    int n_limit = 0;
    mq_entry_int(&e[0], "x-message-ttl", ttl_ms);
    e[0].value.kind = AMQP_FIELD_KIND_I32; /* as first declared: the broker compares types */
    e[0].value.value.i32 = ttl_ms;
    mq_entry_str(&e[1], "x-dead-letter-exchange", "");
    mq_entry_str(&e[2], "x-dead-letter-routing-key", target);
    amqp_table_t args = {3, e};
    if (quorum) {
        args.num_entries += (int)mq_quorum_args(&e[3]);
        n_limit = mq_limit_args(mq, &e[args.num_entries]);
        args.num_entries += n_limit;
    }
    return mq_declare_args(mq, name, durable, quorum, args, 0, n_limit) < 0 ? -1 : 0;
}

/*
 * Close a deaf connection (its input cannot be decoded any more, sending
 * works): the acks and the reject just sent must reach the broker before
 * the socket goes, and closing a socket with unread input resets it. So:
 * send connection.close, then read and throw away what the broker sends,
 * without decoding, until its close-ok shows (sent once every channel has
 * finished, so everything before it was taken in). The read starts at no
 * frame boundary, so close-ok is found by its 12 bytes; over TLS they are
 * not visible, and the wait ends instead once the broker's kernel has
 * acknowledged every byte we sent and MQ_DRAIN_QUIET_MS passed. At most
 * MQ_DRAIN_MS either way.
 */
static void mq_close_deaf(mq_t *mq)
{
    static const unsigned char close_ok[12] = {AMQP_FRAME_METHOD, 0, 0, 0, 0, 0, 4, 0, 10, 0, 51,
                                               AMQP_FRAME_END};
    amqp_connection_close_t m;
    unsigned char buf[16384 + sizeof(close_ok)];
    size_t kept = 0;
    int fd = amqp_get_sockfd(mq->conn);
    uint64_t start = mq_now_ms();

    memset(&m, 0, sizeof(m));
    m.reply_code = AMQP_REPLY_SUCCESS;
    m.reply_text = amqp_cstring_bytes("idemd: a delivery could not be decoded");
    if (fd < 0 || amqp_send_method(mq->conn, 0, AMQP_CONNECTION_CLOSE_METHOD, &m) != 0)
        return;
    for (;;) {
        uint64_t now = mq_now_ms();
        int outq = -1;
        if (mq->tls && now - start >= MQ_DRAIN_QUIET_MS && ioctl(fd, TIOCOUTQ, &outq) == 0 &&
            outq == 0)
            return;
        if (now - start >= MQ_DRAIN_MS) {
            log_warn("broker %s: no close-ok within %d ms of closing a connection that cannot "
                     "read: closing it anyway",
                     mq->where, MQ_DRAIN_MS);
            return;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, MQ_SLICE_MS);
        if (r <= 0)
            continue; /* a timeout, EINTR: the clock decides */
        ssize_t n = recv(fd, buf + kept, sizeof(buf) - kept, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return; /* closed by the broker */
        if (n < 0)
            continue;
        size_t len = kept + (size_t)n;
        if (memmem(buf, len, close_ok, sizeof(close_ok)) != NULL)
            return;
        kept = len < sizeof(close_ok) - 1 ? len : sizeof(close_ok) - 1;
        memmove(buf, buf + len - kept, kept);
    }
}

void mq_close(mq_t *mq)
{
    if (mq == NULL)
        return;
    mq_round_begin(mq);
    free(mq->round);
    if (mq->conn && mq->deaf && !mq->broken) {
        mq_close_deaf(mq);
    } else if (mq->conn && mq->broken) {
        /* Reset, so that the kernel drops what the broker has not read yet. */
        struct linger lg = {1, 0};
        int fd = amqp_get_sockfd(mq->conn);
        if (fd >= 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    } else if (mq->conn) {
        if (mq->channel_open)
            amqp_channel_close(mq->conn, MQ_CHANNEL, AMQP_REPLY_SUCCESS);
        amqp_connection_close(mq->conn, AMQP_REPLY_SUCCESS);
    }
    if (mq->conn)
        amqp_destroy_connection(mq->conn);
    free(mq);
}

/* The value of q's declare argument key, or NULL when absent. */
static const conf_arg_t *mq_conf_arg(const conf_queue_t *q, const char *key)
{
    for (int i = 0; i < q->n_args; i++)
        if (strcmp(q->args[i].key, key) == 0)
            return &q->args[i];
    return NULL;
}

/*
 * The arguments that make q's queue dead-letter what it rejects into q's dead
 * letter queue, appended at e (room for 4): x-dead-letter-exchange "" and
 * x-dead-letter-routing-key. On a quorum queue also x-dead-letter-strategy
 * at-least-once, which needs x-overflow reject-publish (a no-op without a
 * length limit; conf.c allows no other overflow with one): the broker keeps a
 * rejected message until the dead letter queue confirmed it. None when q has
 * no dead letter queue or its declare.arguments name a dead-letter exchange
 * (theirs is used as is). Returns how many.
 */
static int mq_dead_letter_args(const conf_queue_t *q, amqp_table_entry_t *e)
{
    int n = 0;
    if (q->dead_letter_queue == NULL || mq_conf_arg(q, "x-dead-letter-exchange"))
        return 0;
    mq_entry_str(&e[n++], "x-dead-letter-exchange", "");
    mq_entry_str(&e[n++], "x-dead-letter-routing-key", q->dead_letter_queue);
    if (q->quorum && !mq_conf_arg(q, "x-dead-letter-strategy")) {
        const conf_arg_t *ov = mq_conf_arg(q, "x-overflow");
        if (ov == NULL)
            mq_entry_str(&e[n++], "x-overflow", "reject-publish");
        if (ov == NULL || (!ov->is_int && strcmp(ov->sval, "reject-publish") == 0))
            mq_entry_str(&e[n++], "x-dead-letter-strategy", "at-least-once");
    }
    return n;
}

int mq_declare(mq_t *mq, const conf_queue_t *q)
{
    /* Room for x-queue-type, 4 dead-letter and 1 limit arguments beside the configured ones. */
    amqp_table_entry_t *e = calloc((size_t)q->n_args + 6, sizeof(*e));
    amqp_table_t args = {0, e};
    amqp_rpc_reply_t r;
    char what[300];
    int rc = -1, n_dl, n_limit = 0, left;
    bool own_limit = false;

    if (e == NULL)
        return -1;
    if (q->dead_letter_queue &&
        mq_declare_plain(mq, q->dead_letter_queue, q->durable, q->quorum) != 0)
        goto fail;
    if (q->quorum) {
        mq_entry_str(&e[args.num_entries++], "x-queue-type", "quorum");
    }
    for (int i = 0; i < q->n_args; i++) {
        own_limit |= strcmp(q->args[i].key, "x-delivery-limit") == 0;
        if (q->args[i].is_int)
            mq_entry_int(&e[args.num_entries++], q->args[i].key, q->args[i].ival);
        else
            mq_entry_str(&e[args.num_entries++], q->args[i].key, q->args[i].sval);
    }
    /* The dead-letter arguments, then the limit ones: each left off an older queue. */
    n_dl = mq_dead_letter_args(q, &e[args.num_entries]);
    args.num_entries += n_dl;
    if (q->quorum && !own_limit) {
        n_limit = mq_limit_args(mq, &e[args.num_entries]);
        args.num_entries += n_limit;
    }
    if ((left = mq_declare_args(mq, q->name, q->durable, q->quorum, args, n_dl, n_limit)) < 0)
        goto fail;
    mq->limit_unsure = (left & MQ_LEFT_LIMIT) || own_limit;
    mq->dead_letter_fallback = (left & MQ_LEFT_DL) != 0;
    mq->dead_letters =
        mq_conf_arg(q, "x-dead-letter-exchange") != NULL || (n_dl > 0 && !mq->dead_letter_fallback);
    for (int i = 0; i < q->n_bindings; i++) {
        amqp_queue_bind(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(q->name),
                        amqp_cstring_bytes(q->bindings[i].exchange),
                        amqp_cstring_bytes(q->bindings[i].routing_key), amqp_empty_table);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            snprintf(what, sizeof(what), "binding queue '%s' to exchange '%s' key '%s'", q->name,
                     q->bindings[i].exchange, q->bindings[i].routing_key);
            mq_fail(mq, what, r);
            goto fail;
        }
    }
    rc = 0;
fail:
    free(e);
    return rc;
}

int mq_consume(mq_t *mq, const char *queue, int prefetch)
{
    amqp_rpc_reply_t r;
    char what[300];

    amqp_basic_qos(mq->conn, MQ_CHANNEL, 0, (uint16_t)prefetch, 0);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return mq_fail(mq, "basic.qos", r);
    amqp_basic_consume(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        snprintf(what, sizeof(what), "consuming from queue '%s'", queue);
        return mq_fail(mq, what, r);
    }
    return 0;
}

/* Act on a non-delivery frame f read from the consuming connection. */
static mq_status_t mq_dispatch_frame(mq_t *mq, const amqp_frame_t *f)
{
    char buf[256];
    if (f->frame_type != AMQP_FRAME_METHOD)
        return MQ_TIMEOUT; /* stray header/body: ignore */
    switch (f->payload.method.id) {
    case AMQP_BASIC_CANCEL_METHOD:
        log_warn("broker %s: consumer cancelled by the broker (queue deleted?)", mq->where);
        return MQ_CANCELLED;
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
        mq_closed_by_broker(mq, f, "");
        return MQ_ERR_CLOSED;
    case AMQP_CONNECTION_BLOCKED_METHOD:
        log_warn("broker %s: connection blocked by a resource alarm", mq->where);
        return MQ_TIMEOUT;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        log_info("broker %s: connection unblocked", mq->where);
        return MQ_TIMEOUT;
    default:
        snprintf(buf, sizeof(buf), "%s", amqp_method_name(f->payload.method.id));
        log_debug("broker %s: ignoring %s", mq->where, buf);
        return MQ_TIMEOUT;
    }
}

/* Copy bytes b into pool when flag is among flags (empty stays empty). 0, or -1. */
static int mq_pool_dup(amqp_pool_t *pool, amqp_flags_t flags, amqp_flags_t flag, amqp_bytes_t *b)
{
    amqp_bytes_t out;
    if (!(flags & flag)) {
        *b = amqp_empty_bytes; /* unset fields are not initialised by the decoder */
        return 0;
    }
    if (b->len == 0)
        return 0;
    amqp_pool_alloc_bytes(pool, b->len, &out);
    if (out.bytes == NULL)
        return -1;
    memcpy(out.bytes, b->bytes, b->len);
    *b = out;
    return 0;
}

/*
 * Copy decoded properties (which live in the connection's frame pool) into
 * the message's own pool, as amqp_read_message does. 0, or -1.
 */
static int mq_props_clone(const amqp_basic_properties_t *in, amqp_basic_properties_t *out,
                          amqp_pool_t *pool)
{
    amqp_table_t headers;
    amqp_flags_t f = in->_flags;
    *out = *in;
    if (mq_pool_dup(pool, f, AMQP_BASIC_CONTENT_TYPE_FLAG, &out->content_type) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_CONTENT_ENCODING_FLAG, &out->content_encoding) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_CORRELATION_ID_FLAG, &out->correlation_id) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_REPLY_TO_FLAG, &out->reply_to) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_EXPIRATION_FLAG, &out->expiration) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_MESSAGE_ID_FLAG, &out->message_id) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_TYPE_FLAG, &out->type) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_USER_ID_FLAG, &out->user_id) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_APP_ID_FLAG, &out->app_id) != 0 ||
        mq_pool_dup(pool, f, AMQP_BASIC_CLUSTER_ID_FLAG, &out->cluster_id) != 0)
        return -1;
    out->headers.num_entries = 0;
    out->headers.entries = NULL;
    if (f & AMQP_BASIC_HEADERS_FLAG) {
        if (amqp_table_clone(&in->headers, &headers, pool) != AMQP_STATUS_OK)
            return -1;
        out->headers = headers;
    }
    return 0;
}

/*
 * Wait for the next frame on MQ_CHANNEL of a delivery under way. 0, -1
 * (logged), or -2 when its header frame cannot be decoded: rabbitmq-c 0.14+
 * refuses headers nested deeper than 100 levels and then keeps failing on the
 * same frame (its input state is not reset), so mq turns deaf (not logged:
 * the caller knows which delivery it was).
 */
static int mq_content_frame(mq_t *mq, amqp_frame_t *f, uint8_t type)
{
    int st;
    /* connection.blocked/unblocked may come between a delivery's frames: note them, go on. */
    while ((st = amqp_simple_wait_frame(mq->conn, f)) == AMQP_STATUS_OK &&
           f->frame_type == AMQP_FRAME_METHOD && f->channel == 0 &&
           (f->payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD ||
            f->payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD))
        (void)mq_dispatch_frame(mq, f);
    if (st == AMQP_STATUS_BAD_AMQP_DATA) {
        mq->deaf = true;
        if (type == AMQP_FRAME_HEADER)
            return -2;
    }
    if (st != AMQP_STATUS_OK) {
        log_error("broker %s: reading a delivery: %s", mq->where, amqp_error_string2(st));
        return -1;
    }
    if (f->frame_type == AMQP_FRAME_METHOD) {
        (void)mq_dispatch_frame(mq, f);
        log_error("broker %s: a delivery was cut short by a %s", mq->where,
                  amqp_method_name(f->payload.method.id));
        return -1;
    }
    if (f->frame_type != type || f->channel != MQ_CHANNEL) {
        log_error("broker %s: unexpected frame type %u on channel %u in a delivery", mq->where,
                  (unsigned)f->frame_type, (unsigned)f->channel);
        return -1;
    }
    return 0;
}

/*
 * Read the header and body frames of the delivery whose basic.deliver was
 * just read, into env->message. A body larger than max_body is read frame
 * by frame and thrown away (never held whole): env->message.body stays
 * empty and *dropped holds its size. The connection's frames are released
 * after each one, so memory stays at one frame. 0, -1 (logged), or -2 when
 * the header frame cannot be decoded (mq is deaf).
 */
static int mq_read_content(mq_t *mq, amqp_envelope_t *env, size_t max_body, uint64_t *dropped)
{
    amqp_frame_t f;
    amqp_message_t *m = &env->message;
    size_t got = 0;

    init_amqp_pool(&m->pool, 4096);
    int rc = mq_content_frame(mq, &f, AMQP_FRAME_HEADER);
    if (rc != 0)
        return rc;
    uint64_t size = f.payload.properties.body_size;
    if (mq_props_clone(f.payload.properties.decoded, &m->properties, &m->pool) != 0) {
        log_error("broker %s: out of memory copying a delivery's properties", mq->where);
        return -1;
    }
    if (size > max_body)
        *dropped = size;
    else if (size > 0) {
        m->body = amqp_bytes_malloc((size_t)size);
        if (m->body.bytes == NULL) {
            log_error("broker %s: out of memory for a body of %llu bytes", mq->where,
                      (unsigned long long)size);
            return -1;
        }
    }
    while (got < size) {
        amqp_maybe_release_buffers_on_channel(mq->conn, MQ_CHANNEL);
        if (mq_content_frame(mq, &f, AMQP_FRAME_BODY) != 0)
            return -1;
        size_t len = f.payload.body_fragment.len;
        if (len > size - got) {
            log_error("broker %s: a delivery's body is longer than its header said", mq->where);
            return -1;
        }
        if (*dropped == 0)
            memcpy((char *)m->body.bytes + got, f.payload.body_fragment.bytes, len);
        got += len;
    }
    return 0;
}

mq_status_t mq_next(mq_t *mq, const struct timeval *timeout, size_t max_body, amqp_envelope_t *env,
                    uint64_t *dropped)
{
    amqp_frame_t f;
    struct timeval tv, *tvp = NULL;

    *dropped = 0;
    memset(env, 0, sizeof(*env));
    amqp_maybe_release_buffers(mq->conn);
    if (timeout) {
        tv = *timeout;
        tvp = &tv;
    }
    int st = amqp_simple_wait_frame_noblock(mq->conn, &f, tvp);
    if (st == AMQP_STATUS_TIMEOUT)
        return MQ_TIMEOUT;
    if (st != AMQP_STATUS_OK) {
        log_error("broker %s: waiting for deliveries: %s", mq->where, amqp_error_string2(st));
        mq->channel_open = false;
        return MQ_ERR_CLOSED;
    }
    if (f.frame_type != AMQP_FRAME_METHOD || f.payload.method.id != AMQP_BASIC_DELIVER_METHOD)
        return mq_dispatch_frame(mq, &f);
    const amqp_basic_deliver_t *d = f.payload.method.decoded;
    env->channel = f.channel;
    env->delivery_tag = d->delivery_tag;
    env->redelivered = d->redelivered;
    env->consumer_tag = amqp_bytes_malloc_dup(d->consumer_tag);
    env->exchange = amqp_bytes_malloc_dup(d->exchange);
    env->routing_key = amqp_bytes_malloc_dup(d->routing_key);
    if ((d->consumer_tag.len && env->consumer_tag.bytes == NULL) ||
        (d->exchange.len && env->exchange.bytes == NULL) ||
        (d->routing_key.len && env->routing_key.bytes == NULL)) {
        log_error("broker %s: out of memory reading a delivery", mq->where);
        goto fail;
    }
    int rc = mq_read_content(mq, env, max_body, dropped);
    if (rc == -2)
        return MQ_UNDECODABLE; /* env keeps the tag and route for the caller's log */
    if (rc != 0)
        goto fail;
    return MQ_OK;
fail:
    amqp_destroy_envelope(env);
    mq->channel_open = false;
    return MQ_ERR_CLOSED;
}

int mq_ack(mq_t *mq, uint64_t tag, bool multiple)
{
    int st = amqp_basic_ack(mq->conn, MQ_CHANNEL, tag, multiple);
    if (st != AMQP_STATUS_OK) {
        log_error("broker %s: ack of delivery %llu failed: %s", mq->where, (unsigned long long)tag,
                  amqp_error_string2(st));
        return -1;
    }
    return 0;
}

int mq_nack(mq_t *mq, uint64_t tag, bool requeue)
{
    int st = amqp_basic_nack(mq->conn, MQ_CHANNEL, tag, 0, requeue);
    if (st != AMQP_STATUS_OK) {
        log_error("broker %s: nack of delivery %llu failed: %s", mq->where, (unsigned long long)tag,
                  amqp_error_string2(st));
        return -1;
    }
    return 0;
}
