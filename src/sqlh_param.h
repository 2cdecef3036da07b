/* sqlh_param.h: the SQL handler's parameter sources and the exact value each gives for a message.
 */
#ifndef IDEMD_SQLH_PARAM_H
#define IDEMD_SQLH_PARAM_H

#include <stdbool.h>
#include <stddef.h>

#include "../include/idemd/handler.h"
#include "json_body.h"

/* Nesting of the JSON body the reader follows (json_body.c); a deeper body is refused. */
#define SQLH_JSON_DEPTH_MAX JSON_BODY_DEPTH_MAX
/* Length of a json:PATH and of its segments' count. */
#define SQLH_PATH_MAX 255
#define SQLH_PATH_SEGS 32
/* The most digits a server's DECIMAL holds (MySQL and MariaDB: DECIMAL(65)): a JSON number with
 * a longer integer part is refused before binding. */
#define SQLH_DECIMAL_DIGITS 65

/* Where a parameter's value comes from (docs/sql-handler.md). */
typedef enum sqlh_src_kind {
    SQLH_SRC_JSON,         /* json:PATH, a field of the JSON body */
    SQLH_SRC_HEADER,       /* header:NAME, an application header */
    SQLH_SRC_MSG_ID,       /* msg:id, the dedup id */
    SQLH_SRC_ROUTING_KEY,  /* msg:routing_key */
    SQLH_SRC_EXCHANGE,     /* msg:exchange ("" for the default exchange) */
    SQLH_SRC_TIMESTAMP,    /* msg:timestamp, the AMQP timestamp property (seconds) */
    SQLH_SRC_CONTENT_TYPE, /* msg:content_type */
    SQLH_SRC_BODY,         /* body, the raw bytes */
    SQLH_SRC_CONST,        /* const:TEXT */
} sqlh_src_kind_t;

/* A step of a json: path; its name points into sqlh_src_t.arg. */
typedef json_body_seg_t sqlh_seg_t;

/* A parsed source. Made by sqlh_src_parse, freed by sqlh_src_free. */
typedef struct sqlh_src {
    sqlh_src_kind_t kind;
    bool optional; /* "?" at the end: absent binds NULL instead of failing the message */
    char *arg;     /* path, header name or constant (owned); NULL for the others */
    sqlh_seg_t segs[SQLH_PATH_SEGS];
    int n_segs;
} sqlh_src_t;

/* What a parameter binds. */
typedef enum sqlh_val_kind {
    SQLH_VAL_NULL,    /* SQL NULL */
    SQLH_VAL_INT,     /* a 64-bit integer in i */
    SQLH_VAL_TEXT,    /* a string (s, len) */
    SQLH_VAL_DECIMAL, /* a JSON number's source text (s, len), exact: never a double */
    SQLH_VAL_BLOB,    /* bytes (s, len): the body */
} sqlh_val_kind_t;

/* A growable buffer for decoded strings; zero it to start, sqlh_buf_free at the end. */
typedef json_body_buf_t sqlh_buf_t;

typedef struct sqlh_val {
    sqlh_val_kind_t kind;
    long long i;
    const char *s; /* into the message, the source or the sqlh_buf_t given */
    size_t len;
} sqlh_val_t;

/*
 * Parse a source as written in the config ("json:a.b[0]", "header:X?", "msg:id", "body",
 * "const:TEXT"). 0 and *out filled (free with sqlh_src_free), or -1 with the problem in err
 * (out holds nothing to free). Pure.
 */
int sqlh_src_parse(const char *text, sqlh_src_t *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Free what sqlh_src_parse allocated; the struct itself is the caller's. NULL is fine. */
void sqlh_src_free(sqlh_src_t *s);

/*
 * How many digits the integer part of the valid JSON number s (len bytes, a SQLH_VAL_DECIMAL's
 * text) has: 0 for zero or a pure fraction. An exponent counts (1e90: 91; 0.005e5: 3); one too
 * long to read counts as huge.
 */
long sqlh_decimal_int_digits(const char *s, size_t len);

/*
 * The value of src for msg. 0 and *out (its bytes borrowed from msg, src or buf, valid until
 * either changes); -1 with the reason in err, naming the source, when a required value is
 * absent, the body is not I-JSON (json_body.h) or a string it takes holds U+0000 (the message
 * is then rejected). An optional absent value is SQLH_VAL_NULL. Pure.
 */
int sqlh_value(const sqlh_src_t *src, const idemd_message_t *msg, sqlh_buf_t *buf, sqlh_val_t *out,
               char *err, size_t errlen) __attribute__((warn_unused_result));

/*
 * The JSON value at src's path in body (len bytes, not NUL-terminated): 1 and *out, 0 when the
 * path is absent, -1 with the reason in err when body is not I-JSON or the string found holds
 * U+0000. Pure.
 */
int sqlh_json_at(const sqlh_src_t *src, const char *body, size_t len, sqlh_buf_t *buf,
                 sqlh_val_t *out, char *err, size_t errlen) __attribute__((warn_unused_result));

void sqlh_buf_free(sqlh_buf_t *b);

/* An affected-row rule: lo <= rows <= hi. */
typedef struct sqlh_expect {
    unsigned long long lo, hi;
} sqlh_expect_t;

/* Parse "N", "A..B" or ">=N" (decimal, A <= B). 0, or -1 with the problem in err. Pure. */
int sqlh_expect_parse(const char *text, sqlh_expect_t *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
