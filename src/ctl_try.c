/* ctl_try.c: idemctl try: a queue's handler on one message through the worker's own transaction,
 * always rolled back, and what it would have done (worker_try.c does the run).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_letter.h"
#include "delivery.h"
#include "log.h"
#include "sqlh.h"
#include "worker_try.h"

#define CTL_TRY_HEADERS 64          /* --header at most this often */
#define CTL_TRY_BODY_MAX (64 << 20) /* --body FILE: at most this many bytes */

/* try's command line. */
typedef struct ctl_try {
    const char *queue;
    const char *body_file, *body_json, *dlq, *id;
    bool force, json;
    int n_headers;
    const char *headers[CTL_TRY_HEADERS]; /* K=V as given */
    amqp_table_entry_t entries[CTL_TRY_HEADERS + 1];
    char *body; /* --body FILE's content (owned) */
    size_t body_len;
} ctl_try_t;

/* Options that take a value, for finding the command word (ctl_try_wanted). */
static const char *const ctl_try_valued[] = {
    "-c",     "--config", "--consumer",   "--reason",   "--limit",
    "--id",   "--to",     "--older-than", "--batch",    "--slow-ms",
    "--rate", "--body",   "--body-json",  "--from-dlq", "--header",
};

bool ctl_try_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            return i + 1 < argc && strcmp(argv[i + 1], "try") == 0;
        if (a[0] != '-')
            return strcmp(a, "try") == 0;
        for (size_t k = 0; k < sizeof(ctl_try_valued) / sizeof(ctl_try_valued[0]); k++)
            if (strcmp(a, ctl_try_valued[k]) == 0) {
                i++; /* its value */
                break;
            }
    }
    return false;
}

/* A usage error about try: the line and the usage. Returns CTL_EXIT_USAGE. */
static int ctl_try_bad(const char *what, const char *arg)
{
    ctl_fprintf(stderr, "idemctl try: %s%s\n", what, arg);
    ctl_fprintf(
        stderr,
        "usage: idemctl [-c FILE] [--json] [-v] try QUEUE (--body FILE | --body-json TEXT |\n"
        "       --from-dlq DLQ --id ID) [--id MSGID] [--header K=V]... [--force-run]\n");
    return CTL_EXIT_USAGE;
}

/* Read --body FILE into c->body. 0, or CTL_EXIT_USAGE (said why). */
static int ctl_try_read_body(ctl_try_t *c)
{
    FILE *f = fopen(c->body_file, "rb");
    int rc = CTL_EXIT_USAGE;
    size_t cap = 0;

    if (f == NULL) {
        ctl_fprintf(stderr, "idemctl try: --body %s: %m\n", c->body_file);
        return rc;
    }
    for (;;) {
        if (c->body_len == cap) {
            char *b = cap < CTL_TRY_BODY_MAX ? realloc(c->body, cap ? 2 * cap : 65536) : NULL;
            if (b == NULL) {
                ctl_fprintf(stderr, "idemctl try: --body %s: over %d bytes, or out of memory\n",
                            c->body_file, CTL_TRY_BODY_MAX);
                goto out;
            }
            c->body = b;
            cap = cap ? 2 * cap : 65536;
        }
        size_t n = fread(c->body + c->body_len, 1, cap - c->body_len, f);
        c->body_len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        ctl_fprintf(stderr, "idemctl try: --body %s: read error\n", c->body_file);
        goto out;
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}

/* The --header K=V arguments as an AMQP table (strings; pointing into argv). */
static int ctl_try_table(ctl_try_t *c, amqp_table_t *t)
{
    for (int i = 0; i < c->n_headers; i++) {
        const char *eq = strchr(c->headers[i], '=');
        if (eq == NULL || eq == c->headers[i])
            return ctl_try_bad("--header expects K=V, got: ", c->headers[i]);
        c->entries[i].key = (amqp_bytes_t){(size_t)(eq - c->headers[i]), (void *)c->headers[i]};
        c->entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
        c->entries[i].value.value.bytes = amqp_cstring_bytes(eq + 1);
    }
    t->num_entries = c->n_headers;
    t->entries = c->entries;
    return 0;
}

/*
 * Find the letter whose id (as queue q reads ids) is id in dead letter
 * queue dlq: the whole queue is taken with basic.get, unacked, and every
 * letter requeued in its order (ctl_requeue, as dlq list does), so the
 * letter stays where it was. On 0 the letter's message is in *msg (free with
 * amqp_destroy_message); else CTL_EXIT_NOMATCH, _CONNECT or _PARTIAL (said).
 */
static int ctl_try_letter(const ctl_t *ctl, const conf_queue_t *q, const char *dlq, const char *id,
                          amqp_message_t *msg)
{
    mq_t *rd = NULL;
    unsigned depth = 0, consumers = 0;
    uint64_t *tags = NULL;
    long n = 0;
    bool found = false, failed = false;
    int rc = CTL_EXIT_PARTIAL;
    char why[400];

    if (mq_open(&ctl->conf->broker, "idemctl", 0, NULL, 0, &rd) != 0) {
        ctl_fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    int st = ctl_queue_peek(rd, dlq, &depth, &consumers);
    if (st != 0) {
        if (st > 0)
            ctl_fprintf(stderr, "idemctl: no queue %s\n", dlq);
        rc = st > 0 ? CTL_EXIT_NOMATCH : CTL_EXIT_PARTIAL;
        goto out;
    }
    if ((tags = calloc((size_t)depth + 1, sizeof(*tags))) == NULL)
        goto out;
    while (n < (long)depth) {
        amqp_message_t m;
        char lid[DELIVERY_ID_MAX + 1], err[128];
        size_t len = 0;
        amqp_rpc_reply_t r = amqp_basic_get(rd->conn, MQ_CHANNEL, amqp_cstring_bytes(dlq), 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            log_error("broker %s: basic.get %s: %s", rd->where, dlq,
                      mq_reply_text(r, why, sizeof(why)));
            failed = true;
            break;
        }
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
            break;
        tags[n++] = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
        r = amqp_read_message(rd->conn, MQ_CHANNEL, &m, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            log_error("broker %s: reading a message of %s: %s", rd->where, dlq,
                      mq_reply_text(r, why, sizeof(why)));
            rd->deaf = r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION;
            failed = true;
            break;
        }
        bool match = !found &&
                     delivery_id(&m.properties, q->id_header, lid, &len, err, sizeof(err)) == 0 &&
                     len == strlen(id) && memcmp(lid, id, len) == 0;
        if (match) {
            *msg = m; /* its own pool: kept past the requeue */
            found = true;
        } else {
            amqp_destroy_message(&m);
        }
        amqp_maybe_release_buffers(rd->conn);
    }
    rc = found ? CTL_EXIT_OK : failed ? CTL_EXIT_PARTIAL : CTL_EXIT_NOMATCH;
    if (!found && !failed)
        ctl_fprintf(stderr, "idemctl try: no letter with id %s in %s (%ld read)\n", id, dlq, n);
out:
    if (n > 0 && rd->channel_open && !rd->deaf)
        ctl_requeue(rd, dlq, tags, n);
    free(tags);
    mq_close(rd);
    return rc;
}

/*
 * The letter as a replay would send it back: without idemd's failure
 * headers and the broker's (ctl_header_dropped), to its original exchange
 * and routing key. env points into msg and c->entries.
 */
static void ctl_try_from_letter(ctl_try_t *c, const amqp_message_t *msg, amqp_envelope_t *env)
{
    const amqp_basic_properties_t *p = &msg->properties;
    const char *s;
    size_t len;
    int k = 0;

    memset(env, 0, sizeof(*env));
    env->message = *msg;
    for (int i = 0; (p->_flags & AMQP_BASIC_HEADERS_FLAG) && i < p->headers.num_entries; i++)
        if (!ctl_header_dropped(p->headers.entries[i].key) && k < CTL_TRY_HEADERS)
            c->entries[k++] = p->headers.entries[i];
    env->message.properties.headers = (amqp_table_t){k, c->entries};
    if (delivery_header_str(p, COPIES_H_EXCHANGE, &s, &len))
        env->exchange = (amqp_bytes_t){len, (void *)s};
    if (delivery_header_str(p, COPIES_H_ROUTING_KEY, &s, &len))
        env->routing_key = (amqp_bytes_t){len, (void *)s};
    else
        env->routing_key = amqp_cstring_bytes(c->queue);
}

/* The message of --body / --body-json: to the default exchange with the queue's name. */
static int ctl_try_from_args(ctl_try_t *c, amqp_envelope_t *env)
{
    amqp_basic_properties_t *p = &env->message.properties;

    memset(env, 0, sizeof(*env));
    if (c->body_file && ctl_try_read_body(c) != 0)
        return CTL_EXIT_USAGE;
    if (c->body_json) {
        env->message.body = amqp_cstring_bytes(c->body_json);
        p->_flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        p->content_type = amqp_cstring_bytes("application/json");
    } else {
        env->message.body = (amqp_bytes_t){c->body_len, c->body};
    }
    if (c->id) {
        p->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        p->message_id = amqp_cstring_bytes(c->id);
    }
    if (c->n_headers > 0) {
        if (ctl_try_table(c, &p->headers) != 0)
            return CTL_EXIT_USAGE;
        p->_flags |= AMQP_BASIC_HEADERS_FLAG;
    }
    env->routing_key = amqp_cstring_bytes(c->queue);
    return 0;
}

/* The verdict's name: what a worker would do with the message. */
static const char *ctl_try_verdict(const worker_try_out_t *o)
{
    switch (o->outcome) {
    case TXN_HANDLED:
        return "ok";
    case TXN_DUPLICATE:
        return "duplicate";
    case TXN_RETRY:
        return "retry";
    case TXN_REJECT:
        return "reject";
    default:
        return txn_outcome_name(o->outcome);
    }
}

static const char *ctl_try_level(int level)
{
    return level <= LOG_LEVEL_ERROR     ? "error"
           : level <= LOG_LEVEL_WARNING ? "warning"
           : level <= LOG_LEVEL_INFO    ? "info"
                                        : "debug";
}

/* The run as one JSON object (ctl->out). */
static void ctl_try_json(ctl_t *ctl, const ctl_try_t *c, const worker_try_out_t *o)
{
    json_object *r = json_object_new_object(), *lines = json_object_new_array();
    json_object *pubs = json_object_new_array();

    json_object_object_add(r, "queue", ctl_json_text(c->queue));
    json_object_object_add(r, "handler", ctl_json_text(o->handler));
    if (o->no_id)
        json_object_object_add(r, "id", NULL);
    else
        ctl_json_str(r, "id", o->id, o->id_len);
    json_object_object_add(r, "recorded",
                           o->recorded < 0 ? NULL : json_object_new_boolean(o->recorded));
    json_object_object_add(r, "recorded_at",
                           o->recorded_at[0] ? ctl_json_text(o->recorded_at) : NULL);
    json_object_object_add(r, "ran", json_object_new_boolean(o->ran));
    json_object_object_add(r, "forced", json_object_new_boolean(o->recorded_skip));
    json_object_object_add(r, "verdict", ctl_json_text(ctl_try_verdict(o)));
    json_object_object_add(r, "reason", o->reason[0] ? ctl_json_text(o->reason) : NULL);
    json_object_object_add(r, "attempt", json_object_new_int64(o->attempt));
    json_object_object_add(r, "rolled_back", json_object_new_boolean(true));
    json_object_object_add(r, "tried_to_end_transaction", json_object_new_boolean(o->tried_end));
    for (int i = 0; i < o->n_lines; i++) {
        json_object *l = json_object_new_object();
        json_object_object_add(l, "level", ctl_json_text(ctl_try_level(o->lines[i].level)));
        json_object_object_add(l, "text", ctl_json_text(o->lines[i].text));
        json_object_array_add(lines, l);
    }
    json_object_object_add(r, "log", lines);
    for (int i = 0; i < o->n_pubs; i++) {
        const worker_try_pub_t *p = &o->pubs[i];
        json_object *j = json_object_new_object(), *h = json_object_new_object();
        json_object_object_add(j, "exchange", ctl_json_text(p->exchange));
        json_object_object_add(j, "routing_key", ctl_json_text(p->routing_key));
        json_object_object_add(j, "msg_id", ctl_json_text(p->msg_id));
        json_object_object_add(j, "content_type", ctl_json_text(p->content_type));
        for (int k = 0; k < p->n_headers; k++) {
            char key[4 * 256 + 8];
            json_object_object_add(h, ctl_json_key(p->headers[k].key, key, sizeof(key)),
                                   ctl_json_text(p->headers[k].value));
        }
        json_object_object_add(j, "headers", h);
        json_object_object_add(j, "body_bytes", json_object_new_int64(p->body_len));
        json_object_array_add(pubs, j);
    }
    json_object_object_add(r, "publish", pubs);
    if (o->peek_err[0])
        json_object_object_add(r, "publish_error", ctl_json_text(o->peek_err));
    ctl->out = r;
}

/* The run as text: the id and its record, the verdict, the log lines, the onward messages. */
static void ctl_try_text(const ctl_try_t *c, const worker_try_out_t *o)
{
    ctl_printf("queue %s, handler %s: dry run, rolled back (nothing committed, acked or sent)\n",
               c->queue, o->handler);
    if (o->no_id) {
        ctl_printf("id: none (dedup = \"none\": nothing to record)\n");
    } else {
        ctl_printf("id: ");
        ctl_put(stdout, o->id, o->id_len);
        ctl_printf(" (attempt %u)\n", o->attempt);
    }
    if (o->recorded == 1 && !o->ran)
        ctl_printf("record: already recorded: a worker would ack it as a duplicate without "
                   "running the handler; not run (--force-run runs it)\n");
    else if (o->recorded == 1)
        ctl_printf("record: already recorded (a worker would skip it as a duplicate); run anyway "
                   "(--force-run), without its record INSERT\n");
    else if (o->recorded == 0)
        ctl_printf("record: not recorded yet: a worker would run it\n");
    if (o->recorded >= 0)
        ctl_printf("record: looked up in %s for consumer %s%s%s\n", o->record_table, o->consumer,
                   o->recorded_at[0] ? ", committed at " : "", o->recorded_at);
    ctl_printf("verdict: %s\n", ctl_try_verdict(o));
    if (o->reason[0])
        ctl_printf("reason: %s\n", o->reason);
    if (o->tried_end)
        ctl_printf("transaction: the handler tried to end idemd's transaction; the server refused "
                   "it and nothing was committed. A worker retries such a message, then "
                   "dead-letters it: fix the handler\n");
    for (int i = 0; i < o->n_lines; i++)
        ctl_printf("log %s: %s\n", ctl_try_level(o->lines[i].level), o->lines[i].text);
    for (int i = 0; i < o->n_pubs; i++) {
        const worker_try_pub_t *p = &o->pubs[i];
        ctl_printf("would publish: exchange=%s routing_key=%s msg_id=%s content_type=%s "
                   "body=%lld bytes\n",
                   p->exchange, p->routing_key, p->msg_id, p->content_type, p->body_len);
        for (int k = 0; k < p->n_headers; k++)
            ctl_printf("  header %s=%s\n", p->headers[k].key, p->headers[k].value);
        if (p->more_headers)
            ctl_printf("  (%d more headers)\n", p->more_headers);
    }
    if (o->peek_err[0])
        ctl_printf("onward messages: not known (%s)\n", o->peek_err);
    else if (o->ran && o->outcome == TXN_HANDLED && o->n_pubs == 0)
        ctl_printf("would publish: nothing\n");
}

/* Parse try's command line into c; *path, *verbose. 0, or an exit code (said why). */
static int ctl_try_args(int argc, char **argv, ctl_try_t *c, const char **path, int *verbose)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"body", required_argument, NULL, 'B'},
        {"body-json", required_argument, NULL, 'J'},
        {"from-dlq", required_argument, NULL, 'D'},
        {"id", required_argument, NULL, 'i'},
        {"header", required_argument, NULL, 'H'},
        {"force-run", no_argument, NULL, 'f'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;

    while ((o = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            *path = optarg;
            break;
        case 'j':
            c->json = true;
            break;
        case 'B':
            c->body_file = optarg;
            break;
        case 'J':
            c->body_json = optarg;
            break;
        case 'D':
            c->dlq = optarg;
            break;
        case 'i':
            if (c->id)
                return ctl_try_bad("--id given twice", "");
            c->id = optarg;
            break;
        case 'H':
            if (c->n_headers == CTL_TRY_HEADERS)
                return ctl_try_bad("too many --header", "");
            c->headers[c->n_headers++] = optarg;
            break;
        case 'f':
            c->force = true;
            break;
        case 'v':
            (*verbose)++;
            break;
        case 'h':
            ctl_try_bad("", "");
            return CTL_EXIT_OK;
        default:
            return ctl_try_bad("unknown option (see above)", "");
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], "try") != 0)
        return ctl_try_bad("one QUEUE expected", "");
    c->queue = argv[optind + 1];
    if ((c->body_file != NULL) + (c->body_json != NULL) + (c->dlq != NULL) != 1)
        return ctl_try_bad("choose one of --body FILE, --body-json TEXT, --from-dlq DLQ --id ID",
                           "");
    if (c->dlq && c->id == NULL)
        return ctl_try_bad("--from-dlq needs --id ID (the letter's)", "");
    if (c->dlq && c->n_headers > 0)
        return ctl_try_bad("--header goes with --body or --body-json (a letter keeps its own)", "");
    return -1;
}

/* The exit status of a run that ended with out. */
static int ctl_try_exit(const worker_try_out_t *o)
{
    if (o->tried_end)
        return CTL_EXIT_BOUNDARY;
    return o->outcome == TXN_HANDLED || o->outcome == TXN_DUPLICATE ? CTL_EXIT_OK
                                                                    : CTL_EXIT_NOMATCH;
}

int ctl_try_main(int argc, char **argv)
{
    ctl_try_t c = {0};
    ctl_t ctl = {0};
    const char *path = CTL_DEFAULT_CONF;
    const conf_queue_t *q = NULL;
    amqp_message_t letter = {0};
    bool have_letter = false;
    amqp_envelope_t env;
    worker_try_out_t out = {0};
    char err[1024];
    int verbose = 0;

    int rc = ctl_try_args(argc, argv, &c, &path, &verbose);
    if (rc >= 0)
        return rc;
    log_set_target(LOG_TARGET_STDERR);
    log_set_context("idemctl");
    sqlh_show_values(verbose >= 1);
    log_set_level(verbose >= 2   ? LOG_LEVEL_DEBUG
                  : verbose == 1 ? LOG_LEVEL_INFO
                                 : LOG_LEVEL_WARNING);
    if (conf_load(path, &ctl.conf, err, sizeof(err)) != 0) {
        ctl_fprintf(stderr, "idemctl: %s\n", err);
        return CTL_EXIT_USAGE;
    }
    ctl.json = c.json;
    for (int i = 0; i < ctl.conf->n_queues && q == NULL; i++)
        if (strcmp(ctl.conf->queues[i].name, c.queue) == 0)
            q = &ctl.conf->queues[i];
    rc = CTL_EXIT_USAGE;
    if (q == NULL) {
        ctl_fprintf(stderr, "idemctl try: no queue %s in %s\n", c.queue, path);
        goto out;
    }
    if (c.dlq) {
        if ((rc = ctl_try_letter(&ctl, q, c.dlq, c.id, &letter)) != CTL_EXIT_OK)
            goto out;
        have_letter = true;
        ctl_try_from_letter(&c, &letter, &env);
    } else if ((rc = ctl_try_from_args(&c, &env)) != 0) {
        goto out;
    }
    int st = worker_try(ctl.conf, q, &env, c.force, &out, err, sizeof(err));
    if (st != 0) {
        ctl_fprintf(stderr, "idemctl try: %s\n", err);
        rc = st == WORKER_TRY_CONFIG  ? CTL_EXIT_USAGE
             : st == WORKER_TRY_ENDED ? CTL_EXIT_BOUNDARY
                                      : CTL_EXIT_CONNECT;
        goto out;
    }
    if (c.json)
        ctl_try_json(&ctl, &c, &out);
    else
        ctl_try_text(&c, &out);
    rc = ctl_try_exit(&out);
out:
    ctl_json_flush(&ctl);
    worker_try_out_free(&out);
    if (have_letter)
        amqp_destroy_message(&letter);
    free(c.body);
    conf_free(ctl.conf);
    return rc;
}
