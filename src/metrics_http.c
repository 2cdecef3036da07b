/* metrics_http.c: the HTTP endpoint of /metrics and /status (libmicrohttpd), run from the caller's
 * loop: connection limits, deadlines and the bearer token. */
#include "metrics.h"
#include "clock.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define METRICS_CONNECTIONS 16 /* scrapers at once; more are refused */
#define METRICS_PER_CLIENT 4   /* connections from one address at once; more are refused */
/* Seconds from a connection's start, or its last answered request, to the end of the next
 * request: a total deadline, so a slow sender cannot push it back byte by byte. */
#define METRICS_REQUEST_TIMEOUT 5
#define METRICS_REFUSED_LOG_MS 60000 /* one log line about refused tokens per minute at most */

/* One open connection of the listener. */
typedef struct metrics_conn {
    int fd;               /* its socket (MHD's), -1: free */
    uint64_t deadline_ms; /* CLOCK_MONOTONIC; 0 once it was shut down */
    char peer[INET6_ADDRSTRLEN];
} metrics_conn_t;

struct metrics_server {
    struct MHD_Daemon *d;
    metrics_collect_fn collect;
    void *ctx;
    const char *version;
    metrics_conn_t conns[METRICS_CONNECTIONS];
    bool auth;                                     /* a bearer token is required */
    unsigned char token_sha[SHA256_DIGEST_LENGTH]; /* SHA-256 of the token: the token is not kept */
    uint64_t refused_logged_ms;                    /* when a refusal was last logged */
    unsigned refused_unlogged;                     /* refusals since, not logged */
};

/* ---------------------------------------------------------------------- */
/* HTTP */

static void metrics_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    (void)cls;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t len = strlen(buf);
    while (len && buf[len - 1] == '\n')
        buf[--len] = '\0';
    log_warn("metrics: %s", buf);
}

/*
 * Keep track of the connections: sockets for metrics_forget_fds, deadlines, peers for the log.
 * The entry rides in the connection's socket context from start to close. An entry still
 * holding a starting connection's socket is stale (its close was never seen): it is reused.
 */
static void metrics_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe)
{
    metrics_server_t *s = cls;
    metrics_conn_t *c = *socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED) {
        if (c) {
            log_debug("metrics: connection from %s closed", c->peer);
            c->fd = -1;
        }
        *socket_context = NULL;
        return;
    }
    /* libmicrohttpd 1.0 answers every query of a connection in one union: copy at once. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return;
    int fd = ci->connect_fd;
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    c = NULL;
    for (int i = 0; i < METRICS_CONNECTIONS && c == NULL; i++)
        if (s->conns[i].fd == fd)
            c = &s->conns[i];
    for (int i = 0; i < METRICS_CONNECTIONS && c == NULL; i++)
        if (s->conns[i].fd == -1)
            c = &s->conns[i];
    if (c == NULL)
        return;
    c->fd = fd;
    c->deadline_ms = clock_mono_ms() + METRICS_REQUEST_TIMEOUT * 1000;
    snprintf(c->peer, sizeof(c->peer), "?");
    if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)ai->client_addr)->sin_addr,
                  c->peer, sizeof(c->peer));
    else if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6,
                  &((const struct sockaddr_in6 *)(const void *)ai->client_addr)->sin6_addr, c->peer,
                  sizeof(c->peer));
    *socket_context = c;
    log_debug("metrics: connection from %s opened", c->peer);
}

/* A request was answered (or failed): the next one on the connection gets its own deadline. */
static void metrics_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    metrics_conn_t *c = ci ? ci->socket_context : NULL;
    (void)cls;
    (void)con_cls;
    (void)toe;
    if (c && c->deadline_ms)
        c->deadline_ms = clock_mono_ms() + METRICS_REQUEST_TIMEOUT * 1000;
}

/*
 * Shut down the connections whose request did not end by its deadline. MHD's own timeout
 * starts again with every byte read; this one does not. shutdown() leaves the socket to MHD,
 * which sees the end of the stream at its next turn and closes it.
 */
static void metrics_expire(metrics_server_t *s)
{
    uint64_t now = clock_mono_ms();
    for (int i = 0; i < METRICS_CONNECTIONS; i++) {
        metrics_conn_t *c = &s->conns[i];
        if (c->fd < 0 || !c->deadline_ms || now < c->deadline_ms)
            continue;
        log_info("metrics: closing a connection from %s: no complete request within %d s", c->peer,
                 METRICS_REQUEST_TIMEOUT);
        (void)shutdown(c->fd, SHUT_RDWR);
        c->deadline_ms = 0;
    }
}

/*
 * Whether the request carries the bearer token (always, without one): the scheme matched
 * without regard to case (RFC 9110), the token exactly. The digests, not the tokens, are
 * compared, in constant time, so neither the content nor the length of the token leaks through
 * the time an answer takes. *why is what was wrong, for the log.
 */
static bool metrics_authorized(const metrics_server_t *s, struct MHD_Connection *conn,
                               const char **why)
{
    unsigned char got[SHA256_DIGEST_LENGTH];
    if (!s->auth)
        return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
        *why = h ? "an Authorization header that is not Bearer" : "no Authorization header";
        return false;
    }
    for (h += 7; *h == ' '; h++)
        ;
    SHA256((const unsigned char *)h, strlen(h), got);
    if (CRYPTO_memcmp(got, s->token_sha, sizeof(got)) != 0) {
        *why = "a wrong bearer token";
        return false;
    }
    return true;
}

/* Log a refused request: the first, then at most one line a minute with a count. */
static void metrics_log_refused(metrics_server_t *s, struct MHD_Connection *conn, const char *why)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const metrics_conn_t *c = ci ? ci->socket_context : NULL;
    uint64_t now = clock_mono_ms();
    if (s->refused_logged_ms && now - s->refused_logged_ms < METRICS_REFUSED_LOG_MS) {
        s->refused_unlogged++;
        return;
    }
    char more[80] = "";
    if (s->refused_unlogged)
        snprintf(more, sizeof(more), "; %u more refused since the last such line",
                 s->refused_unlogged);
    log_warn("metrics: refused a request from %s with 401: %s (see metrics.token_file)%s",
             c ? c->peer : "?", why, more);
    s->refused_logged_ms = now;
    s->refused_unlogged = 0;
}

/* Whether an Accept header asks for OpenMetrics text (at a q above 0). */
static bool metrics_wants_openmetrics(const char *accept)
{
    for (const char *p = accept; p && (p = strcasestr(p, "application/openmetrics-text")) != NULL;
         p++) {
        const char *end = strchr(p, ',');
        const char *q = strstr(p, "q=");
        if (q == NULL || (end && q > end) || strtod(q + 2, NULL) > 0)
            return true;
    }
    return false;
}

/* Answer one request: 401 without the token (when one is set); GET or HEAD /metrics or /status,
 * else 404 / 405. */
static enum MHD_Result metrics_answer(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    metrics_server_t *s = cls;
    struct MHD_Response *r = NULL;
    char *body = NULL;
    size_t len = 0;
    unsigned code = MHD_HTTP_OK;
    const char *type = "text/plain; version=0.0.4; charset=utf-8";
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;

    const char *why = NULL;
    if (!metrics_authorized(s, conn, &why)) {
        metrics_log_refused(s, conn, why);
        code = MHD_HTTP_UNAUTHORIZED;
        body = strdup("idemd needs Authorization: Bearer TOKEN (metrics.token_file)\n");
    } else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
        body = strdup("only GET\n");
    } else if (strcmp(url, "/status") == 0) {
        metrics_queue_t *qs = NULL;
        int n = 0;
        s->collect(s->ctx, &qs, &n);
        body = metrics_status_json(qs, n, s->version);
        type = "application/json";
    } else if (strcmp(url, "/metrics") != 0) {
        code = MHD_HTTP_NOT_FOUND;
        body = strdup("idemd serves /metrics and /status\n");
    } else {
        metrics_queue_t *qs = NULL;
        int n = 0;
        FILE *out = open_memstream(&body, &len);
        if (out == NULL)
            return MHD_NO;
        s->collect(s->ctx, &qs, &n);
        /* Exemplars only for a scraper that asks for OpenMetrics (Prometheus does). */
        const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
        if (metrics_wants_openmetrics(accept)) {
            metrics_render_openmetrics(out, qs, n, s->version);
            type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        } else {
            metrics_render(out, qs, n, s->version);
        }
        if (fclose(out) != 0) {
            free(body);
            return MHD_NO;
        }
    }
    if (body == NULL)
        return MHD_NO;
    r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            code == MHD_HTTP_OK ? type : "text/plain; charset=utf-8");
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                why && strcmp(why, "a wrong bearer token") == 0
                                    ? "Bearer realm=\"idemd\", error=\"invalid_token\""
                                    : "Bearer realm=\"idemd\"");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

metrics_server_t *metrics_start(const struct sockaddr_storage *addr, const char *listen,
                                metrics_collect_fn collect, void *ctx, const char *version)
{
    metrics_server_t *s = calloc(1, sizeof(*s));
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    uint16_t port;

    if (s == NULL) {
        log_error("metrics: out of memory");
        return NULL;
    }
    s->collect = collect;
    s->ctx = ctx;
    s->version = version;
    for (int i = 0; i < METRICS_CONNECTIONS; i++)
        s->conns[i].fd = -1;
    if (addr->ss_family == AF_INET6) {
        flags |= MHD_USE_IPv6;
        port = ntohs(((const struct sockaddr_in6 *)(const void *)addr)->sin6_port);
    } else {
        port = ntohs(((const struct sockaddr_in *)(const void *)addr)->sin_port);
    }
    /* No MHD_USE_INTERNAL_POLLING_THREAD: the caller's loop runs it (see metrics.h). */
    s->d = MHD_start_daemon(flags, port, NULL, NULL, metrics_answer, s, MHD_OPTION_EXTERNAL_LOGGER,
                            metrics_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONNECTIONS,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)METRICS_PER_CLIENT,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_REQUEST_TIMEOUT,
                            MHD_OPTION_NOTIFY_CONNECTION, metrics_notify, s,
                            MHD_OPTION_NOTIFY_COMPLETED, metrics_completed, s, MHD_OPTION_END);
    if (s->d == NULL) {
        log_error("metrics: cannot listen on %s (address in use or not local?)", listen);
        free(s);
        return NULL;
    }
    log_info("metrics: serving http://%s/metrics", listen);
    return s;
}

void metrics_set_token(metrics_server_t *s, const char *token)
{
    unsigned char sha[SHA256_DIGEST_LENGTH] = {0};
    if (s == NULL)
        return;
    if (token)
        SHA256((const unsigned char *)token, strlen(token), sha);
    bool changed = s->auth != (token != NULL) || CRYPTO_memcmp(sha, s->token_sha, sizeof(sha));
    s->auth = token != NULL;
    memcpy(s->token_sha, sha, sizeof(sha));
    explicit_bzero(sha, sizeof(sha));
    if (!changed)
        return;
    if (s->auth)
        log_info("metrics: bearer token set from metrics.token_file: requests without it get 401");
    else
        log_info("metrics: no bearer token (metrics.token_file not set): requests need none");
}

int metrics_fd(const metrics_server_t *s)
{
    if (s == NULL)
        return -1;
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    return i ? i->epoll_fd : -1;
}

void metrics_serve(metrics_server_t *s)
{
    if (s == NULL)
        return;
    (void)MHD_run(s->d);
    metrics_expire(s);
}

void metrics_forget_fds(metrics_server_t *s)
{
    if (s == NULL)
        return;
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
    if (i && i->listen_fd >= 0)
        close(i->listen_fd);
    int efd = metrics_fd(s);
    if (efd >= 0)
        close(efd);
    for (int k = 0; k < METRICS_CONNECTIONS; k++)
        if (s->conns[k].fd >= 0)
            close(s->conns[k].fd);
    explicit_bzero(s->token_sha, sizeof(s->token_sha));
}

void metrics_stop(metrics_server_t *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->d);
    explicit_bzero(s->token_sha, sizeof(s->token_sha));
    free(s);
}
