/* test_pubround.c: unit tests of a publishing round's bookkeeping (acks, nacks, returns, close). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pubround.h"
#include "tap.h"

/* Add a copy that must be accepted; its index. */
static int t_add(pubround_t *pr, uint64_t seq, const char *exchange, const char *key)
{
    int i = pubround_add(pr, seq, exchange, key, false);
    if (i < 0) {
        printf("Bail out! pubround_add failed\n");
        exit(1);
    }
    return i;
}

/* Whether why(index) is text, or starts with it when prefix. */
static bool t_why(const pubround_t *pr, int index, const char *text, bool prefix)
{
    const char *why = pubround_why(pr, index);
    if (why == NULL || text == NULL)
        return why == text;
    return prefix ? strncmp(why, text, strlen(text)) == 0 : strcmp(why, text) == 0;
}

static void t_acks(void)
{
    pubround_t pr;
    pubround_init(&pr, "test");

    pubround_begin(&pr);
    for (int i = 0; i < 4; i++)
        t_add(&pr, (uint64_t)i + 1, "", "q");
    pubround_ack(&pr, 2, true);
    ok(pubround_ok(&pr, 0) && pubround_ok(&pr, 1) && !pubround_ok(&pr, 2) && !pubround_ok(&pr, 3) &&
           pubround_pending(&pr) == 2,
       "ack multiple 2: copies 1 and 2 acked, 3 and 4 pending");
    ok(t_why(&pr, 0, NULL, false) && t_why(&pr, 2, "not confirmed", false),
       "why: NULL when acked, \"not confirmed\" while pending");
    pubround_ack(&pr, 4, false);
    ok(!pubround_ok(&pr, 2) && pubround_ok(&pr, 3) && pubround_pending(&pr) == 1,
       "ack 4 alone: copy 3 still pending");
    pubround_ack(&pr, 3, false);
    ok(pubround_pending(&pr) == 0 && pubround_finish(&pr) == 0, "every copy acked: finish 0");
    ok(t_why(&pr, -1, "not published", false) && t_why(&pr, 4, "not published", false) &&
           !pubround_ok(&pr, 4) && !pubround_returned(&pr, -1),
       "an index outside the round: not published, not ok");

    /* A channel's sequence numbers go on across rounds: an ack of an earlier round's tag. */
    pubround_begin(&pr);
    t_add(&pr, 5, "", "q");
    t_add(&pr, 6, "", "q");
    pubround_ack(&pr, 4, true);
    ok(pubround_pending(&pr) == 2, "ack multiple of an earlier round's tag settles nothing");
    pubround_ack(&pr, 6, true);
    ok(pubround_ok(&pr, 0) && pubround_ok(&pr, 1), "ack multiple 6 settles 5 and 6");
    pubround_ack(&pr, 6, true);
    ok(pubround_ok(&pr, 1), "a second ack changes nothing");

    /* Growth past the first allocation (16). */
    pubround_begin(&pr);
    for (int i = 0; i < 100; i++)
        t_add(&pr, (uint64_t)i + 1, "ex", "q");
    pubround_ack(&pr, 100, true);
    ok(pr.n == 100 && pubround_pending(&pr) == 0 && pubround_finish(&pr) == 0,
       "100 copies, one ack multiple");
    pubround_free(&pr);
    ok(pr.n == 0 && pr.copies == NULL, "free empties the round");
}

static void t_nacks(void)
{
    pubround_t pr;
    log_sink_t sink, got;

    pubround_init(&pr, "test");
    memset(&sink, 0, sizeof(sink));
    log_set_sink(&sink);
    for (int i = 0; i < 4; i++)
        t_add(&pr, (uint64_t)i + 1, "", "q");
    pubround_nack(&pr, 2, true);
    ok(!pubround_ok(&pr, 0) && !pubround_ok(&pr, 1) && pubround_pending(&pr) == 2 &&
           t_why(&pr, 0, "refused by the broker (basic.nack)", false) &&
           t_why(&pr, 1, "refused", true) && !pubround_returned(&pr, 0),
       "nack multiple 2: copies 1 and 2 refused (basic.nack)");
    ok(log_sink_get(&sink, &got) && strstr(got.text, "routing key 'q' refused") != NULL,
       "a refused copy is logged");
    pubround_nack(&pr, 3, false);
    pubround_ack(&pr, 4, false);
    ok(!pubround_ok(&pr, 2) && pubround_ok(&pr, 3) && pubround_finish(&pr) == -1,
       "nack 3 alone, ack 4: finish -1");
    pubround_ack(&pr, 3, false);
    ok(!pubround_ok(&pr, 2), "an ack after the nack changes nothing");

    pubround_begin(&pr);
    memset(&sink, 0, sizeof(sink));
    if (pubround_add(&pr, 1, "", "probe", true) != 0)
        ok(0, "quiet add");
    pubround_nack(&pr, 1, false);
    ok(!pubround_ok(&pr, 0) && !log_sink_get(&sink, &got), "a quiet copy's refusal is not logged");
    log_set_sink(NULL);
    pubround_free(&pr);
}

static void t_returns(void)
{
    pubround_t pr;
    pubround_init(&pr, "test");

    /* Same routing key through two exchanges: only the copy the header names is returned. */
    t_add(&pr, 1, "ex_a", "k");
    t_add(&pr, 2, "ex_b", "k");
    t_add(&pr, 3, "ex_a", "k");
    ok(pubround_return(&pr, 2, "ex_b", "k", 312, "NO_ROUTE") == 1,
       "return with header seq 2 matches copy 2");
    pubround_ack(&pr, 3, true);
    ok(pubround_ok(&pr, 0) && !pubround_ok(&pr, 1) && pubround_ok(&pr, 2) &&
           pubround_returned(&pr, 1) && !pubround_returned(&pr, 0) && !pubround_returned(&pr, 2),
       "after ack multiple 3: copies 1 and 3 acked, copy 2 returned and refused");
    ok(t_why(&pr, 1, "unroutable: returned by the broker: 312 NO_ROUTE", false),
       "a returned copy's why: %s", pubround_why(&pr, 1));
    ok(pubround_finish(&pr) == -1, "finish -1 with a returned copy");

    /* The header wins over exchange and key. */
    pubround_begin(&pr);
    t_add(&pr, 4, "ex_a", "k");
    t_add(&pr, 5, "ex_a", "k");
    ok(pubround_return(&pr, 5, "other", "other", 312, "NO_ROUTE") == 1 &&
           !pubround_returned(&pr, 0) && pubround_returned(&pr, 1),
       "the header's seq names the copy whatever the exchange and key");
    ok(pubround_return(&pr, 5, "ex_a", "k", 312, "NO_ROUTE") == -1,
       "a second return of the same seq matches nothing");
    ok(pubround_return(&pr, 3, "ex_a", "k", 312, "NO_ROUTE") == -1 && !pubround_returned(&pr, 0),
       "a return of an earlier round's seq is ignored");

    /* Without the header: the first pending copy of the same exchange and key, in order. */
    pubround_begin(&pr);
    t_add(&pr, 6, "ex_a", "k");
    t_add(&pr, 7, "ex_b", "k");
    t_add(&pr, 8, "ex_b", "k");
    t_add(&pr, 9, "ex_b", "j");
    ok(pubround_return(&pr, -1, "ex_b", "k", 312, "NO_ROUTE") == 1,
       "fallback: the first pending copy through ex_b with key k");
    ok(pubround_return(&pr, -1, "ex_b", "k", 312, "NO_ROUTE") == 2,
       "fallback: the next return takes the next such copy");
    ok(pubround_return(&pr, -1, "ex_b", "k", 312, "NO_ROUTE") == -1,
       "fallback: no more such copies");
    ok(!pubround_returned(&pr, 0) && !pubround_returned(&pr, 3),
       "fallback: other exchanges and keys untouched");
    pubround_ack(&pr, 6, false);
    ok(pubround_return(&pr, -1, "ex_a", "k", 312, "NO_ROUTE") == -1 && pubround_ok(&pr, 0),
       "fallback: an acked copy is not returned");
    pubround_ack(&pr, 9, true);
    ok(pubround_ok(&pr, 0) && !pubround_ok(&pr, 1) && !pubround_ok(&pr, 2) && pubround_ok(&pr, 3),
       "fallback: the returned copies are refused at their ack, the rest acked");
    pubround_free(&pr);
}

/* The matching before issue 19, put back by the test-only switch, gets it wrong. */
static void t_old_matching(void)
{
    pubround_t pr;
    pubround_init(&pr, "test");

    pubround_test_match_by_key = true;
    t_add(&pr, 1, "ex_a", "k");
    t_add(&pr, 2, "ex_b", "k");
    t_add(&pr, 3, "ex_a", "j");
    (void)pubround_return(&pr, 2, "ex_b", "k", 312, "NO_ROUTE");
    pubround_ack(&pr, 3, true);
    ok(pubround_returned(&pr, 0) && pubround_returned(&pr, 1) && !pubround_returned(&pr, 2),
       "switch on: one return marks every pending copy with key k, whatever the exchange");
    ok(!pubround_ok(&pr, 0) && !pubround_ok(&pr, 1) && pubround_ok(&pr, 2),
       "switch on: the routed copy through ex_a is wrongly refused (the bug)");
    pubround_test_match_by_key = false;

    pubround_begin(&pr);
    t_add(&pr, 4, "ex_a", "k");
    t_add(&pr, 5, "ex_b", "k");
    (void)pubround_return(&pr, 5, "ex_b", "k", 312, "NO_ROUTE");
    pubround_ack(&pr, 5, true);
    ok(pubround_ok(&pr, 0) && !pubround_ok(&pr, 1),
       "switch off again: only the returned copy is refused");
    pubround_free(&pr);
}

static void t_channel_close(void)
{
    pubround_t pr;
    char long_why[600];
    pubround_init(&pr, "test");

    t_add(&pr, 1, "", "q");
    t_add(&pr, 2, "", "q");
    t_add(&pr, 3, "", "q");
    pubround_ack(&pr, 1, false);
    (void)pubround_return(&pr, 2, "", "q", 312, "NO_ROUTE");
    pubround_channel_closed(&pr, "channel closed by the broker: 406 PRECONDITION_FAILED - x");
    ok(pubround_pending(&pr) == 0 && pubround_ok(&pr, 0) && !pubround_ok(&pr, 1) &&
           !pubround_ok(&pr, 2),
       "channel closed: every unconfirmed copy fails, the acked one stays acked");
    ok(t_why(&pr, 1, "not confirmed: channel closed by the broker: 406 PRECONDITION_FAILED - x",
             false) &&
           t_why(&pr, 2, "not confirmed: channel closed by the broker: 406 PRECONDITION_FAILED - x",
                 false),
       "channel closed: why names the close: %s", pubround_why(&pr, 2));
    pubround_ack(&pr, 3, true);
    ok(!pubround_ok(&pr, 2) && pubround_finish(&pr) == -1,
       "a late ack does not revive a failed copy; finish -1");

    /* finish without a close: plain "not confirmed" (a timeout, a lost connection). */
    pubround_begin(&pr);
    t_add(&pr, 1, "", "q");
    ok(pubround_finish(&pr) == -1 && pubround_pending(&pr) == 0 &&
           t_why(&pr, 0, "not confirmed", false),
       "finish with a pending copy: refused, not confirmed");

    /* A new round forgets the close. */
    pubround_begin(&pr);
    pubround_channel_closed(&pr, "channel closed by the broker: 404 NOT_FOUND");
    pubround_begin(&pr);
    t_add(&pr, 1, "", "q");
    ok(pubround_finish(&pr) == -1 && t_why(&pr, 0, "not confirmed", false),
       "begin forgets the last round's close");

    /* A long reason is cut, not overrun. */
    pubround_begin(&pr);
    t_add(&pr, 1, "", "q");
    memset(long_why, 'x', sizeof(long_why) - 1);
    long_why[sizeof(long_why) - 1] = '\0';
    pubround_channel_closed(&pr, long_why);
    ok(strlen(pr.closed_why) == sizeof(pr.closed_why) - 1 &&
           t_why(&pr, 0, "not confirmed: xxx", true),
       "a long close reason is cut to %zu bytes", sizeof(pr.closed_why) - 1);
    pubround_free(&pr);
}

static void t_drop_last(void)
{
    pubround_t pr;
    pubround_init(&pr, NULL);

    t_add(&pr, 1, "", "q");
    t_add(&pr, 2, "", "q");
    pubround_drop_last(&pr);
    ok(pr.n == 1 && t_add(&pr, 2, "", "r") == 1,
       "drop_last forgets the copy whose send failed; the next takes its index");
    pubround_ack(&pr, 2, true);
    ok(pubround_ok(&pr, 0) && pubround_ok(&pr, 1), "and both are acked");
    pubround_begin(&pr);
    pubround_drop_last(&pr);
    ok(pr.n == 0, "drop_last on an empty round does nothing");
    pubround_free(&pr);
    pubround_free(&pr);
    ok(pr.copies == NULL, "free twice is harmless");
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    t_acks();
    t_nacks();
    t_returns();
    t_old_matching();
    t_channel_close();
    t_drop_last();
    return done();
}
