/* test_copies_sig.c: unit tests of the copies idemd republishes: signed headers, forged ones,
 * dropped bodies. */
#include <stdio.h>
#include <string.h>

#include "copies.h"
#include "tap.h"

/* The value of string header name in p, or "" (into buf). */
static const char *t_str(const amqp_basic_properties_t *p, const char *name, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len == strlen(name) && memcmp(e->key.bytes, name, e->key.len) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_UTF8) {
            snprintf(buf, len, "%.*s", (int)e->value.value.bytes.len,
                     (const char *)e->value.value.bytes.bytes);
        }
    }
    return buf;
}

/* An envelope as a publisher sends it, with forged idemd headers. */
static void t_forged_env(amqp_envelope_t *env, amqp_table_entry_t *h)
{
    memset(env, 0, sizeof(*env));
    env->exchange = amqp_cstring_bytes("ex");
    env->routing_key = amqp_cstring_bytes("rk");
    h[0].key = amqp_cstring_bytes(COPIES_H_ATTEMPTS);
    h[0].value.kind = AMQP_FIELD_KIND_U32;
    h[0].value.value.u32 = 4294967295u;
    h[1].key = amqp_cstring_bytes(COPIES_H_FIRST_FAILURE);
    h[1].value.kind = AMQP_FIELD_KIND_UTF8;
    h[1].value.value.bytes = amqp_cstring_bytes("1999-01-01T00:00:00.000Z");
    h[2].key = amqp_cstring_bytes(COPIES_H_SIG);
    h[2].value.kind = AMQP_FIELD_KIND_UTF8;
    h[2].value.value.bytes =
        amqp_cstring_bytes("0000000000000000000000000000000000000000000000000000000000000000");
    env->message.properties._flags = AMQP_BASIC_HEADERS_FLAG;
    env->message.properties.headers.entries = h;
    env->message.properties.headers.num_entries = 3;
}

int main(void)
{
    unsigned char key[COPIES_KEY_LEN], other[COPIES_KEY_LEN];
    copies_keys_t ks = {.n = 1}, ko = {.n = 1}, both = {.n = 2}, swapped = {.n = 2};
    amqp_table_entry_t h[3];
    amqp_envelope_t env, env2;
    copies_copy_t c, c2;
    unsigned attempts = 0;
    char buf[128];

    memset(key, 7, sizeof(key));
    memset(other, 8, sizeof(other));
    memcpy(ks.k[0], key, COPIES_KEY_LEN);
    memcpy(ko.k[0], other, COPIES_KEY_LEN);
    memcpy(both.k[0], key, COPIES_KEY_LEN); /* key signs, other is staged */
    memcpy(both.k[1], other, COPIES_KEY_LEN);
    memcpy(swapped.k[0], other, COPIES_KEY_LEN); /* after the promotion: other signs */
    memcpy(swapped.k[1], key, COPIES_KEY_LEN);
    t_forged_env(&env, h);
    ok(!copies_trusted(&env.message.properties, &ks, "q", "m1", 2, &attempts),
       "a publisher's idemd-attempts with a made-up signature is not believed");

    ok(copies_copy_init(&c, &env, "q", NULL, "m1", 2, false, key, 1, "test", 1700000000000ULL) == 0,
       "copy of an untrusted delivery");
    ok(strcmp(t_str(&c.props, COPIES_H_FIRST_FAILURE, buf, sizeof(buf)),
              "2023-11-14T22:13:20.000Z") == 0,
       "untrusted: the forged first failure is replaced by now");
    ok(strcmp(t_str(&c.props, COPIES_H_EXCHANGE, buf, sizeof(buf)), "ex") == 0 &&
           strcmp(t_str(&c.props, COPIES_H_ROUTING_KEY, buf, sizeof(buf)), "rk") == 0,
       "untrusted: the original route is the delivery's own");
    int sigs = 0;
    for (int i = 0; i < c.props.headers.num_entries; i++)
        sigs += c.props.headers.entries[i].key.len == strlen(COPIES_H_SIG) &&
                memcmp(c.props.headers.entries[i].key.bytes, COPIES_H_SIG, 9) == 0;
    ok(sigs == 1, "the copy carries one signature (the forged one is dropped)");

    attempts = 0;
    ok(copies_trusted(&c.props, &ks, "q", "m1", 2, &attempts) && attempts == 1,
       "idemd's own copy verifies, attempts 1");
    ok(!copies_trusted(&c.props, &ks, "q", "m2", 2, &attempts),
       "the signature is bound to the message id");
    ok(!copies_trusted(&c.props, &ks, "q2", "m1", 2, &attempts),
       "the signature is bound to the queue");
    ok(!copies_trusted(&c.props, &ko, "q", "m1", 2, &attempts),
       "another installation's key does not verify");

    ok(copies_trusted(&c.props, &both, "q", "m1", 2, &attempts) && attempts == 1,
       "rotation: a copy signed by the signing key verifies while another is staged");
    ok(copies_trusted(&c.props, &swapped, "q", "m1", 2, &attempts) && attempts == 1,
       "rotation: a copy signed by the replaced key still verifies after the promotion");

    /* A dead onward message is signed under "onward:<source queue>": never a delivery's copy. */
    char oq[64], osig[COPIES_SIG_HEX + 1];
    ok(copies_onward_queue("q", oq, sizeof(oq)) != NULL && strcmp(oq, "onward:q") == 0,
       "the onward queue string");
    ok(copies_onward_queue("a-rather-long-queue-name", oq, 8) == NULL,
       "an onward queue string that does not fit is refused");
    ok(copies_sign(key, "onward:q", "m1", 2, 1, amqp_cstring_bytes("t"), amqp_cstring_bytes("ex"),
                   amqp_cstring_bytes("rk"), osig) == 0 &&
           strlen(osig) == COPIES_SIG_HEX,
       "copies_sign writes a hex signature");
    {
        amqp_table_entry_t oh[5];
        amqp_basic_properties_t op;
        memset(oh, 0, sizeof(oh));
        memset(&op, 0, sizeof(op));
        oh[0].key = amqp_cstring_bytes(COPIES_H_ATTEMPTS);
        oh[0].value.kind = AMQP_FIELD_KIND_I64;
        oh[0].value.value.i64 = 1;
        const char *sk[] = {COPIES_H_FIRST_FAILURE, COPIES_H_EXCHANGE, COPIES_H_ROUTING_KEY,
                            COPIES_H_SIG};
        const char *sv[] = {"t", "ex", "rk", osig};
        for (int i = 0; i < 4; i++) {
            oh[i + 1].key = amqp_cstring_bytes(sk[i]);
            oh[i + 1].value.kind = AMQP_FIELD_KIND_UTF8;
            oh[i + 1].value.value.bytes = amqp_cstring_bytes(sv[i]);
        }
        op._flags = AMQP_BASIC_HEADERS_FLAG;
        op.headers.entries = oh;
        op.headers.num_entries = 5;
        ok(copies_trusted(&op, &ks, "onward:q", "m1", 2, &attempts) && attempts == 1,
           "a dead onward message verifies under its onward queue string");
        ok(!copies_trusted(&op, &ks, "q", "m1", 2, &attempts),
           "a dead onward message does not pass for a copy of the source queue's delivery");
    }

    /* The next hop keeps the first failure and route of a trusted copy. */
    memset(&env2, 0, sizeof(env2));
    env2.exchange = amqp_cstring_bytes("");
    env2.routing_key = amqp_cstring_bytes("q");
    env2.message.properties = c.props;
    ok(copies_copy_init(&c2, &env2, "q", NULL, "m1", 2, true, key, 2, "again", 1800000000000ULL) ==
               0 &&
           strcmp(t_str(&c2.props, COPIES_H_FIRST_FAILURE, buf, sizeof(buf)),
                  "2023-11-14T22:13:20.000Z") == 0 &&
           strcmp(t_str(&c2.props, COPIES_H_EXCHANGE, buf, sizeof(buf)), "ex") == 0,
       "trusted: first failure and original route survive the next copy");
    ok(copies_trusted(&c2.props, &ks, "q", "m1", 2, &attempts) && attempts == 2,
       "the second copy verifies, attempts 2");

    /* Tampering with the count breaks the signature. */
    for (int i = 0; i < c2.props.headers.num_entries; i++)
        if (c2.props.headers.entries[i].key.len == strlen(COPIES_H_ATTEMPTS) &&
            memcmp(c2.props.headers.entries[i].key.bytes, COPIES_H_ATTEMPTS, 14) == 0)
            c2.props.headers.entries[i].value.value.i64 = 999;
    ok(!copies_trusted(&c2.props, &ks, "q", "m1", 2, &attempts),
       "a changed idemd-attempts does not verify");
    copies_copy_free(&c2);

    int before = c.props.headers.num_entries;
    copies_copy_body_dropped(&c, 104857600);
    const amqp_table_entry_t *e = &c.props.headers.entries[before];
    ok(c.props.headers.num_entries == before + 1 && e->value.kind == AMQP_FIELD_KIND_I64 &&
           e->value.value.i64 == 104857600 &&
           memcmp(e->key.bytes, COPIES_H_BODY_DROPPED, e->key.len) == 0,
       "a dropped body is marked with idemd-body-dropped = its size");
    copies_copy_free(&c);
    return done();
}
