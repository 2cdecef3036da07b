/* test_copies.c: unit tests of the copies idemd republishes: which original headers they keep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copies.h"
#include "tap.h"

static const unsigned char t_key[COPIES_KEY_LEN] = {1, 2, 3}; /* signing is test_copies_sig's */

/* A header value holding tables nested depth levels deep (1: one table), from pool. */
static amqp_field_value_t t_nested(amqp_table_entry_t *pool, int depth)
{
    amqp_field_value_t v;
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes("bottom");
    for (int i = 0; i < depth; i++) {
        pool[i].key = amqp_cstring_bytes("n");
        pool[i].value = v;
        v.kind = AMQP_FIELD_KIND_TABLE;
        v.value.table.num_entries = 1;
        v.value.table.entries = &pool[i];
    }
    return v;
}

static amqp_field_value_t t_str(const char *s)
{
    amqp_field_value_t v;
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes(s);
    return v;
}

/* The copy's header key, or NULL. */
static const amqp_field_value_t *t_get(const copies_copy_t *c, const char *key)
{
    for (int i = 0; i < c->props.headers.num_entries; i++) {
        amqp_bytes_t k = c->props.headers.entries[i].key;
        if (k.len == strlen(key) && memcmp(k.bytes, key, k.len) == 0)
            return &c->props.headers.entries[i].value;
    }
    return NULL;
}

static bool t_str_is(const amqp_field_value_t *v, const char *s)
{
    return v && v->kind == AMQP_FIELD_KIND_UTF8 && v->value.bytes.len == strlen(s) &&
           memcmp(v->value.bytes.bytes, s, strlen(s)) == 0;
}

int main(void)
{
    static amqp_table_entry_t pool[200];
    static char big[COPIES_FRAME_MAX];
    amqp_table_entry_t h[4];
    amqp_envelope_t env;
    copies_copy_t c;

    memset(&env, 0, sizeof(env));
    env.exchange = amqp_cstring_bytes("ex");
    env.routing_key = amqp_cstring_bytes("rk");
    env.message.properties._flags = AMQP_BASIC_HEADERS_FLAG;
    env.message.properties.headers.entries = h;

    /* Nested exactly COPIES_DEPTH_MAX deep: kept. */
    h[0].key = amqp_cstring_bytes("x-id");
    h[0].value = t_str("id-1");
    h[1].key = amqp_cstring_bytes("deep");
    h[1].value = t_nested(pool, COPIES_DEPTH_MAX);
    env.message.properties.headers.num_entries = 2;
    ok(copies_copy_init(&c, &env, "q", "x-id", "m1", 2, false, t_key, 1, "err", 0) == 0 &&
           t_get(&c, "deep") && !t_get(&c, "idemd-headers-dropped") &&
           t_str_is(t_get(&c, "x-id"), "id-1"),
       "a header nested COPIES_DEPTH_MAX deep is kept");
    copies_copy_free(&c);

    /* One level deeper: dropped, the id header and the others kept. */
    h[1].value = t_nested(pool, COPIES_DEPTH_MAX + 1);
    h[2].key = amqp_cstring_bytes("small");
    h[2].value = t_str("v");
    env.message.properties.headers.num_entries = 3;
    ok(copies_copy_init(&c, &env, "q", "x-id", "m1", 2, false, t_key, 1, "err", 0) == 0 &&
           !t_get(&c, "deep") && t_get(&c, "idemd-headers-dropped") &&
           t_str_is(t_get(&c, "x-id"), "id-1") && t_str_is(t_get(&c, "small"), "v") &&
           t_str_is(t_get(&c, "idemd-queue"), "q"),
       "a header nested deeper is dropped; the id and the other headers stay");
    copies_copy_free(&c);

    /* An array counts as a level too. */
    amqp_field_value_t arr;
    arr.kind = AMQP_FIELD_KIND_ARRAY;
    arr.value.array.num_entries = 1;
    arr.value.array.entries = &h[3].value;
    h[3].value = t_nested(pool, COPIES_DEPTH_MAX);
    h[1].value = arr;
    env.message.properties.headers.num_entries = 2;
    ok(copies_copy_init(&c, &env, "q", "x-id", "m1", 2, false, t_key, 1, "err", 0) == 0 &&
           !t_get(&c, "deep") && t_get(&c, "idemd-headers-dropped"),
       "an array around the deepest table counts as a level");
    copies_copy_free(&c);

    /* Too big for the frame: the big header goes, the id header after it stays. */
    memset(big, 'y', sizeof(big) - 1);
    h[0].key = amqp_cstring_bytes("big");
    h[0].value = t_str(big);
    h[1].key = amqp_cstring_bytes("x-id");
    h[1].value = t_str("id-2");
    env.message.properties.headers.num_entries = 3;
    ok(copies_copy_init(&c, &env, "q", "x-id", "m1", 2, false, t_key, 1, "err", 0) == 0 &&
           !t_get(&c, "big") && t_get(&c, "idemd-headers-dropped") &&
           t_str_is(t_get(&c, "x-id"), "id-2") && t_str_is(t_get(&c, "small"), "v"),
       "a header too big for the frame is dropped; the id header stays");
    copies_copy_free(&c);

    /* Big, but fits alone: the id header first, then what still fits. */
    big[COPIES_FRAME_MAX - COPIES_RESERVE - 200] = '\0';
    h[0].value = t_str(big);
    h[2].key = amqp_cstring_bytes("big2");
    h[2].value = t_str(big);
    ok(copies_copy_init(&c, &env, "q", "x-id", "m1", 2, false, t_key, 1, "err", 0) == 0 &&
           t_get(&c, "big") && !t_get(&c, "big2") && t_get(&c, "idemd-headers-dropped") &&
           t_str_is(t_get(&c, "x-id"), "id-2"),
       "headers are kept in order while they fit");
    copies_copy_free(&c);

    /* Without an id header, nothing is singled out; idemd's own headers are replaced. */
    h[0].key = amqp_cstring_bytes("idemd-attempts");
    h[0].value = t_str("7");
    h[1].key = amqp_cstring_bytes("x-death");
    env.message.properties.headers.num_entries = 2;
    ok(copies_copy_init(&c, &env, "q", NULL, "m1", 2, false, t_key, 3, "err", 0) == 0 &&
           !t_get(&c, "x-death") && t_get(&c, "idemd-attempts")->kind == AMQP_FIELD_KIND_I64 &&
           t_get(&c, "idemd-attempts")->value.i64 == 3 && !t_get(&c, "idemd-headers-dropped"),
       "x-death and idemd's own headers are replaced, not counted as dropped");
    copies_copy_free(&c);

    return done();
}
