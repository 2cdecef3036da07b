/* pubround.c: one publishing round's bookkeeping (confirms, nacks, returns), with no connection. */
#include "pubround.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#ifdef IDEMD_TESTING
bool pubround_test_match_by_key = false;
#endif

void pubround_init(pubround_t *pr, const char *where)
{
    memset(pr, 0, sizeof(*pr));
    pr->where = where;
}

void pubround_begin(pubround_t *pr)
{
    for (int i = 0; i < pr->n; i++) {
        free(pr->copies[i].exchange);
        free(pr->copies[i].routing_key);
    }
    pr->n = 0;
    pr->closed_why[0] = '\0';
}

void pubround_free(pubround_t *pr)
{
    pubround_begin(pr);
    free(pr->copies);
    pr->copies = NULL;
    pr->cap = 0;
}

int pubround_add(pubround_t *pr, uint64_t seq, const char *exchange, const char *routing_key,
                 bool quiet)
{
    if (pr->n == pr->cap) {
        int cap = pr->cap ? pr->cap * 2 : 16;
        pubround_copy_t *r = realloc(pr->copies, sizeof(*r) * (size_t)cap);
        if (r == NULL)
            return -1;
        pr->copies = r;
        pr->cap = cap;
    }
    pubround_copy_t *c = &pr->copies[pr->n];
    c->exchange = strdup(exchange);
    c->routing_key = strdup(routing_key);
    if (c->exchange == NULL || c->routing_key == NULL) {
        free(c->exchange);
        free(c->routing_key);
        return -1;
    }
    c->seq = seq;
    c->quiet = quiet;
    c->returned = false;
    c->state = PUBROUND_PENDING;
    c->why[0] = '\0';
    return pr->n++;
}

void pubround_drop_last(pubround_t *pr)
{
    if (pr->n == 0)
        return;
    pr->n--;
    free(pr->copies[pr->n].exchange);
    free(pr->copies[pr->n].routing_key);
}

/* Settle the round's pending copies covered by a basic.ack or basic.nack. */
static void pubround_settle(pubround_t *pr, uint64_t tag, bool multiple, bool acked)
{
    for (int i = 0; i < pr->n; i++) {
        pubround_copy_t *c = &pr->copies[i];
        if (c->state != PUBROUND_PENDING || (multiple ? c->seq > tag : c->seq != tag))
            continue;
        c->state = acked && !c->returned ? PUBROUND_ACKED : PUBROUND_REFUSED;
        if (!acked)
            snprintf(c->why, sizeof(c->why), "refused by the broker (basic.nack)");
        if (c->state == PUBROUND_REFUSED && !c->quiet)
            log_error("broker %s: copy to exchange '%s' routing key '%s' refused: %s",
                      pr->where ? pr->where : "", c->exchange, c->routing_key, c->why);
    }
}

void pubround_ack(pubround_t *pr, uint64_t tag, bool multiple)
{
    pubround_settle(pr, tag, multiple, true);
}

void pubround_nack(pubround_t *pr, uint64_t tag, bool multiple)
{
    pubround_settle(pr, tag, multiple, false);
}

/* Mark c returned, with the broker's reason. */
static void pubround_mark_returned(pubround_copy_t *c, int code, const char *text)
{
    c->returned = true;
    snprintf(c->why, sizeof(c->why), "unroutable: returned by the broker: %d %s", code, text);
}

#ifdef IDEMD_TESTING
/* The matching before issue 19 (pubround_test_match_by_key): by routing key alone, every one. */
static int pubround_return_by_key(pubround_t *pr, const char *routing_key, int code,
                                  const char *text)
{
    int first = -1;
    for (int i = 0; i < pr->n; i++) {
        pubround_copy_t *c = &pr->copies[i];
        if (c->state != PUBROUND_PENDING || strcmp(c->routing_key, routing_key) != 0)
            continue;
        pubround_mark_returned(c, code, text);
        if (first < 0)
            first = i;
    }
    return first;
}
#endif

int pubround_return(pubround_t *pr, long long seq, const char *exchange, const char *routing_key,
                    int code, const char *text)
{
#ifdef IDEMD_TESTING
    if (pubround_test_match_by_key)
        return pubround_return_by_key(pr, routing_key, code, text);
#endif
    for (int i = 0; i < pr->n; i++) {
        pubround_copy_t *c = &pr->copies[i];
        if (c->state != PUBROUND_PENDING || c->returned)
            continue;
        if (seq >= 0
                ? c->seq == (uint64_t)seq
                : strcmp(c->exchange, exchange) == 0 && strcmp(c->routing_key, routing_key) == 0) {
            pubround_mark_returned(c, code, text);
            return i;
        }
    }
    return -1; /* a copy of an earlier round, given up already */
}

/* Refuse every pending copy: "not confirmed", with the channel's close reason if any. */
static void pubround_fail_pending(pubround_t *pr)
{
    for (int i = 0; i < pr->n; i++) {
        pubround_copy_t *c = &pr->copies[i];
        if (c->state != PUBROUND_PENDING)
            continue;
        c->state = PUBROUND_REFUSED;
        snprintf(c->why, sizeof(c->why), "not confirmed%s%s", pr->closed_why[0] ? ": " : "",
                 pr->closed_why);
    }
}

void pubround_channel_closed(pubround_t *pr, const char *why)
{
    snprintf(pr->closed_why, sizeof(pr->closed_why), "%s", why);
    pubround_fail_pending(pr);
}

int pubround_finish(pubround_t *pr)
{
    int rc = 0;
    pubround_fail_pending(pr);
    for (int i = 0; i < pr->n; i++)
        if (pr->copies[i].state != PUBROUND_ACKED)
            rc = -1;
    return rc;
}

int pubround_pending(const pubround_t *pr)
{
    int n = 0;
    for (int i = 0; i < pr->n; i++)
        n += pr->copies[i].state == PUBROUND_PENDING;
    return n;
}

bool pubround_ok(const pubround_t *pr, int index)
{
    return index >= 0 && index < pr->n && pr->copies[index].state == PUBROUND_ACKED;
}

bool pubround_returned(const pubround_t *pr, int index)
{
    return index >= 0 && index < pr->n && pr->copies[index].returned;
}

const char *pubround_why(const pubround_t *pr, int index)
{
    if (index < 0 || index >= pr->n)
        return "not published";
    const pubround_copy_t *c = &pr->copies[index];
    return c->state == PUBROUND_ACKED ? NULL : c->why[0] ? c->why : "not confirmed";
}
