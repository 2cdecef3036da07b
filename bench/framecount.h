/* framecount.h: counts AMQP 0-9-1 frames and MySQL packets in a byte stream fed in any pieces. */
/*
 * One fc_stream_t per direction of a connection. fc_feed() takes the bytes as
 * they pass, in whatever pieces the socket gave, and counts whole frames
 * (AMQP: type 1 byte, channel 2, size 4 big-endian, payload, end octet 0xCE;
 * the client's first 8 bytes are the protocol header "AMQP\0\0\x09\x01") or
 * packets (MySQL: length 3 bytes little-endian, sequence 1, payload).
 * A stream that breaks the framing (an AMQP frame without 0xCE, a wrong
 * protocol header) stops counting and sets bad. A MySQL client that asks for
 * TLS (an SSLRequest: a 32-byte packet with sequence 1 as its first packet)
 * sets tls on its stream: the caller stops counting both directions, since
 * what follows is encrypted. Header-only: bench/delayproxy.c and
 * tests/unit/test_framecount.c include it.
 */
#ifndef IDEMD_BENCH_FRAMECOUNT_H
#define IDEMD_BENCH_FRAMECOUNT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum fc_proto { FC_AMQP, FC_MYSQL } fc_proto_t;

#define FC_AMQP_TYPES 9 /* frame types 0..8: 1 method, 2 header, 3 body, 8 heartbeat */

typedef struct fc_stream {
    fc_proto_t proto;
    int client;            /* 1: the client's direction (AMQP: starts with the protocol header) */
    unsigned char hdr[8];  /* the current header so far */
    size_t hdr_have;       /* bytes of hdr read */
    size_t hdr_need;       /* bytes of hdr wanted (8 protocol header, 7 AMQP, 4 MySQL) */
    uint64_t skip;         /* payload bytes of the current frame still to pass */
    int want_end;          /* AMQP: the 0xCE end octet is next */
    int proto_header_done; /* AMQP client: the 8-byte protocol header has passed */
    uint64_t frames;       /* whole frames (AMQP) or packets (MySQL) */
    uint64_t by_type[FC_AMQP_TYPES];
    uint64_t bytes;
    int bad; /* the framing broke: counting stopped */
    int tls; /* MySQL: the client asked for TLS */
} fc_stream_t;

/* Start counting a direction of a new connection. */
static inline void fc_init(fc_stream_t *s, fc_proto_t proto, int client)
{
    memset(s, 0, sizeof(*s));
    s->proto = proto;
    s->client = client;
    if (proto == FC_AMQP)
        s->hdr_need = client ? 8 : 7;
    else
        s->hdr_need = 4;
}

/* A whole header is in s->hdr: account for it and set up its payload. */
static inline void fc_header(fc_stream_t *s)
{
    s->hdr_have = 0;
    if (s->proto == FC_MYSQL) {
        uint32_t len = s->hdr[0] | (uint32_t)s->hdr[1] << 8 | (uint32_t)s->hdr[2] << 16;
        if (s->client && s->frames == 0 && len == 32 && s->hdr[3] == 1)
            s->tls = 1;
        s->frames++;
        s->skip = len;
        return;
    }
    if (s->client && !s->proto_header_done) {
        if (memcmp(s->hdr, "AMQP\0\0\x09\x01", 8) != 0) {
            s->bad = 1;
            return;
        }
        s->proto_header_done = 1;
        s->hdr_need = 7;
        return;
    }
    s->skip = (uint64_t)s->hdr[3] << 24 | (uint64_t)s->hdr[4] << 16 | (uint64_t)s->hdr[5] << 8 |
              s->hdr[6];
    if (s->hdr[0] < FC_AMQP_TYPES)
        s->by_type[s->hdr[0]]++;
    s->want_end = 1;
}

/* Count the len bytes at p, the next bytes of the stream. */
static inline void fc_feed(fc_stream_t *s, const unsigned char *p, size_t len)
{
    s->bytes += len;
    while (len > 0 && !s->bad) {
        if (s->skip > 0) {
            size_t n = s->skip < len ? (size_t)s->skip : len;
            s->skip -= n;
            p += n;
            len -= n;
            continue;
        }
        if (s->want_end) {
            if (*p != 0xCE) {
                s->bad = 1;
                return;
            }
            s->want_end = 0;
            s->frames++;
            p++;
            len--;
            continue;
        }
        size_t n = s->hdr_need - s->hdr_have;
        if (n > len)
            n = len;
        memcpy(s->hdr + s->hdr_have, p, n);
        s->hdr_have += n;
        p += n;
        len -= n;
        if (s->hdr_have == s->hdr_need)
            fc_header(s);
    }
}

#endif
