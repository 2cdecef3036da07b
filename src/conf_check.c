/* conf_check.c: the rules across settings that the table alone cannot state. */
#include "conf.h"
#include "conf_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* Rules across settings */

int conf_check_root(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    conf_t *conf = base;
    const config_setting_t *list = config_setting_get_member(grp, "queues");
    (void)path;

    for (int i = 1; i < conf->n_queues; i++) {
        for (int j = 0; j < i; j++) {
            if (strcmp(conf->queues[i].name, conf->queues[j].name) != 0)
                continue;
            char sp[CONF_PATH_MAX];
            snprintf(sp, sizeof(sp), "queues.[%d].name", i);
            const config_setting_t *s = config_setting_get_elem(list, (unsigned)i);
            return conf_error(ctx, config_setting_get_member(s, "name"), sp,
                              "duplicate queue name \"%s\" (first at line %d)",
                              conf->queues[i].name, conf->queues[j].line);
        }
    }
    return 0;
}

/*
 * A relative handler path is taken from the directory of the file that
 * holds the setting, made absolute (the working directory of a service is
 * nobody's choice), so that logs and checks name the file that is loaded.
 */
static int conf_absolute_handler(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                                 conf_queue_t *q)
{
    const config_setting_t *at = config_setting_get_member(grp, "handler");
    char sp[CONF_PATH_MAX], file[PATH_MAX + 8], cwd[PATH_MAX], full[3 * PATH_MAX];
    int line;

    if (q->handler == NULL || q->handler[0] == '/')
        return 0;
    conf_path(sp, path, "handler");
    conf_source(ctx, at, file, sizeof(file), &line);
    char *slash = strrchr(file, '/');
    const char *dir = ".";
    if (slash == file)
        dir = "/";
    else if (slash) {
        *slash = '\0';
        dir = file;
    }
    if (dir[0] == '/')
        snprintf(full, sizeof(full), "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", q->handler);
    else if (getcwd(cwd, sizeof(cwd)) == NULL)
        return conf_error(ctx, at, sp, "cannot resolve the relative path \"%s\": getcwd: %s",
                          q->handler, strerror(errno));
    else if (strcmp(dir, ".") == 0)
        snprintf(full, sizeof(full), "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", q->handler);
    else
        snprintf(full, sizeof(full), "%s%s%s/%s", cwd, strcmp(cwd, "/") ? "/" : "", dir,
                 q->handler);
    if (strlen(full) >= PATH_MAX)
        return conf_error(ctx, at, sp,
                          "\"%s\" taken from the config file's directory is %zu "
                          "bytes long, more than %d",
                          q->handler, strlen(full), PATH_MAX - 1);
    return conf_set_string(ctx, at, sp, &q->handler, full);
}

/* Whether a parsed listen address is reachable from this machine only: 127.0.0.0/8, ::1,
 * ::ffff:127.0.0.0/104. The wildcards 0.0.0.0 and :: are every address, so not loopback. */
static bool conf_addr_is_loopback(const struct sockaddr_storage *ss)
{
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)(const void *)ss;
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)(const void *)ss;
    if (ss->ss_family == AF_INET)
        return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127);
    return false;
}

/*
 * /status tells the pid, the counters and the last warning text (which may quote a database
 * error): on an address others can reach it needs the token, or an explicit
 * allow_unauthenticated (then a warning at every load). at and sp are listen's.
 */
static int conf_check_metrics_open(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                                   const conf_metrics_t *m, const config_setting_t *at,
                                   const char *sp)
{
    char ap[CONF_PATH_MAX];
    if (m->token_file || conf_addr_is_loopback(&m->addr))
        return 0;
    if (!m->allow_unauthenticated)
        return conf_error(ctx, at, sp,
                          "\"%s\" is not a loopback address and token_file is not set: anyone "
                          "who can reach it would read /metrics and /status (pid, counters, the "
                          "last warning text); set metrics.token_file (docs/monitoring.md), "
                          "listen on 127.0.0.1, or set metrics.allow_unauthenticated = true",
                          m->listen);
    conf_path(ap, path, "allow_unauthenticated");
    return conf_warn(ctx, config_setting_get_member(grp, "allow_unauthenticated"), ap,
                     "true: \"%s\" is not a loopback address and serves /metrics and /status "
                     "without a token to anyone who can reach it",
                     m->listen);
}

/* metrics.token_file: the token read (conf_read_secret checks it); metrics.listen: a numeric
 * address and a port, parsed for the supervisor, and not open to others without a token. */
int conf_check_metrics(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    conf_metrics_t *m = base;
    char host[70], sp[CONF_PATH_MAX];
    const char *colon, *h = m->listen;
    size_t hlen;
    char *end;

    if (m->token_file) {
        conf_path(sp, path, "token_file");
        if (conf_read_secret(ctx, config_setting_get_member(grp, "token_file"), sp, m->token_file,
                             CONF_SECRET_TOKEN, &m->token) < 0)
            return -1;
    }
    if (m->listen == NULL)
        return 0;
    conf_path(sp, path, "listen");
    const config_setting_t *at = config_setting_get_member(grp, "listen");
    colon = strrchr(m->listen, ':');
    if (colon == NULL)
        return conf_error(ctx, at, sp, "\"%s\" has no port: write \"ADDR:PORT\"", m->listen);
    hlen = (size_t)(colon - m->listen);
    if (h[0] == '[') {
        if (hlen < 2 || h[hlen - 1] != ']')
            return conf_error(ctx, at, sp, "\"%s\": an IPv6 address is written \"[ADDR]:PORT\"",
                              m->listen);
        h++;
        hlen -= 2;
    }
    snprintf(host, sizeof(host), "%.*s", (int)hlen, h);
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end || errno || port < 1 || port > 65535)
        return conf_error(ctx, at, sp, "\"%s\": the port must be a number in 1..65535", m->listen);
    memset(&m->addr, 0, sizeof(m->addr));
    struct sockaddr_in *v4 = (struct sockaddr_in *)(void *)&m->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)(void *)&m->addr;
    if (m->listen[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (m->listen[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
    } else {
        return conf_error(ctx, at, sp,
                          "\"%s\": the address must be numeric, e.g. \"127.0.0.1:9187\" or "
                          "\"[::1]:9187\"",
                          m->listen);
    }
    return conf_check_metrics_open(ctx, grp, path, m, at, sp);
}

/*
 * With workers = "auto" an ordered queue runs one worker: a workers_min or workers_max written
 * in the file with another value is not used, and says so (a warning, not an error: "auto"
 * asks idemd to choose, and configurations that loaded before keep loading). 0, or -1 when
 * out of memory.
 */
static int conf_warn_order_overrides(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                                     const conf_queue_t *q)
{
    static const char *const names[] = {"workers_min", "workers_max"};
    char sp[CONF_PATH_MAX];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const config_setting_t *s = config_setting_get_member(grp, names[i]);
        int v = i == 0 ? q->workers_min : q->workers_max;
        if (s == NULL || v == 1)
            continue;
        char val[16];
        if (v == CONF_WORKERS_AUTO)
            snprintf(val, sizeof(val), "\"auto\"");
        else
            snprintf(val, sizeof(val), "%d", v);
        conf_path(sp, path, names[i]);
        if (conf_warn(ctx, s, sp,
                      "%s is not used: the queue has order_key = \"%s\", so workers = \"auto\" "
                      "runs 1 worker per instance (two would handle two messages of one key at "
                      "once); the effective value is 1. Remove the setting, or shard over several "
                      "queues for more (docs/ordering.md)",
                      val, q->order_key) < 0)
            return -1;
    }
    return 0;
}

/*
 * order_key (docs/ordering.md): "header:NAME" or "json:PATH" with a non-empty name; an ordered
 * queue runs one worker per instance (two workers of one instance would handle two messages of
 * a key at once: workers = "auto" means 1 there) and needs the record table (a waiter's copy
 * and its original can both come back: the record keeps one). 0, or -1 with the FILE:LINE
 * message.
 */
static int conf_check_order(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                            conf_queue_t *q)
{
    char sp[CONF_PATH_MAX];
    const char *k = q->order_key;
    const config_setting_t *at = config_setting_get_member(grp, "order_key");

    if (k == NULL || k[0] == '\0')
        return 0;
    conf_path(sp, path, "order_key");
    if (!((strncmp(k, "header:", 7) == 0 && k[7]) || (strncmp(k, "json:", 5) == 0 && k[5])))
        return conf_error(ctx, at, sp,
                          "\"%s\" is not \"header:NAME\" or \"json:PATH\" (e.g. "
                          "\"json:order.id\")",
                          k);
    if (strncmp(k, "json:", 5) == 0 && (k[5] == '.' || k[strlen(k) - 1] == '.' || strstr(k, "..")))
        return conf_error(ctx, at, sp, "\"%s\": an empty field name in the path", k);
    if (q->workers == CONF_WORKERS_AUTO) {
        if (conf_warn_order_overrides(ctx, grp, path, q) != 0)
            return -1;
        q->workers = 1; /* auto: one, the most an ordered queue may have */
        q->workers_min = q->workers_max = 1;
    }
    if (q->workers > 1) {
        const config_setting_t *w = config_setting_get_member(grp, "workers");
        conf_path(sp, path, "workers");
        return conf_error(ctx, w ? w : at, sp,
                          "is %d, but the queue has order_key = \"%s\": an ordered queue runs "
                          "one worker per instance (two would handle two messages of one key at "
                          "once); set workers = 1, and shard over several queues for more "
                          "(docs/ordering.md)",
                          q->workers, k);
    }
    if (q->n_retry_delays == 0) {
        const config_setting_t *r = config_setting_get_member(grp, "retry_delays_ms");
        conf_path(sp, path, "retry_delays_ms");
        return conf_error(ctx, r ? r : at, sp,
                          "is [ ], but the queue has order_key = \"%s\": its waiting messages "
                          "wait in the first delay queue (without one they would go round the "
                          "queue at once, for as long as their key is blocked)",
                          k);
    }
    if (q->dedup != CONF_DEDUP_TABLE) {
        const config_setting_t *d = config_setting_get_member(grp, "dedup");
        conf_path(sp, path, "dedup");
        return conf_error(ctx, d ? d : at, sp,
                          "must be \"table\" with order_key = \"%s\": a waiting message and "
                          "its copy can both come back, and the record keeps one",
                          k);
    }
    return 0;
}

/* Length of the UTF-8 sequence at s (1..4), or 0 when it is not one (overlong, a surrogate,
 * past U+10FFFF, cut short). */
static size_t conf_utf8_seq(const unsigned char *s)
{
    unsigned c = s[0], cp, n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (unsigned i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

/*
 * A queue name idemd declares, as RabbitMQ takes it (the table already bounds its length to
 * 255 bytes): UTF-8, no control byte (names reach logs and terminals), not "amq." (RabbitMQ
 * refuses to declare those: the workers would restart for ever). kind says which queue, for
 * the message. 0, or -1 with the FILE:LINE message at setting at (sp).
 */
static int conf_check_queue_name(conf_ctx_t *ctx, const config_setting_t *at, const char *sp,
                                 const char *name, const char *kind)
{
    const unsigned char *p = (const unsigned char *)name;
    while (*p) {
        size_t n = conf_utf8_seq(p);
        if (n == 0)
            return conf_error(ctx, at, sp,
                              "%s: byte %zu is not valid UTF-8: RabbitMQ takes UTF-8 queue names",
                              kind, (size_t)(p - (const unsigned char *)name) + 1);
        if (*p < 0x20 || *p == 0x7f)
            return conf_error(ctx, at, sp, "%s: byte %zu is a control character (0x%02x)", kind,
                              (size_t)(p - (const unsigned char *)name) + 1, *p);
        p += n;
    }
    if (strncmp(name, "amq.", 4) == 0)
        return conf_error(ctx, at, sp,
                          "%s \"%s\" starts with \"amq.\", which RabbitMQ keeps for itself "
                          "(it refuses to declare such a queue): choose another name",
                          kind, name);
    return 0;
}

int conf_check_queue(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    conf_queue_t *q = base;
    char sp[CONF_PATH_MAX];
    const config_setting_t *nat = config_setting_get_member(grp, "name");

    q->line = (int)config_setting_source_line(grp);
    conf_path(sp, path, "name");
    if (conf_check_queue_name(ctx, nat, sp, q->name, "the queue name") != 0)
        return -1;
    /* Onward messages of queue X are signed for "onward:X" (copies_onward_queue): a queue of
     * that name would take them as its own letters, and its own as X's onward messages. */
    if (strncmp(q->name, "onward:", 7) == 0)
        return conf_error(ctx, nat, sp,
                          "\"%s\" starts with \"onward:\", which idemd keeps for the dead "
                          "letters of onward messages (their signatures name \"onward:QUEUE\"): "
                          "choose another name",
                          q->name);
    if (conf_check_queue_sql(ctx, grp, q, path) != 0)
        return -1;
    if (strcmp(q->handler, "sql") != 0 && conf_absolute_handler(ctx, grp, path, q) != 0)
        return -1;
    /* RabbitMQ refuses longer queue names: a worker would fail to declare the tier for ever. */
    for (int i = 0; i < q->n_retry_delays; i++) {
        char tier[300];
        int n = snprintf(tier, sizeof(tier), "%s.retry.%d", q->name, q->retry_delays_ms[i]);
        if (n <= 255)
            continue;
        const config_setting_t *at = config_setting_get_member(grp, "retry_delays_ms");
        conf_path(sp, path, at ? "retry_delays_ms" : "name");
        return conf_error(ctx, at ? at : config_setting_get_member(grp, "name"), sp,
                          "the delay queue \"%s.retry.%d\" would be %d bytes long, more than "
                          "RabbitMQ's 255: shorten the queue name or set retry_delays_ms = [ ]",
                          q->name, q->retry_delays_ms[i], n);
    }
    if (q->workers_max != CONF_WORKERS_AUTO && q->workers_min > q->workers_max) {
        const config_setting_t *at = config_setting_get_member(grp, "workers_min");
        conf_path(sp, path, "workers_min");
        return conf_error(ctx, at ? at : grp, sp, "%d is more than workers_max = %d",
                          q->workers_min, q->workers_max);
    }
    if (conf_check_order(ctx, grp, path, q) != 0)
        return -1;
    conf_path(sp, path, "consumer");
    if (!q->consumer) {
        if (strlen(q->name) > 128)
            return conf_error(ctx, config_setting_get_member(grp, "name"), sp,
                              "the default (the queue name) is longer than 128 bytes: set it");
        return conf_set_string(ctx, grp, sp, &q->consumer, q->name);
    }
    return 0;
}

/* q's declare.arguments entry named key, or NULL; borrowed from q. */
static const conf_arg_t *conf_arg_find(const conf_queue_t *q, const char *key)
{
    for (int i = 0; i < q->n_args; i++)
        if (strcmp(q->args[i].key, key) == 0)
            return &q->args[i];
    return NULL;
}

/*
 * Why argument a of q's declare.arguments would lose messages, or NULL. A
 * full queue either drops its oldest messages (drop-head, the default) or
 * refuses new ones (reject-publish): idemd's own copies are confirmed and
 * survive a refusal, but a classic delay tier dead-letters back without
 * confirms, so a copy whose delay expires while the queue is full is lost.
 */
static const char *conf_overflow_risk(const conf_queue_t *q, const conf_arg_t *a)
{
    const conf_arg_t *ov = conf_arg_find(q, "x-overflow");
    bool limit = conf_arg_find(q, "x-max-length") || conf_arg_find(q, "x-max-length-bytes");
    const char *mode = ov && !ov->is_int ? ov->sval : NULL;

    if (a == ov && ov->is_int)
        return "must be a string: \"reject-publish\" (or \"drop-head\", refused with a length "
               "limit)";
    if (a == ov && q->quorum && mode && strcmp(mode, "drop-head") != 0 &&
        strcmp(mode, "reject-publish") != 0)
        return "quorum queues take only \"drop-head\" or \"reject-publish\"; use "
               "\"reject-publish\"";
    if (!limit ||
        (strcmp(a->key, "x-max-length") != 0 && strcmp(a->key, "x-max-length-bytes") != 0))
        return NULL;
    if (!mode || strcmp(mode, "drop-head") == 0)
        return "a length limit with x-overflow \"drop-head\" (the default) makes the broker drop "
               "the oldest messages, unprocessed, when the queue is full: set x-overflow = "
               "\"reject-publish\"";
    if (!q->quorum && q->n_retry_delays > 0)
        return "with classic queues the delay queues dead-letter back to this queue without "
               "confirms, so a retried message whose delay expires while the queue is full is "
               "lost: set declare.quorum = true (an at-least-once hop) or retry_delays_ms = [ ]";
    return NULL;
}

/* Whether q's declare.arguments hold one that only a classic queue takes. */
static bool conf_classic_only(const conf_queue_t *q)
{
    static const char *const keys[] = {"x-max-priority", "x-queue-mode", "x-queue-version",
                                       "x-queue-master-locator"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        if (conf_arg_find(q, keys[k]))
            return true;
    return false;
}

/* The dead letter wiring is ours: arguments must not fight it. */
int conf_check_declare(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    conf_queue_t *q = base;
    char sp[CONF_PATH_MAX];
    const config_setting_t *args = NULL;

    /* grp is the queue's group when "declare" is absent (then no arguments). */
    const char *gname = config_setting_name(grp);
    if (gname && strcmp(gname, "declare") == 0)
        args = config_setting_get_member(grp, "arguments");

    /* quorum left unset: true, unless the queue cannot be one. */
    bool in_declare = gname && strcmp(gname, "declare") == 0;
    q->quorum_default = !in_declare || config_setting_get_member(grp, "quorum") == NULL;
    if (q->quorum_default && (!q->durable || conf_classic_only(q)))
        q->quorum = false;
    if (q->dead_letter_queue == NULL) {
        char dlq[300];
        snprintf(dlq, sizeof(dlq), "%s.dlq", q->name);
        conf_path(sp, path, "dead_letter_queue");
        if (strlen(dlq) > 255)
            return conf_error(ctx, grp, sp,
                              "the default (the queue name + \".dlq\") is longer than 255 bytes: "
                              "set it");
        if (conf_set_string(ctx, grp, sp, &q->dead_letter_queue, dlq) != 0)
            return -1;
    } else if (q->dead_letter_queue[0] == '\0') {
        free(q->dead_letter_queue); /* "" turns our dead letter queue off */
        q->dead_letter_queue = NULL;
    } else {
        conf_path(sp, path, "dead_letter_queue");
        if (conf_check_queue_name(ctx, config_setting_get_member(grp, "dead_letter_queue"), sp,
                                  q->dead_letter_queue, "the dead letter queue") != 0)
            return -1;
    }
    for (int i = 0; q->single_active_consumer && i < q->n_args; i++)
        if (strcmp(q->args[i].key, "x-single-active-consumer") == 0) {
            conf_path(sp, path, "single_active_consumer");
            return conf_error(ctx, config_setting_get_member(grp, "single_active_consumer"), sp,
                              "true and arguments x-single-active-consumer: set one of them");
        }
    if (q->dead_letter_queue && strcmp(q->dead_letter_queue, q->name) == 0) {
        conf_path(sp, path, "dead_letter_queue");
        return conf_error(ctx, config_setting_get_member(grp, "dead_letter_queue"), sp,
                          "must differ from the queue's name");
    }
    /* Each worker would fail to declare the queues and be restarted for ever. */
    if (!q->durable && (q->quorum || q->dead_letter_queue)) {
        conf_path(sp, path, "durable");
        if (q->quorum)
            return conf_error(ctx, config_setting_get_member(grp, "durable"), sp,
                              "false cannot be used with quorum = true: RabbitMQ declares quorum "
                              "queues durable only");
        return conf_error(ctx, config_setting_get_member(grp, "durable"), sp,
                          "false cannot be used with a dead letter queue (\"%s\"): idemd "
                          "declares its dead letter queue durable, and RabbitMQ refuses to "
                          "declare it again as transient; set durable = true, or "
                          "dead_letter_queue = \"\" for none",
                          q->dead_letter_queue);
    }
    for (int i = 0; i < q->n_args; i++) {
        const char *key = q->args[i].key;
        const char *why = NULL;
        if (strcmp(key, "x-queue-type") == 0)
            why = "set declare.quorum instead";
        else
            why = conf_overflow_risk(q, &q->args[i]);
        if (!why)
            continue;
        char ap[CONF_PATH_MAX];
        conf_path(ap, path, "arguments");
        conf_path(sp, ap, key);
        return conf_error(ctx, args ? config_setting_get_member(args, key) : grp, sp, "%s", why);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* What a loaded queue's settings put at risk */

int conf_queue_risk(const conf_t *conf, int i, char *buf, size_t len)
{
    const conf_queue_t *q = &conf->queues[i];
    if (q->quorum || q->n_retry_delays == 0)
        return 0;
    snprintf(buf, len,
             "%s:%d: queues.[%d].declare.quorum: false: queue '%s' is a classic queue, so are its "
             "delay queues (%s.retry.%d ...), and the broker moves a retried message back from "
             "them without confirms: it is lost if '%s' is full, deleted or unreachable when "
             "the delay expires (an at-most-once hop). quorum = true makes the hop at-least-once",
             conf->path, q->line, i, q->name, q->name, q->retry_delays_ms[0], q->name);
    return 1;
}
