/* ctl_letter.h: one dead letter as idemctl reads it (ctl_letter.c), for the dlq commands
 * (ctl_dlq.c). */
#ifndef IDEMD_CTL_LETTER_H
#define IDEMD_CTL_LETTER_H

#include <json-c/json.h>
#include <stdbool.h>

#include "ctl.h"
#include "delivery.h"

/* What a letter's idemd-sig says (ctl_letter_verify; idemctl(8), "Signatures"). */
typedef enum ctl_sig {
    CTL_SIG_VERIFIED,  /* idemd-sig verifies: idemd dead-lettered it, its headers are idemd's */
    CTL_SIG_UNSIGNED,  /* no idemd-sig and none of idemd's headers: not dead-lettered by idemd */
    CTL_SIG_FORGED,    /* an idemd-sig that does not verify, or idemd's headers without one */
    CTL_SIG_UNCHECKED, /* an idemd-sig, but the keys could not be read */
} ctl_sig_t;
extern const char *const ctl_sig_names[]; /* by ctl_sig_t: "verified", "unsigned", ... */

/* What idemctl reads off one dead letter; borrows nothing after ctl_letter_read. */
typedef struct ctl_letter {
    uint64_t tag;
    amqp_message_t msg;
    const conf_queue_t *q; /* the configured queue named by idemd-queue, or NULL */
    bool has_id;
    char id[DELIVERY_ID_MAX + 1];
    size_t id_len;
    long long attempts;
    bool has_exchange, has_routing_key;
    bool onward;          /* idemd-onward = 1: an onward message idemd could not deliver */
    bool body_dropped;    /* idemd-body-dropped: the body was not kept */
    bool verified;        /* idemd-sig verifies (ctl_letter_verify) */
    ctl_sig_t sig;        /* and what it says when not */
    char unverified[300]; /* why not, when not */
    /* The work queue the dead letter queue belongs to (ctl_dlq_home), or NULL. An unverified
     * letter is taken as one of its messages: l->q is set to it, the id read as it reads it. */
    const conf_queue_t *home;
    const char *consumer; /* whose dedup records say whether it was applied; NULL: unknown */
    int applied;          /* its id is recorded for consumer: 1, 0, -1 unknown */
    char reason[1024], first[64], last[64], queue[256], exchange[256], routing_key[256];
    unsigned char fp[CTL_FP_LEN]; /* ctl_letter_fingerprint */
} ctl_letter_t;

/* The ids one replay pass sent back, per consumer: a later letter of the same id is applied. */
typedef struct ctl_sent {
    const char *consumer; /* borrowed from ctl */
    size_t id_len;
    char id[DELIVERY_ID_MAX];
} ctl_sent_t;
typedef struct ctl_sent_set {
    ctl_sent_t *v;
    long n, cap;
} ctl_sent_set_t;

/* Fill l's fields from its message (l->msg read already). */
void ctl_letter_fields(const ctl_t *ctl, ctl_letter_t *l);

/* Check l's idemd-sig under ctl->keys: sets l->sig, l->verified and l->unverified. */
void ctl_letter_verify(const ctl_t *ctl, ctl_letter_t *l);

/* After ctl_letter_verify: what l is taken for (l->home, l->q, l->consumer), read from dlq. */
void ctl_letter_place(const ctl_t *ctl, const char *dlq, ctl_letter_t *l);

/* Whether l's id is recorded for l->consumer (l->applied), or was sent earlier in this pass;
 * *records_ok turns false once the record table cannot be read (said once). */
void ctl_letter_applied(const ctl_t *ctl, db_t *db, bool *records_ok, const ctl_sent_set_t *sent,
                        ctl_letter_t *l);

/* Remember that this pass replayed l (its consumer known). 0, or -1 when out of memory. */
int ctl_sent_add(ctl_sent_set_t *sent, const ctl_letter_t *l);

/* l->fp: the SHA-256 of l as it lies in the queue (body, message id, timestamp, headers but
 * x-delivery-count), which the replay trail keeps. 0, or -1 (logged). */
int ctl_letter_fingerprint(ctl_letter_t *l);

/* "applied", "not-applied" or "unknown". */
const char *ctl_applied_name(int applied);

/* Whether the command's selection (--reason, --id, --verified-only) takes l. */
bool ctl_selected(const ctl_t *ctl, const ctl_letter_t *l);

/* A letter's id into a --json object (null without one). */
void ctl_letter_json_id(json_object *o, const ctl_letter_t *l);

/* A letter's signature, consumer and applied into a --json object. */
void ctl_letter_json_checks(json_object *o, const ctl_letter_t *l);

/* A letter's id as the first field of a text line ("-" without one). */
void ctl_letter_put_id(const ctl_letter_t *l);

/* One dead letter for dlq list: a line of text, or an object of arr (--json). */
void ctl_letter_print(const ctl_t *ctl, const ctl_letter_t *l, json_object *arr);

/* Whether a replayed copy leaves the header key out (idemd's failure headers, the broker's). */
bool ctl_header_dropped(amqp_bytes_t key);

#endif
