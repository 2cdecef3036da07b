/* ctl_letter.c: one dead letter as idemctl reads it: its headers, signature, home queue, applied.
 */
#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ctl.h"
#include "ctl_letter.h"
#include "delivery.h"
#include "log.h"

const char *const ctl_sig_names[] = {"verified", "unsigned", "forged", "unchecked"};

/* A header of props as text (strings as they are, integers in decimal); false if absent. */
static bool ctl_header(const amqp_basic_properties_t *p, const char *name, char *buf, size_t len)
{
    size_t n = strlen(name);
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return false;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len != n || memcmp(e->key.bytes, name, n) != 0)
            continue;
        const amqp_field_value_t *v = &e->value;
        switch (v->kind) {
        case AMQP_FIELD_KIND_UTF8:
        case AMQP_FIELD_KIND_BYTES:
            snprintf(buf, len, "%.*s", (int)v->value.bytes.len, (const char *)v->value.bytes.bytes);
            return true;
        case AMQP_FIELD_KIND_I64:
            snprintf(buf, len, "%lld", (long long)v->value.i64);
            return true;
        case AMQP_FIELD_KIND_I32:
            snprintf(buf, len, "%d", (int)v->value.i32);
            return true;
        case AMQP_FIELD_KIND_U32:
            snprintf(buf, len, "%u", (unsigned)v->value.u32);
            return true;
        default:
            snprintf(buf, len, "?");
            return true;
        }
    }
    return false;
}

/* Fill l's fields from its message (l->msg read already). */
void ctl_letter_fields(const ctl_t *ctl, ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    char num[32], err[128];

    l->q = NULL;
    l->queue[0] = '\0';
    if (ctl_header(p, COPIES_H_QUEUE, l->queue, sizeof(l->queue)))
        for (int i = 0; i < ctl->conf->n_queues && !l->q; i++)
            if (strcmp(ctl->conf->queues[i].name, l->queue) == 0)
                l->q = &ctl->conf->queues[i];
    /* A dead onward message's id is its message_id property, whatever its source queue uses. */
    l->onward = delivery_header_int(p, COPIES_H_ONWARD) == 1;
    l->id_len = 0;
    l->has_id = delivery_id(p, l->q && !l->onward ? l->q->id_header : NULL, l->id, &l->id_len, err,
                            sizeof(err)) == 0;
    if (!ctl_header(p, COPIES_H_ERROR, l->reason, sizeof(l->reason)))
        l->reason[0] = '\0';
    if (!ctl_header(p, COPIES_H_FIRST_FAILURE, l->first, sizeof(l->first)))
        l->first[0] = '\0';
    if (!ctl_header(p, COPIES_H_LAST_FAILURE, l->last, sizeof(l->last)))
        l->last[0] = '\0';
    l->attempts = ctl_header(p, COPIES_H_ATTEMPTS, num, sizeof(num)) ? atoll(num) : 0;
    l->has_exchange = ctl_header(p, COPIES_H_EXCHANGE, l->exchange, sizeof(l->exchange));
    if (!l->has_exchange)
        l->exchange[0] = '\0';
    l->has_routing_key =
        ctl_header(p, COPIES_H_ROUTING_KEY, l->routing_key, sizeof(l->routing_key));
    if (!l->has_routing_key)
        l->routing_key[0] = '\0';
    l->body_dropped = ctl_header(p, COPIES_H_BODY_DROPPED, num, sizeof(num));
    l->verified = false;
    l->sig = CTL_SIG_UNCHECKED;
    l->unverified[0] = '\0';
    l->home = NULL;
    l->consumer = NULL;
    l->applied = -1;
}

/*
 * Whether p carries one of the headers idemd writes on a letter it
 * dead-letters (its name into which). idemd writes them only together with
 * idemd-sig: a letter without a signature that carries one did not get it
 * from idemd.
 */
static bool ctl_claims_idemd(const amqp_basic_properties_t *p, char *which, size_t len)
{
    static const char *const names[] = {
        COPIES_H_QUEUE,         COPIES_H_ATTEMPTS,      COPIES_H_ERROR,
        COPIES_H_FIRST_FAILURE, COPIES_H_LAST_FAILURE,  COPIES_H_EXCHANGE,
        COPIES_H_ROUTING_KEY,   COPIES_H_ONWARD,        COPIES_H_ONWARD_SOURCE,
        COPIES_H_BODY_DROPPED,  "idemd-headers-dropped"};
    char v[8];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (ctl_header(p, names[i], v, sizeof(v))) {
            snprintf(which, len, "%s", names[i]);
            return true;
        }
    return false;
}

/*
 * Whether l's idemd headers (queue, id, attempts, first failure, original
 * route) were signed by idemd under one of ctl->keys: sets l->sig,
 * l->verified, and l->unverified to why not. A letter of a queue idemd
 * dead-lettered is bound to that queue (idemd-queue) and its id (the
 * queue's id_header, or the message_id property when the queue is not
 * configured here); a dead onward message (idemd-onward) to "onward:" and
 * its source queue, and the message_id property. Without an idemd-sig a
 * letter is unsigned, or forged when it carries idemd's headers all the
 * same (ctl_claims_idemd); with one that cannot be checked (no keys),
 * unchecked.
 */
void ctl_letter_verify(const ctl_t *ctl, ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    char oq[300], sig[COPIES_SIG_HEX + 8], claim[64];
    const char *bound = l->onward ? copies_onward_queue(l->queue, oq, sizeof(oq)) : l->queue;
    unsigned attempts;

    l->sig = CTL_SIG_FORGED;
    if (!ctl_header(p, COPIES_H_SIG, sig, sizeof(sig))) {
        if (ctl_claims_idemd(p, claim, sizeof(claim))) {
            snprintf(l->unverified, sizeof(l->unverified),
                     "it has no %s but carries idemd's headers (%s): idemd did not write them "
                     "(forged, or published into the queue)",
                     COPIES_H_SIG, claim);
        } else {
            l->sig = CTL_SIG_UNSIGNED;
            snprintf(l->unverified, sizeof(l->unverified),
                     "it has no %s: idemd did not dead-letter it (the broker did, or it was "
                     "published into the queue)",
                     COPIES_H_SIG);
        }
    } else if (ctl->keys.n == 0) {
        l->sig = CTL_SIG_UNCHECKED;
        snprintf(l->unverified, sizeof(l->unverified), "the relay keys could not be read");
    } else if (!l->queue[0]) {
        snprintf(l->unverified, sizeof(l->unverified), "it has no %s header", COPIES_H_QUEUE);
    } else if (!l->has_id || bound == NULL) {
        snprintf(l->unverified, sizeof(l->unverified), "it has no message id to check %s against",
                 COPIES_H_SIG);
    } else if (!copies_trusted(p, &ctl->keys, bound, l->id, l->id_len, &attempts)) {
        snprintf(l->unverified, sizeof(l->unverified),
                 "%s does not verify under the %d key(s) in table " DB_KEY_TABLE
                 " for queue '%.100s'%s: forged or changed headers, or a retired key",
                 COPIES_H_SIG, ctl->keys.n, l->queue,
                 l->onward || l->q ? "" : " (not in this configuration: id taken from message_id)");
    } else {
        l->sig = CTL_SIG_VERIFIED;
        l->verified = true;
    }
}

/*
 * The configured work queue whose dead letter queue dlq is: the only one,
 * or, when several share it, the one claimed names; NULL when none (or
 * none of several) fits. Borrows from ctl.
 */
static const conf_queue_t *ctl_dlq_home(const ctl_t *ctl, const char *dlq, const char *claimed)
{
    const conf_queue_t *home = NULL;
    int n = 0;
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        const conf_queue_t *q = &ctl->conf->queues[i];
        if (q->dead_letter_queue == NULL || strcmp(q->dead_letter_queue, dlq) != 0)
            continue;
        n++;
        if (n == 1 || strcmp(q->name, claimed) == 0)
            home = q;
    }
    return n > 1 && strcmp(home->name, claimed) != 0 ? NULL : home;
}

/*
 * After ctl_letter_verify: what l is taken for. A verified letter is what
 * its headers say; any other is a message of the work queue the dead letter
 * queue belongs to (l->home), its id read as that queue reads it, and its
 * onward claim ignored. Sets l->consumer: --consumer, else the consumer of
 * the queue a replay sends it to (--to QUEUE when configured here), NULL
 * (applied unknown) for an onward message, a queue not configured here or
 * one with dedup = "none".
 */
void ctl_letter_place(const ctl_t *ctl, const char *dlq, ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    const conf_queue_t *q;
    char err[128];

    l->home = ctl_dlq_home(ctl, dlq, l->queue);
    if (!l->verified && l->home) {
        l->q = l->home;
        l->onward = false;
        l->id_len = 0;
        l->has_id = delivery_id(p, l->q->id_header, l->id, &l->id_len, err, sizeof(err)) == 0;
    }
    q = l->onward ? NULL : l->q;
    for (int i = 0; ctl->to_queue && i < ctl->conf->n_queues; i++)
        if (strcmp(ctl->conf->queues[i].name, ctl->to_queue) == 0)
            q = &ctl->conf->queues[i];
    l->consumer = ctl->consumer                       ? ctl->consumer
                  : q && q->dedup == CONF_DEDUP_TABLE ? q->consumer
                                                      : NULL;
    l->applied = -1;
}

/*
 * Whether l's id is recorded for l->consumer (l->applied); once the record
 * table cannot be read (*records_ok false after logging it), every later
 * letter stays unknown.
 */
void ctl_letter_applied(const ctl_t *ctl, db_t *db, bool *records_ok, const ctl_sent_set_t *sent,
                        ctl_letter_t *l)
{
    l->applied = -1;
    if (l->consumer == NULL || !l->has_id)
        return;
    for (long i = 0; sent && i < sent->n; i++)
        if (sent->v[i].id_len == l->id_len && memcmp(sent->v[i].id, l->id, l->id_len) == 0 &&
            strcmp(sent->v[i].consumer, l->consumer) == 0) {
            l->applied = 2; /* replayed earlier in this pass: that copy records it */
            return;
        }
    if (db == NULL || !*records_ok)
        return;
    l->applied = ctl_applied(db, ctl->conf->database.record_table, l->consumer, l->id, l->id_len);
    if (l->applied < 0) {
        *records_ok = false;
        ctl_fprintf(stderr,
                    "idemctl: WARNING: cannot read table %s (see above): whether a letter "
                    "was applied is unknown\n",
                    ctl->conf->database.record_table);
    }
}

/* Remember that this pass replayed l (its consumer known). 0, or -1 when out of memory. */
int ctl_sent_add(ctl_sent_set_t *sent, const ctl_letter_t *l)
{
    if (l->consumer == NULL || !l->has_id || l->id_len > DELIVERY_ID_MAX)
        return 0;
    if (sent->n == sent->cap) {
        long cap = sent->cap ? sent->cap * 2 : 64;
        ctl_sent_t *v = realloc(sent->v, (size_t)cap * sizeof(*v));
        if (v == NULL) {
            log_error("out of memory for the ids of %ld replayed letters", cap);
            return -1;
        }
        sent->v = v;
        sent->cap = cap;
    }
    ctl_sent_t *e = &sent->v[sent->n++];
    e->consumer = l->consumer;
    e->id_len = l->id_len;
    memcpy(e->id, l->id, l->id_len);
    return 0;
}

/* "applied", "not-applied" or "unknown". */
const char *ctl_applied_name(int applied)
{
    return applied > 0 ? "applied" : applied == 0 ? "not-applied" : "unknown";
}

/* Whether the command's selection (--reason, --id, --verified-only) takes l. */
bool ctl_selected(const ctl_t *ctl, const ctl_letter_t *l)
{
    if (ctl->verified_only && !l->verified)
        return false;
    if (ctl->has_reason && regexec(&ctl->reason, l->reason, 0, NULL, 0) != 0)
        return false;
    if (ctl->n_ids > 0) {
        bool hit = false;
        for (int i = 0; i < ctl->n_ids && !hit; i++)
            hit = l->has_id && strlen(ctl->ids[i]) == l->id_len &&
                  memcmp(ctl->ids[i], l->id, l->id_len) == 0;
        return hit;
    }
    return true;
}

/* A letter's id into a --json object (null without one). */
void ctl_letter_json_id(json_object *o, const ctl_letter_t *l)
{
    if (l->has_id)
        ctl_json_str(o, "id", l->id, l->id_len);
    else
        json_object_object_add(o, "id", NULL);
}

/* A letter's signature, consumer and applied into a --json object. */
void ctl_letter_json_checks(json_object *o, const ctl_letter_t *l)
{
    json_object_object_add(o, "signature", ctl_json_text(ctl_sig_names[l->sig]));
    json_object_object_add(o, "consumer", l->consumer ? ctl_json_text(l->consumer) : NULL);
    json_object_object_add(o, "applied",
                           l->applied < 0 ? NULL : json_object_new_boolean(l->applied));
}

/* A letter's id as the first field of a text line ("-" without one). */
void ctl_letter_put_id(const ctl_letter_t *l)
{
    if (l->has_id)
        ctl_put(stdout, l->id, l->id_len);
    else
        ctl_printf("-");
}

/* One dead letter for dlq list: a line of text, or an object of the --json document. */
void ctl_letter_print(const ctl_t *ctl, const ctl_letter_t *l, json_object *arr)
{
    if (ctl->json) {
        json_object *o = json_object_new_object();
        ctl_letter_json_id(o, l);
        ctl_json_str(o, "reason", l->reason, strlen(l->reason));
        json_object_object_add(o, "attempts", json_object_new_int64(l->attempts));
        json_object_object_add(o, "first_failure", ctl_json_text(l->first));
        json_object_object_add(o, "last_failure", ctl_json_text(l->last));
        json_object_object_add(o, "original_exchange",
                               l->has_exchange ? ctl_json_text(l->exchange) : NULL);
        json_object_object_add(o, "original_routing_key",
                               l->has_routing_key ? ctl_json_text(l->routing_key) : NULL);
        json_object_object_add(o, "queue", ctl_json_text(l->queue));
        ctl_letter_json_checks(o, l);
        json_object_array_add(arr, o);
        return;
    }
    ctl_letter_put_id(l);
    ctl_printf("\t%lld\t%s\t%s\t", l->attempts, l->first[0] ? l->first : "-",
               l->last[0] ? l->last : "-");
    ctl_puts(stdout, l->has_exchange ? l->exchange : "-");
    ctl_printf("\t");
    ctl_puts(stdout, l->has_routing_key ? l->routing_key : "-");
    ctl_printf("\t");
    ctl_puts(stdout, l->queue[0] ? l->queue : "-");
    ctl_printf("\t");
    ctl_puts(stdout, l->reason);
    ctl_printf("\t%s\t%s\n", ctl_sig_names[l->sig], ctl_applied_name(l->applied));
}

/* ---------- fingerprint ---------- */

/* Feed n bytes of b to h, after their length, so that no two sequences run together. */
static void ctl_fp_bytes(EVP_MD_CTX *h, const void *b, size_t n)
{
    uint64_t len = n;
    EVP_DigestUpdate(h, &len, sizeof(len));
    if (n > 0)
        EVP_DigestUpdate(h, b, n);
}

/* Feed an integer (or the bits of a float) to h. */
static void ctl_fp_int(EVP_MD_CTX *h, uint64_t v)
{
    EVP_DigestUpdate(h, &v, sizeof(v));
}

static void ctl_fp_table(EVP_MD_CTX *h, const amqp_table_t *t, bool top);

/* Feed one field value to h: its kind, then its value, nested tables and arrays walked. */
static void ctl_fp_value(EVP_MD_CTX *h, const amqp_field_value_t *v)
{
    unsigned char kind = v->kind;
    EVP_DigestUpdate(h, &kind, 1);
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN:
        ctl_fp_int(h, v->value.boolean != 0);
        break;
    case AMQP_FIELD_KIND_I8:
        ctl_fp_int(h, (uint64_t)(int64_t)v->value.i8);
        break;
    case AMQP_FIELD_KIND_U8:
        ctl_fp_int(h, v->value.u8);
        break;
    case AMQP_FIELD_KIND_I16:
        ctl_fp_int(h, (uint64_t)(int64_t)v->value.i16);
        break;
    case AMQP_FIELD_KIND_U16:
        ctl_fp_int(h, v->value.u16);
        break;
    case AMQP_FIELD_KIND_I32:
        ctl_fp_int(h, (uint64_t)(int64_t)v->value.i32);
        break;
    case AMQP_FIELD_KIND_U32:
        ctl_fp_int(h, v->value.u32);
        break;
    case AMQP_FIELD_KIND_I64:
        ctl_fp_int(h, (uint64_t)v->value.i64);
        break;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        ctl_fp_int(h, v->value.u64);
        break;
    case AMQP_FIELD_KIND_F32:
        ctl_fp_int(h, v->value.u32);
        break;
    case AMQP_FIELD_KIND_F64:
        ctl_fp_int(h, v->value.u64);
        break;
    case AMQP_FIELD_KIND_DECIMAL:
        ctl_fp_int(h, v->value.decimal.decimals);
        ctl_fp_int(h, v->value.decimal.value);
        break;
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        ctl_fp_bytes(h, v->value.bytes.bytes, v->value.bytes.len);
        break;
    case AMQP_FIELD_KIND_ARRAY:
        ctl_fp_int(h, (uint64_t)v->value.array.num_entries);
        for (int i = 0; i < v->value.array.num_entries; i++)
            ctl_fp_value(h, &v->value.array.entries[i]);
        break;
    case AMQP_FIELD_KIND_TABLE:
        ctl_fp_table(h, &v->value.table, false);
        break;
    default: /* void */
        break;
    }
}

/* Whether key is a count the broker raises each time the letter is handed out or returned:
 * x-delivery-count (quorum queues), x-acquired-count (quorum queues, RabbitMQ 4.x). */
static bool ctl_fp_count(amqp_bytes_t key)
{
    static const char *const counts[] = {"x-delivery-count", "x-acquired-count"};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
        if (key.len == strlen(counts[i]) && memcmp(key.bytes, counts[i], key.len) == 0)
            return true;
    return false;
}

/* Feed a table to h, entry by entry in its order; at the top, without the broker's counts
 * (ctl_fp_count), which change each time the letter is returned. */
static void ctl_fp_table(EVP_MD_CTX *h, const amqp_table_t *t, bool top)
{
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (top && ctl_fp_count(e->key))
            continue;
        ctl_fp_bytes(h, e->key.bytes, e->key.len);
        ctl_fp_value(h, &e->value);
    }
    ctl_fp_int(h, UINT64_MAX); /* the end of the table */
}

/*
 * l->fp: the SHA-256 of the letter as it lies in the queue: its body, its
 * message id, timestamp and headers (the broker's x-death and idemd's
 * failure times make each dead-lettering differ). 0, or -1 (logged) when
 * the digest cannot be made.
 */
int ctl_letter_fingerprint(ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    unsigned int n = 0;
    int rc = -1;

    if (h == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1) {
        log_error("replay: cannot make a letter's fingerprint (SHA-256)");
        goto out;
    }
    ctl_fp_bytes(h, l->msg.body.bytes, l->msg.body.len);
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        ctl_fp_bytes(h, p->message_id.bytes, p->message_id.len);
    else
        ctl_fp_int(h, UINT64_MAX);
    ctl_fp_int(h, p->_flags & AMQP_BASIC_TIMESTAMP_FLAG ? p->timestamp : UINT64_MAX);
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG)
        ctl_fp_table(h, &p->headers, true);
    if (EVP_DigestFinal_ex(h, l->fp, &n) != 1 || n != CTL_FP_LEN) {
        log_error("replay: cannot make a letter's fingerprint (SHA-256)");
        goto out;
    }
    rc = 0;
out:
    EVP_MD_CTX_free(h);
    return rc;
}

/*
 * Headers a replayed copy must not carry: idemd's failure headers and the
 * broker's. idemd-body-dropped stays, so that whoever gets the empty body
 * knows why.
 */
bool ctl_header_dropped(amqp_bytes_t key)
{
    size_t bd = strlen(COPIES_H_BODY_DROPPED);
    if (key.len == bd && memcmp(key.bytes, COPIES_H_BODY_DROPPED, bd) == 0)
        return false;
    static const char *prefixes[] = {"idemd-", "x-death", "x-first-death-", "x-last-death-",
                                     "x-delivery-count"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (key.len >= n && strncasecmp((const char *)key.bytes, prefixes[i], n) == 0)
            return true;
    }
    return false;
}
