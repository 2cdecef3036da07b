/* trace.h: W3C Trace Context (traceparent, tracestate) and W3C Baggage: parsing, validation and
 * child spans. Pure: no I/O; randomness is passed in.
 */
#ifndef IDEMD_TRACE_H
#define IDEMD_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACE_ID_HEX 32     /* trace-id: 16 bytes as lowercase hex */
#define TRACE_SPAN_HEX 16   /* parent-id / span id: 8 bytes as lowercase hex */
#define TRACE_PARENT_LEN 55 /* a version 00 traceparent: "00-<32>-<16>-<2>" */
#define TRACE_STATE_MEMBERS 32
#define TRACE_STATE_MAX 8192 /* idemd's limit on a tracestate's bytes (longer: dropped) */
#define TRACE_BAGGAGE_MEMBERS 180
#define TRACE_BAGGAGE_MAX 8192

/* A valid traceparent, in version 00 form. */
typedef struct trace_parent {
    char trace_id[TRACE_ID_HEX + 1];
    char parent_id[TRACE_SPAN_HEX + 1];
    unsigned char flags; /* trace-flags as given (bit 0: sampled) */
} trace_parent_t;

/*
 * Parse len bytes of s as a traceparent (W3C Trace Context): version 00
 * exactly 55 characters; lowercase hex only; trace-id and parent-id not
 * all zeros; version ff invalid; a higher version is read by its first 55
 * characters when the next one is absent or '-'. Spaces and tabs around the
 * value are ignored. Returns 0 and fills out, or -1 when s is malformed
 * (which means: absent).
 */
int trace_parent_parse(const char *s, size_t len, trace_parent_t *out)
    __attribute__((warn_unused_result));

/*
 * Whether len bytes of s are a valid tracestate: list members key=value
 * separated by ',' (with optional spaces and tabs around, empty members
 * allowed), at most TRACE_STATE_MEMBERS of them, keys of the spec's
 * grammar (simple or tenant@system) and not repeated, values of 1..256
 * printable characters without ',' or '=' and not ending in a space; at most
 * TRACE_STATE_MAX bytes. An invalid tracestate is dropped whole.
 */
bool trace_state_valid(const char *s, size_t len);

/*
 * Whether len bytes of s are a valid baggage header (W3C Baggage): list
 * members key=value with optional ";"-separated properties, keys tokens
 * (RFC 7230), values of baggage octets, optional spaces and tabs around
 * separators; at most TRACE_BAGGAGE_MEMBERS members and TRACE_BAGGAGE_MAX
 * bytes. An invalid baggage is absent.
 */
bool trace_baggage_valid(const char *s, size_t len);

/* A span id from r (nonzero; 0 is taken as 1) as 16 lowercase hex digits and a NUL into out. */
void trace_span_id(uint64_t r, char out[TRACE_SPAN_HEX + 1]);

/* "00-<trace_id>-<span_id>-<flags>" and a NUL into out (TRACE_PARENT_LEN + 1 bytes). */
void trace_parent_format(const char *trace_id, const char *span_id, unsigned char flags,
                         char out[TRACE_PARENT_LEN + 1]);

/*
 * The trace context of one delivery. state and baggage point into the
 * caller's bytes (the delivery's headers) and are not NUL-terminated.
 */
typedef struct trace_ctx {
    bool has;                           /* a valid traceparent came with it */
    char trace_id[TRACE_ID_HEX + 1];    /* "" without one */
    char parent_id[TRACE_SPAN_HEX + 1]; /* the incoming traceparent's parent-id */
    char span_id[TRACE_SPAN_HEX + 1];   /* idemd's processing span: a child of parent_id */
    unsigned char flags;
    char traceparent[TRACE_PARENT_LEN + 1]; /* the incoming one (version 00 form), or "" */
    const char *state;                      /* valid tracestate, or NULL */
    size_t state_len;
    const char *baggage; /* valid baggage, or NULL */
    size_t baggage_len;
} trace_ctx_t;

/*
 * Read a delivery's context from its three headers (NULL when absent; each
 * with its length). A malformed traceparent makes the context absent (and
 * its tracestate with it: the spec forbids propagating a tracestate without
 * a valid traceparent); baggage stands alone. With a traceparent, span_id
 * is a new span made from span_random. c borrows ts and bg.
 */
void trace_ctx_read(trace_ctx_t *c, const char *tp, size_t tp_len, const char *ts, size_t ts_len,
                    const char *bg, size_t bg_len, uint64_t span_random);

/*
 * The traceparent of a message sent on behalf of c's processing span: same
 * trace and flags, and as parent-id a new span id from span_random (the
 * span that sends it, a child of c's span_id), into out. Returns false
 * (out = "") when c has no trace.
 */
bool trace_child(const trace_ctx_t *c, uint64_t span_random, char out[TRACE_PARENT_LEN + 1]);

/* A splitmix64 generator: seed it once (any value), then trace_rng_next. */
typedef struct trace_rng {
    uint64_t s;
} trace_rng_t;

uint64_t trace_rng_next(trace_rng_t *r);

#endif
