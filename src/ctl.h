/* ctl.h: what idemctl's command files share: the command line, exit codes and helpers. */
#ifndef IDEMD_CTL_H
#define IDEMD_CTL_H

#include <json-c/json.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "conf.h"
#include "db.h"
#include "mq.h"
#include "copies.h"

#define CTL_DEFAULT_CONF "/etc/idemd/idemd.conf"

/* Exit codes a script can rely on (idemctl(8), EXIT STATUS). */
#define CTL_EXIT_OK 0
#define CTL_EXIT_NOMATCH 1  /* an id was not found, or nothing matched */
#define CTL_EXIT_USAGE 2    /* bad arguments or configuration; purge without --yes */
#define CTL_EXIT_CONNECT 3  /* cannot reach the broker or the database */
#define CTL_EXIT_PARTIAL 4  /* stopped part way: what was done is done, the rest is untouched */
#define CTL_EXIT_BOUNDARY 5 /* try: the handler tried to end idemd's transaction (or ended it) */

typedef enum ctl_mode { CTL_LIST, CTL_COUNT, CTL_REPLAY, CTL_PURGE } ctl_mode_t;

/* The command line, and what the command shares. */
typedef struct ctl {
    conf_t *conf;
    bool json;
    const char *consumer; /* --consumer or NULL */
    bool has_reason;
    const char *reason_src;
    regex_t reason;
    long limit; /* dlq list: 0 = all */
    const char **ids;
    int n_ids;
    bool all, yes, to_original;
    bool unverified;       /* dlq replay: letters whose idemd-sig does not verify too */
    bool allow_empty_body; /* dlq replay: letters whose body was dropped too */
    bool verified_only;    /* dlq list / replay / purge: only letters whose idemd-sig verifies */
    bool force;            /* dlq replay: applied letters too, and without a trail table */
    bool dry_run;          /* dlq replay: say what would be done, do nothing */
    copies_keys_t keys;    /* dlq replay: the installation's relay keys (n = 0: unread) */
    const char *to_queue;
    long slow_ms;
    long rate;         /* dlq replay --rate: letters a second; 0: unpaced */
    long long older_s; /* records purge */
    long batch;
    json_object *out; /* --json: the document printed at the end */
} ctl_t;

/*
 * Output, in ctl_out.c. idemctl writes nothing any other way (tests/lint
 * checks): in text mode every field, whoever supplied it (a message, a
 * server, the database, the command line), is shown through log_escape,
 * so control bytes, invalid UTF-8 and a terminal's escape sequences come
 * out as \xNN, \n, \uNNNN text, never as they are.
 */

/* printf to f, each %s, %c and %m through log_escape (backslashes single); the format as it is. */
void ctl_fprintf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ctl_fprintf to stdout. */
void ctl_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* ctl_fprintf with a va_list. */
void ctl_vfprintf(FILE *f, const char *fmt, va_list ap);
/* len bytes of s to f through log_escape, a backslash as two (any bytes: one field, unambiguous).
 */
void ctl_put(FILE *f, const char *s, size_t len);
/* ctl_put of a C string. */
void ctl_puts(FILE *f, const char *s);
/* Print the --json document (ctl->out, escaped by json-c) and free it. */
void ctl_json_flush(ctl_t *ctl);
/*
 * A --json string of n bytes of b (anything a letter holds): invalid UTF-8 becomes U+FFFD,
 * and C0, DEL, C1, bidi controls and U+2028/U+2029 go out as \uXXXX, so the document is
 * RFC 8259 in valid UTF-8 and a terminal shows it as text. Owned by the caller (json-c).
 * Every string idemctl puts in a document comes from here (tests/lint-output).
 */
json_object *ctl_json_bytes(const void *b, size_t n);
/* ctl_json_bytes of a C string (NULL: ""). */
json_object *ctl_json_text(const char *s);
/* An object key from data (a header's name): what ctl_json_bytes would escape written as
 * the text \uXXXX (a bad byte as \xXX), into buf (len bytes, cut to fit); returns buf. */
const char *ctl_json_key(const char *k, char *buf, size_t len);

/* Helpers in ctl_common.c. */

/* Seconds s as a duration idemctl reads back ("1d1m", "90s"), into buf. */
void ctl_format_duration(long long s, char *buf, size_t len);
/* An X'...' literal for bytes: safe for any consumer or id. Returns a malloc'd string or NULL. */
char *ctl_hex(const char *s, size_t len);
/* Add a string member to a JSON object (bytes, may hold anything json-c can escape). */
void ctl_json_str(json_object *o, const char *key, const char *s, size_t len);
/* The distinct consumers of the configuration, or just --consumer (see ctl_common.c). */
const char **ctl_consumers(const ctl_t *ctl, int *n);
/* Open the database as the first configured consumer. 0 or CTL_EXIT_CONNECT (logged). */
int ctl_db_open(const ctl_t *ctl, db_t **db);
/* One row of sql into vals[0..n-1]: 1 for a row, 0 for none, -1 on error (logged). */
int ctl_query_row(db_t *db, const char *sql, char (*vals)[64], int n);
/* Passive queue.declare of name: 0, 1 when there is no such queue, or -1 (logged). */
int ctl_queue_peek(mq_t *mq, const char *name, unsigned *msgs, unsigned *consumers);

/* The commands, one file per family; each returns CTL_EXIT_*. */

/* ctl_records.c: lookup, records purge, and the horizon records purge keeps. */
int ctl_lookup(ctl_t *ctl, char **ids, int n_ids);
int ctl_records_purge(ctl_t *ctl);
long long ctl_purge_floor(const ctl_t *ctl, const char **longest, int *max_ms);
/* ctl_key.c: key status / stage / promote / retire. */
int ctl_key(ctl_t *ctl, const char *sub);
/* ctl_order.c: order list [QUEUE] / order release QUEUE KEY (args: what follows the sub). */
int ctl_order(ctl_t *ctl, const char *sub, char **args, int n_args);
/* ctl_status.c: status. */
int ctl_status(ctl_t *ctl);
/* ctl_outbox.c: outbox list, and one consumer's outbox counts for status (0, 1, -1). */
int ctl_outbox_list(ctl_t *ctl, const char *queue);
int ctl_outbox_counts(const ctl_t *ctl, db_t *db, const char *consumer, long long ob[3]);
/* ctl_dlq.c: dlq list / count / replay / purge. */
int ctl_dlq(ctl_t *ctl, const char *queue, ctl_mode_t mode);
/* Requeue the kept deliveries tags[0..n-1] (ascending) of queue on rd in their order. */
void ctl_requeue(mq_t *rd, const char *queue, const uint64_t *tags, long n);

/* ctl_try.c: try QUEUE ... (its own command line: idemctl.c hands it argv when the command
 * word is "try"). */
bool ctl_try_wanted(int argc, char **argv);
int ctl_try_main(int argc, char **argv);

/* ctl_replay.c: replay's dedup check and trail (table idemd_replay, sql/013), dlq history. */

/* A letter's fingerprint (ctl_letter_fingerprint): SHA-256, the trail's fingerprint column. */
#define CTL_FP_LEN 32
/* Where a trail row stands (column state, sql/014): written before the copy is published, the
 * broker confirmed the copy, the dead letter was acked. */
#define CTL_TRAIL_SENDING "sending"
#define CTL_TRAIL_CONFIRMED "confirmed"
#define CTL_TRAIL_ACKED "acked"

/* One replay for the trail; borrows every string (NULL: SQL NULL). */
typedef struct ctl_trail {
    const char *id; /* the letter's id, id_len bytes; NULL when it has none */
    size_t id_len;
    const char *source, *exchange, *routing_key, *consumer, *signature;
    int applied; /* 1, 0, -1: unknown */
    bool forced;
    const char *stage;                /* CTL_TRAIL_*: its column state */
    const unsigned char *fingerprint; /* CTL_FP_LEN bytes */
} ctl_trail_t;
/* A trail row a rerun may go on from: its id, and whether it still says "sending" (else the
 * copy was confirmed). */
typedef struct ctl_trail_row {
    long long id;
    bool sending;
} ctl_trail_row_t;
/* Whether id (len bytes) is recorded for consumer in record_table: 1, 0, or -1 (logged). The
 * transaction is rolled back after. */
int ctl_applied(db_t *db, const char *record_table, const char *consumer, const char *id,
                size_t len);
/* What ctl_trail_ready says. */
#define CTL_TRAIL_NONE 0  /* no table idemd_replay (sql/013) */
#define CTL_TRAIL_READY 1 /* the table, with state and fingerprint */
#define CTL_TRAIL_OLD 2   /* the table without state and fingerprint (sql/014) */
/* Whether table idemd_replay can be written: CTL_TRAIL_*, or -1 (logged). */
int ctl_trail_ready(db_t *db);
/* Insert t's row into idemd_replay in db's open transaction (the caller commits): who (the
 * real user's login name, SUDO_USER, CURRENT_USER()), where from (hostname); its id into *row.
 * 0 or -1 (logged). */
int ctl_trail_add(db_t *db, const ctl_trail_t *t, long long *row);
/* The newest row id of the trail into *floor (0: none), so that a pass tells its own rows
 * from those of earlier passes. 0 or -1 (logged). */
int ctl_trail_floor(db_t *db, long long *floor);
/* The rows of the letter of fingerprint fp (CTL_FP_LEN bytes), with ids up to floor, newest
 * first, into rows[0..max-1]: how many, or -1 (logged). Rolls back after. */
int ctl_trail_find(db_t *db, const unsigned char *fp, long long floor, ctl_trail_row_t *rows,
                   int max);
/* Set state (CTL_TRAIL_*) on the rows[0..n-1], or delete them (state NULL), in db's open
 * transaction (the caller commits). 0 or -1 (logged). */
int ctl_trail_set(db_t *db, const long long *rows, long n, const char *state);
/* dlq history [QUEUE]: the trail, newest first, at most ctl->limit rows (default 100). */
int ctl_dlq_history(ctl_t *ctl, const char *queue);

#endif
