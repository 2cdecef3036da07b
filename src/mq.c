/* mq.c: one AMQP connection with one channel (rabbitmq-c): connect, consume, ack, close. */
#include "mq.h"
#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "mq_int.h"
#include "copies.h"
#include "version.h"

#define MQ_DRAIN_MS 5000 /* a deaf connection's close: wait at most this long (mq_close_deaf) */
#define MQ_DRAIN_QUIET_MS 1000 /* ... and over TLS at least this long */

void mq_tick(mq_t *mq)
{
    if (mq->tick)
        mq->tick(mq->tick_arg);
}

/* Fill one field-table entry; key and value are borrowed (they must outlive the table). */
void mq_entry_str(amqp_table_entry_t *e, const char *key, const char *value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(value);
}

void mq_entry_int(amqp_table_entry_t *e, const char *key, int64_t value)
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
int mq_fail(mq_t *mq, const char *what, amqp_rpc_reply_t r)
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
    pubround_init(&mq->round, mq->where);
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
    r = amqp_login_with_properties(mq->conn, cfg->vhost, 0, COPIES_FRAME_MAX, heartbeat, &props,
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
int mq_connect_any(const conf_broker_t *cfg, int start, const char *owner, const char *role,
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
void mq_closed_by_broker(mq_t *mq, const amqp_frame_t *f, const char *role)
{
    char q[600];
    if (f->payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = f->payload.method.decoded;
        amqp_channel_close_ok_t ok;
        log_error("broker %s: %schannel closed by broker: %u %s", mq->where, role, m->reply_code,
                  log_quote(m->reply_text.bytes, m->reply_text.len, q, sizeof(q)));
        char why[PUBROUND_WHY_MAX / 2];
        snprintf(why, sizeof(why), "channel closed by the broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
        pubround_channel_closed(&mq->round, why);
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

void mq_keepalive(mq_t *mq)
{
    uint64_t now = clock_mono_ms();
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
    uint64_t start = clock_mono_ms();

    memset(&m, 0, sizeof(m));
    m.reply_code = AMQP_REPLY_SUCCESS;
    m.reply_text = amqp_cstring_bytes("idemd: a delivery could not be decoded");
    if (fd < 0 || amqp_send_method(mq->conn, 0, AMQP_CONNECTION_CLOSE_METHOD, &m) != 0)
        return;
    for (;;) {
        uint64_t now = clock_mono_ms();
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
    pubround_free(&mq->round);
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

int mq_consume(mq_t *mq, const char *queue, int prefetch)
{
    amqp_rpc_reply_t r;
    char what[300];

    amqp_basic_qos(mq->conn, MQ_CHANNEL, 0, (uint16_t)prefetch, 0);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return mq_fail(mq, "basic.qos", r);
    amqp_basic_consume_ok_t *ok =
        amqp_basic_consume(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0,
                           0, amqp_empty_table);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL || ok == NULL) {
        snprintf(what, sizeof(what), "consuming from queue '%s'", queue);
        return mq_fail(mq, what, r);
    }
    snprintf(mq->ctag, sizeof(mq->ctag), "%.*s", (int)ok->consumer_tag.len,
             (const char *)ok->consumer_tag.bytes);
    return 0;
}

int mq_cancel(mq_t *mq)
{
    if (mq == NULL || !mq->channel_open || mq->broken || mq->deaf || mq->ctag[0] == '\0')
        return -1;
    /* The RPC queues the deliveries that arrive before cancel-ok (amqp_simple_rpc). */
    amqp_basic_cancel(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(mq->ctag));
    amqp_rpc_reply_t r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return mq_fail(mq, "basic.cancel", r);
    mq->ctag[0] = '\0';
    return 0;
}

bool mq_pending(const mq_t *mq)
{
    return mq && mq->conn && (amqp_frames_enqueued(mq->conn) || amqp_data_in_buffer(mq->conn));
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
