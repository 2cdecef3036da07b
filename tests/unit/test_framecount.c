/* test_framecount.c: bench/framecount.h counts AMQP frames and MySQL packets fed in any pieces. */
#include "framecount.h"
#include "tap.h"

#include <stdlib.h>

/* Feed buf to s in pieces of step bytes (the last one shorter). */
static void feed_in(fc_stream_t *s, const unsigned char *buf, size_t len, size_t step)
{
    for (size_t o = 0; o < len; o += step)
        fc_feed(s, buf + o, len - o < step ? len - o : step);
}

/* Append an AMQP frame of type t with a payload of n bytes (all 0xCE, to confuse a scanner). */
static size_t amqp_frame(unsigned char *o, int t, uint32_t n)
{
    o[0] = (unsigned char)t;
    o[1] = 0;
    o[2] = 1;
    o[3] = (unsigned char)(n >> 24);
    o[4] = (unsigned char)(n >> 16);
    o[5] = (unsigned char)(n >> 8);
    o[6] = (unsigned char)n;
    memset(o + 7, 0xCE, n);
    o[7 + n] = 0xCE;
    return 8 + n;
}

static size_t mysql_packet(unsigned char *o, uint32_t n, unsigned char seq)
{
    o[0] = (unsigned char)n;
    o[1] = (unsigned char)(n >> 8);
    o[2] = (unsigned char)(n >> 16);
    o[3] = seq;
    memset(o + 4, 0, n);
    return 4 + n;
}

int main(void)
{
    static unsigned char buf[1 << 20];
    size_t len = 0, steps[] = {1, 2, 7, 8, 9, 1000, sizeof(buf)};
    fc_stream_t s;

    /* A client stream: protocol header, then method, header, body, heartbeat, a large body. */
    memcpy(buf, "AMQP\0\0\x09\x01", 8);
    len = 8;
    len += amqp_frame(buf + len, 1, 12);
    len += amqp_frame(buf + len, 2, 14);
    len += amqp_frame(buf + len, 3, 0);
    len += amqp_frame(buf + len, 8, 0);
    len += amqp_frame(buf + len, 3, 200000);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        fc_init(&s, FC_AMQP, 1);
        feed_in(&s, buf, len, steps[i]);
        ok(s.frames == 5 && !s.bad && s.bytes == len,
           "amqp client, pieces of %zu: 5 frames (got %llu, bad %d)", steps[i],
           (unsigned long long)s.frames, s.bad);
        ok(s.by_type[1] == 1 && s.by_type[2] == 1 && s.by_type[3] == 2 && s.by_type[8] == 1,
           "amqp client, pieces of %zu: by type 1/1/2/1", steps[i]);
    }
    /* The server's direction has no protocol header. */
    fc_init(&s, FC_AMQP, 0);
    feed_in(&s, buf + 8, len - 8, 3);
    ok(s.frames == 5 && !s.bad, "amqp server: 5 frames");
    /* A frame half-way is not counted yet. */
    fc_init(&s, FC_AMQP, 0);
    fc_feed(&s, buf + 8, 10);
    ok(s.frames == 0 && !s.bad, "amqp: a partial frame is not counted");
    /* A wrong end octet stops counting. */
    memcpy(buf + 8 + 7 + 12, "\x01", 1);
    fc_init(&s, FC_AMQP, 0);
    feed_in(&s, buf + 8, len - 8, 5);
    ok(s.bad && s.frames == 0, "amqp: a frame without 0xCE sets bad");
    fc_init(&s, FC_AMQP, 1);
    fc_feed(&s, (const unsigned char *)"HTTP/1.1", 8);
    ok(s.bad, "amqp: a wrong protocol header sets bad");

    /* MySQL: three packets, one of them empty, one spanning many pieces. */
    len = mysql_packet(buf, 5, 0);
    len += mysql_packet(buf + len, 0, 1);
    len += mysql_packet(buf + len, 70000, 2);
    for (size_t i = 0; i < 4; i++) {
        fc_init(&s, FC_MYSQL, 0);
        feed_in(&s, buf, len, steps[i]);
        ok(s.frames == 3 && !s.tls, "mysql, pieces of %zu: 3 packets (got %llu)", steps[i],
           (unsigned long long)s.frames);
    }
    /* The client's first packet a 32-byte SSLRequest: tls. */
    len = mysql_packet(buf, 32, 1);
    fc_init(&s, FC_MYSQL, 1);
    fc_feed(&s, buf, len);
    ok(s.tls, "mysql: an SSLRequest sets tls");
    len = mysql_packet(buf, 100, 1);
    fc_init(&s, FC_MYSQL, 1);
    fc_feed(&s, buf, len);
    ok(!s.tls && s.frames == 1, "mysql: a plain handshake response does not");
    return done();
}
