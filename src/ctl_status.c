/* ctl_status.c: idemctl status: each queue as the broker, the database and the daemon see it. */
#include <errno.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl.h"
#include "log.h"

#define CTL_STATUS_TIMEOUT_MS 3000 /* to read the daemon's /status */
#define CTL_STATUS_MAX (1 << 20)   /* longest /status answer taken */

/* ---------- status ---------- */

/* Wait up to ms for fd to be ready for events; 1 ready, 0 timeout, -1 error. */
static int ctl_wait_fd(int fd, short events, int ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    int r;
    while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return r;
}

/*
 * GET /status from the daemon at metrics.listen (HTTP/1.0, the answer read
 * to its end), with the token of metrics.token_file when that is set. Returns the parsed document
 * (the caller puts it), or NULL with why written to err.
 */
static json_object *ctl_daemon_status(const conf_t *conf, char *err, size_t errlen)
{
    const struct sockaddr_storage *a = &conf->metrics.addr;
    socklen_t alen =
        a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    const char *tok = conf->metrics.token;
    char *buf = NULL, *req = NULL;
    size_t len = 0, cap = 0;
    json_object *doc = NULL;
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int reqlen = asprintf(&req, "GET /status HTTP/1.0\r\nHost: idemd\r\n%s%s%s\r\n",
                          tok ? "Authorization: Bearer " : "", tok ? tok : "", tok ? "\r\n" : "");

    if (reqlen < 0) {
        req = NULL;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto out;
    }
    if (connect(fd, (const struct sockaddr *)a, alen) != 0) {
        int e = errno, so = 0;
        socklen_t sl = sizeof(so);
        if (e != EINPROGRESS) {
            snprintf(err, errlen, "connect: %s", strerror(e));
            goto out;
        }
        if (ctl_wait_fd(fd, POLLOUT, CTL_STATUS_TIMEOUT_MS) <= 0) {
            snprintf(err, errlen, "connect: no answer in %d ms", CTL_STATUS_TIMEOUT_MS);
            goto out;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0 || so != 0) {
            snprintf(err, errlen, "connect: %s", strerror(so ? so : errno));
            goto out;
        }
    }
    if (send(fd, req, (size_t)reqlen, MSG_NOSIGNAL) != (ssize_t)reqlen) {
        snprintf(err, errlen, "send: %s", strerror(errno));
        goto out;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *more = cap + 8192 > CTL_STATUS_MAX ? NULL : realloc(buf, cap + 8192);
            if (more == NULL) {
                snprintf(err, errlen, "answer longer than %d bytes", CTL_STATUS_MAX);
                goto out;
            }
            buf = more;
            cap += 8192;
        }
        if (ctl_wait_fd(fd, POLLIN, CTL_STATUS_TIMEOUT_MS) <= 0) {
            snprintf(err, errlen, "no answer in %d ms", CTL_STATUS_TIMEOUT_MS);
            goto out;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) == 0 && strlen(buf) >= 12 && strncmp(buf + 9, "401", 3) == 0) {
        snprintf(err, errlen,
                 tok ? "answered 401: it wants another token than metrics.token_file holds "
                       "(changed without a reload of idemd?)"
                     : "answered 401: it wants a token, and metrics.token_file is not set here");
        goto out;
    }
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strlen(buf) < 12 || strncmp(buf + 9, "200", 3) != 0 ||
        body == NULL) {
        buf[strcspn(buf, "\r\n")] = '\0';
        snprintf(err, errlen, "answered '%.40s' (an idemd older than /status?)", buf);
        goto out;
    }
    doc = json_tokener_parse(body + 4);
    if (doc == NULL || !json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        doc = NULL;
        snprintf(err, errlen, "the answer is not a JSON object");
    }
out:
    if (fd >= 0)
        close(fd);
    if (req) {
        explicit_bzero(req, strlen(req));
        free(req);
    }
    free(buf);
    return doc;
}

/* The queue named name in the daemon's status document, or NULL. */
static json_object *ctl_daemon_queue(json_object *doc, const char *name)
{
    json_object *qs;
    if (doc == NULL || !json_object_object_get_ex(doc, "queues", &qs))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(qs); i++) {
        json_object *q = json_object_array_get_idx(qs, i), *n;
        if (json_object_object_get_ex(q, "queue", &n) &&
            strcmp(json_object_get_string(n), name) == 0)
            return q;
    }
    return NULL;
}

/* Integer member key of o, or -1. */
static long long ctl_json_ll(json_object *o, const char *key)
{
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : -1;
}

/* What status shows of one configured queue, gathered from the broker, the database and the
 * daemon. The json pointers are borrowed from the daemon's /status document. */
typedef struct ctl_qstat {
    const conf_queue_t *q;
    bool present; /* the queue exists on the broker */
    unsigned ready, consumers, dl, delayed;
    long long recent, attempts; /* records of the last minute; attempts rows */
    int obs;                    /* ctl_outbox_counts: 0 when ob holds its counts */
    long long ob[3];            /* outbox rows, retrying, exhausted */
    json_object *derror, *dr;   /* the daemon's last_error and restarts of the queue, or NULL */
    long long up, nw, nmax;     /* workers consuming, running, at most (-1: not known) */
    bool autos;                 /* workers = "auto" in the file */
    char wbuf[24];              /* the count of workers the queue runs, as text */
} ctl_qstat_t;

/*
 * s's broker fields: ready messages and consumers of q (s->present when
 * it exists), its dead letters and the messages in its delay queues.
 * 0, or -1 when the broker cannot be asked (logged).
 */
static int ctl_status_broker(mq_t *mq, const conf_queue_t *q, ctl_qstat_t *s)
{
    char name[512];
    unsigned m, c;

    int st = ctl_queue_peek(mq, q->name, &s->ready, &s->consumers);
    if (st < 0)
        return -1;
    s->present = st == 0;
    if (q->dead_letter_queue && ctl_queue_peek(mq, q->dead_letter_queue, &s->dl, &c) < 0)
        return -1;
    for (int t = 0; t < q->n_retry_delays; t++) {
        snprintf(name, sizeof(name), "%s.retry.%d", q->name, q->retry_delays_ms[t]);
        st = ctl_queue_peek(mq, name, &m, &c);
        if (st < 0)
            return -1;
        s->delayed += st == 0 ? m : 0;
    }
    return 0;
}

/*
 * s's database fields: records committed for q's consumer in the last
 * minute, its attempts rows and its outbox counts. 0, or -1 when a query
 * failed (logged).
 */
static int ctl_status_db(ctl_t *ctl, db_t *db, const conf_queue_t *q, ctl_qstat_t *s)
{
    char sql[1200], vals[2][64];
    char *hc = ctl_hex(q->consumer, strlen(q->consumer));

    if (hc == NULL)
        return -1;
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM `%s` WHERE create_time >= NOW(3) - INTERVAL 60 SECOND AND "
             "consumer = %s",
             ctl->conf->database.record_table, hc);
    int got = ctl_query_row(db, sql, vals, 1);
    if (got == 1)
        s->recent = atoll(vals[0]);
    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM " DB_ATTEMPT_TABLE " WHERE consumer = %s", hc);
    free(hc);
    if (got < 0 || (got = ctl_query_row(db, sql, vals, 1)) < 0)
        return -1;
    s->attempts = got == 1 ? atoll(vals[0]) : 0;
    s->obs = ctl_outbox_counts(ctl, db, q->consumer, s->ob);
    return s->obs < 0 ? -1 : 0;
}

/* s's daemon fields from the daemon's /status document (NULL: not read): the queue's workers,
 * restarts and last error. */
static void ctl_status_daemon(json_object *daemon, const conf_queue_t *q, ctl_qstat_t *s)
{
    json_object *dq = ctl_daemon_queue(daemon, q->name), *v;

    s->derror = NULL;
    s->dr = NULL;
    if (dq && json_object_object_get_ex(dq, "last_error", &v) && v)
        s->derror = v;
    if (dq)
        json_object_object_get_ex(dq, "restarts", &s->dr);
    s->up = ctl_json_ll(dq, "consuming");
    /* The count the queue runs: the daemon's (workers = "auto" chooses it), else the file's. */
    s->nw = ctl_json_ll(dq, "workers");
    s->nmax = ctl_json_ll(dq, "workers_max");
    s->autos = q->workers == CONF_WORKERS_AUTO;
    if (s->nw >= 0)
        snprintf(s->wbuf, sizeof(s->wbuf), "%lld", s->nw);
    else if (s->autos)
        snprintf(s->wbuf, sizeof(s->wbuf), "auto");
    else
        snprintf(s->wbuf, sizeof(s->wbuf), "%d", q->workers);
}

/* One queue's status as an object of the --json array ctl->out; dstate says whether the daemon
 * answered. */
static void ctl_status_json(ctl_t *ctl, const ctl_qstat_t *s, const char *dstate)
{
    const conf_queue_t *q = s->q;
    json_object *o = json_object_new_object();

    json_object_object_add(o, "queue", ctl_json_text(q->name));
    json_object_object_add(o, "consumer", ctl_json_text(q->consumer));
    json_object_object_add(o, "present", json_object_new_boolean(s->present));
    json_object_object_add(o, "workers_configured",
                           s->autos ? ctl_json_text("auto") : json_object_new_int(q->workers));
    json_object_object_add(o, "workers", s->nw >= 0 ? json_object_new_int64(s->nw) : NULL);
    json_object_object_add(o, "workers_max", s->nmax >= 0 ? json_object_new_int64(s->nmax) : NULL);
    json_object_object_add(o, "consumers", json_object_new_int64(s->consumers));
    json_object_object_add(o, "ready", json_object_new_int64(s->ready));
    json_object_object_add(o, "dead_letter_queue",
                           q->dead_letter_queue ? ctl_json_text(q->dead_letter_queue) : NULL);
    json_object_object_add(o, "dead_letters", json_object_new_int64(s->dl));
    json_object_object_add(o, "delayed", json_object_new_int64(s->delayed));
    json_object_object_add(o, "records_last_60s", json_object_new_int64(s->recent));
    json_object_object_add(o, "rate_per_s", json_object_new_double(s->recent / 60.0));
    json_object_object_add(o, "attempt_rows", json_object_new_int64(s->attempts));
    if (s->obs == 0) {
        json_object *oo = json_object_new_object();
        json_object_object_add(oo, "rows", json_object_new_int64(s->ob[0]));
        json_object_object_add(oo, "retrying", json_object_new_int64(s->ob[1]));
        json_object_object_add(oo, "exhausted", json_object_new_int64(s->ob[2]));
        json_object_object_add(o, "outbox", oo);
    } else {
        json_object_object_add(o, "outbox", NULL);
    }
    json_object_object_add(o, "daemon", ctl_json_text(dstate));
    json_object_object_add(o, "workers_up", s->up >= 0 ? json_object_new_int64(s->up) : NULL);
    json_object_object_add(o, "restarts", s->dr ? json_object_get(s->dr) : NULL);
    json_object_object_add(o, "last_error", s->derror ? json_object_get(s->derror) : NULL);
    json_object_array_add(ctl->out, o);
}

/* One queue's status as a line of text, its fields escaped (ctl_out.c). */
static void ctl_status_text(const ctl_qstat_t *s)
{
    const conf_queue_t *q = s->q;
    char upbuf[48] = "?", rsbuf[32] = "?", errbuf[600] = "none", obbuf[80] = "-";
    json_object *t, *age;

    if (s->obs == 0)
        snprintf(obbuf, sizeof(obbuf), "%lld/%lld/%lld", s->ob[0], s->ob[1], s->ob[2]);
    if (s->up >= 0)
        snprintf(upbuf, sizeof(upbuf), "%lld/%s", s->up, s->wbuf);
    if (s->dr) {
        long long sum = 0;
        json_object_object_foreach(s->dr, kind, count)
        {
            (void)kind;
            sum += json_object_get_int64(count);
        }
        snprintf(rsbuf, sizeof(rsbuf), "%lld", sum);
    }
    if (s->derror && json_object_object_get_ex(s->derror, "text", &t) &&
        json_object_object_get_ex(s->derror, "age_seconds", &age))
        snprintf(errbuf, sizeof(errbuf), "%.0fs ago: %s", json_object_get_double(age),
                 json_object_get_string(t));
    /* The separator is ours, the field may hold anything: only %s arguments are
     * escaped (ctl_out.c), so the tab stays in the format. */
    char maxbuf[40] = "";
    if (s->autos && s->nmax >= 0)
        snprintf(maxbuf, sizeof(maxbuf), "workers=auto(max %lld)", s->nmax);
    else if (s->autos)
        snprintf(maxbuf, sizeof(maxbuf), "workers=auto");
    ctl_printf("%s\t%s\tconsumers=%u/%s\tready=%u\tdead_letters=%u\tdelayed=%u\t"
               "records_60s=%lld\trate=%.2f/s\tattempt_rows=%lld\toutbox=%s\tworkers_up=%s\t"
               "restarts=%s\tlast_error=%s",
               q->name, s->present ? "present" : "absent", s->consumers, s->wbuf, s->ready, s->dl,
               s->delayed, s->recent, s->recent / 60.0, s->attempts, obbuf, upbuf, rsbuf, errbuf);
    if (s->autos)
        ctl_printf("\t%s", maxbuf);
    ctl_printf("\n");
}

/*
 * status: per configured queue, from the broker (passive declares) and the
 * database: consumers attached (one per running worker), ready messages,
 * dead letters, messages waiting in delay queues, records committed in the
 * last minute, attempts rows; and from the daemon (GET /status at
 * metrics.listen, when set): its workers consuming, restarts and the last
 * error or warning about the queue's workers. A daemon that cannot be read
 * makes the exit code CTL_EXIT_PARTIAL after everything else is shown.
 */
int ctl_status(ctl_t *ctl)
{
    mq_t *mq = NULL;
    db_t *db = NULL;
    int rc = CTL_EXIT_OK;
    char derr[256] = "";
    json_object *daemon = NULL;
    const char *dstate = "not configured";

    if (ctl->conf->metrics.listen) {
        daemon = ctl_daemon_status(ctl->conf, derr, sizeof(derr));
        dstate = daemon ? "ok" : "unreachable";
        if (daemon == NULL)
            ctl_fprintf(stderr, "idemctl: the daemon at %s did not answer GET /status: %s\n",
                        ctl->conf->metrics.listen, derr);
    } else {
        ctl_fprintf(stderr,
                    "idemctl: metrics.listen is not set in %s: the daemon's workers and last "
                    "errors are not shown\n",
                    ctl->conf->path);
    }

    if (mq_open(&ctl->conf->broker, "idemctl", 0, NULL, 0, &mq) != 0) {
        ctl_fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    if (ctl->json)
        ctl->out = json_object_new_array();
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        ctl_qstat_t s = {.q = &ctl->conf->queues[i]};
        if (ctl_status_broker(mq, s.q, &s) != 0 || ctl_status_db(ctl, db, s.q, &s) != 0) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        ctl_status_daemon(daemon, s.q, &s);
        if (ctl->json)
            ctl_status_json(ctl, &s, dstate);
        else
            ctl_status_text(&s);
    }
    if (ctl->conf->metrics.listen && daemon == NULL)
        rc = CTL_EXIT_PARTIAL;
out:
    ctl_json_flush(ctl);
    json_object_put(daemon);
    db_close(db);
    mq_close(mq);
    return rc;
}
