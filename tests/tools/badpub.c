/* badpub.c: test publisher of awkward messages: binary ids, odd header types, nested tables. */

/*
 * usage: badpub [-H host] [-P port] [-u user] [-p password] [-V vhost] [-e EXCHANGE]
 *               -r ROUTING_KEY [--id ID] [--body TEXT] [--body-size N]
 *               [--header NAME=KIND:VALUE]... [--nested NAME=DEPTH] [--big NAME=BYTES]
 *               [--user-id USER] [--app-id APP] [--expiration MS] [--repeat N]
 *
 * Publishes one persistent message (or N copies) with the mandatory flag and
 * publisher confirms, prints "published N confirmed N" and exits 1 unless every
 * copy was confirmed (nacked or returned ones are reported on stderr).
 * --body-size N sends N bytes: TEXT (if given), then "x" up to N.
 *
 * ID, TEXT and string VALUEs take \xNN escapes (and \\), so non-UTF-8 bytes and
 * NULs can be sent. --id sets the message_id property (a shortstr: 255 bytes at
 * most); --id "" sends an empty one. KIND is one of: str, bytes, bool (true|false),
 * i8 u8 i16 u16 i32 u32 i64 u64, f32 f64, decimal (SCALE:VALUE), timestamp, void
 * (VALUE ignored), array (comma-separated strings), table (K=V, one string entry).
 * --nested NAME=DEPTH adds header NAME holding a table nested DEPTH levels deep
 * (innermost: {"leaf": "bottom"}). --big NAME=BYTES adds a string header of BYTES
 * bytes ("yyy..."), to bring the content header close to the frame size (131072).
 * --user-id, --app-id and --expiration set those properties (RabbitMQ checks user_id against the
 * user logged in; expiration is a per-message TTL in milliseconds).
 * badpub --librabbitmq-version prints the version of the librabbitmq it runs with.
 */
#include "../../src/amqp_compat.h"
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A short-lived test tool: the copies of its arguments live until it exits.
 * In a SANITIZE=1 build LeakSanitizer would report them at exit and fail the
 * tool (and the test that runs it), so leak checking is off for it alone.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}

#define BP_CHANNEL 1
#define BP_MAX_HEADERS 64
#define BP_FRAME_MAX 131072

static void bp_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void bp_die(const char *fmt, ...)
{
    va_list ap;
    fputs("badpub: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void bp_usage(void)
{
    fputs("usage: badpub [-H host] [-P port] [-u user] [-p password] [-V vhost] [-e EXCHANGE]\n"
          "              -r ROUTING_KEY [--id ID] [--body TEXT] [--body-size N]\n"
          "              [--header NAME=KIND:VALUE]... [--nested NAME=DEPTH] [--big NAME=BYTES]\n"
          "              [--user-id USER] [--app-id APP] [--expiration MS] [--repeat N]\n"
          "  KIND: str bytes bool i8 u8 i16 u16 i32 u32 i64 u64 f32 f64 decimal timestamp void\n"
          "        array table; ID, TEXT and strings take \\xNN escapes\n",
          stderr);
    exit(64);
}

/* Decode \xNN and \\ escapes of s into a new buffer. */
static amqp_bytes_t bp_unescape(const char *s)
{
    size_t n = strlen(s), o = 0;
    char *out = malloc(n + 1);
    if (out == NULL)
        bp_die("out of memory");
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && s[i + 1] == '\\') {
            out[o++] = '\\';
            i++;
        } else if (s[i] == '\\' && s[i + 1] == 'x' && s[i + 2] && s[i + 3]) {
            char hex[3] = {s[i + 2], s[i + 3], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end)
                bp_die("bad escape in \"%s\"", s);
            out[o++] = (char)v;
            i += 3;
        } else {
            out[o++] = s[i];
        }
    }
    amqp_bytes_t b = {o, out};
    return b;
}

static long long bp_int(const char *v, const char *what)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || *end || end == v)
        bp_die("%s: \"%s\" is not an integer", what, v);
    return x;
}

/* Fill *f from KIND:VALUE. */
static void bp_field(amqp_field_value_t *f, const char *spec)
{
    const char *colon = strchr(spec, ':');
    char kind[16];
    if (colon == NULL || (size_t)(colon - spec) >= sizeof(kind))
        bp_die("header value \"%s\" is not KIND:VALUE", spec);
    memcpy(kind, spec, (size_t)(colon - spec));
    kind[colon - spec] = '\0';
    const char *v = colon + 1;

    if (!strcmp(kind, "str")) {
        f->kind = AMQP_FIELD_KIND_UTF8;
        f->value.bytes = bp_unescape(v);
    } else if (!strcmp(kind, "bytes")) {
        f->kind = AMQP_FIELD_KIND_BYTES;
        f->value.bytes = bp_unescape(v);
    } else if (!strcmp(kind, "bool")) {
        f->kind = AMQP_FIELD_KIND_BOOLEAN;
        f->value.boolean = !strcmp(v, "true");
    } else if (!strcmp(kind, "i8")) {
        f->kind = AMQP_FIELD_KIND_I8;
        f->value.i8 = (int8_t)bp_int(v, kind);
    } else if (!strcmp(kind, "u8")) {
        f->kind = AMQP_FIELD_KIND_U8;
        f->value.u8 = (uint8_t)bp_int(v, kind);
    } else if (!strcmp(kind, "i16")) {
        f->kind = AMQP_FIELD_KIND_I16;
        f->value.i16 = (int16_t)bp_int(v, kind);
    } else if (!strcmp(kind, "u16")) {
        f->kind = AMQP_FIELD_KIND_U16;
        f->value.u16 = (uint16_t)bp_int(v, kind);
    } else if (!strcmp(kind, "i32")) {
        f->kind = AMQP_FIELD_KIND_I32;
        f->value.i32 = (int32_t)bp_int(v, kind);
    } else if (!strcmp(kind, "u32")) {
        f->kind = AMQP_FIELD_KIND_U32;
        f->value.u32 = (uint32_t)bp_int(v, kind);
    } else if (!strcmp(kind, "i64")) {
        f->kind = AMQP_FIELD_KIND_I64;
        f->value.i64 = (int64_t)bp_int(v, kind);
    } else if (!strcmp(kind, "u64")) {
        f->kind = AMQP_FIELD_KIND_U64;
        f->value.u64 = strtoull(v, NULL, 0);
    } else if (!strcmp(kind, "f32")) {
        f->kind = AMQP_FIELD_KIND_F32;
        f->value.f32 = strtof(v, NULL);
    } else if (!strcmp(kind, "f64")) {
        f->kind = AMQP_FIELD_KIND_F64;
        f->value.f64 = strtod(v, NULL);
    } else if (!strcmp(kind, "decimal")) {
        const char *c = strchr(v, ':');
        if (c == NULL)
            bp_die("decimal value \"%s\" is not SCALE:VALUE", v);
        f->kind = AMQP_FIELD_KIND_DECIMAL;
        f->value.decimal.decimals = (uint8_t)atoi(v);
        f->value.decimal.value = (uint32_t)strtoul(c + 1, NULL, 0);
    } else if (!strcmp(kind, "timestamp")) {
        f->kind = AMQP_FIELD_KIND_TIMESTAMP;
        f->value.u64 = strtoull(v, NULL, 0);
    } else if (!strcmp(kind, "void")) {
        f->kind = AMQP_FIELD_KIND_VOID;
    } else if (!strcmp(kind, "array")) {
        char *copy = strdup(v);
        int n = 1;
        for (const char *p = v; *p; p++)
            n += *p == ',';
        amqp_field_value_t *items = calloc((size_t)n, sizeof(*items));
        if (copy == NULL || items == NULL)
            bp_die("out of memory");
        int k = 0;
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && k < n;
             tok = strtok_r(NULL, ",", &save)) {
            items[k].kind = AMQP_FIELD_KIND_UTF8;
            items[k++].value.bytes = bp_unescape(tok);
        }
        f->kind = AMQP_FIELD_KIND_ARRAY;
        f->value.array.num_entries = k;
        f->value.array.entries = items;
    } else if (!strcmp(kind, "table")) {
        const char *eq = strchr(v, '=');
        amqp_table_entry_t *e = calloc(1, sizeof(*e));
        if (eq == NULL || e == NULL)
            bp_die("table value \"%s\" is not K=V", v);
        e->key = amqp_bytes_malloc_dup(amqp_cstring_bytes(strndup(v, (size_t)(eq - v))));
        e->value.kind = AMQP_FIELD_KIND_UTF8;
        e->value.value.bytes = bp_unescape(eq + 1);
        f->kind = AMQP_FIELD_KIND_TABLE;
        f->value.table.num_entries = 1;
        f->value.table.entries = e;
    } else {
        bp_die("unknown header kind \"%s\"", kind);
    }
}

/* A table nested depth levels deep, built iteratively (innermost first). */
static void bp_nested(amqp_field_value_t *f, long depth)
{
    amqp_table_entry_t *leaf = calloc(1, sizeof(*leaf));
    if (leaf == NULL)
        bp_die("out of memory");
    leaf->key = amqp_cstring_bytes("leaf");
    leaf->value.kind = AMQP_FIELD_KIND_UTF8;
    leaf->value.value.bytes = amqp_cstring_bytes("bottom");
    amqp_table_t t = {1, leaf};
    for (long i = 1; i < depth; i++) {
        amqp_table_entry_t *e = calloc(1, sizeof(*e));
        if (e == NULL)
            bp_die("out of memory");
        e->key = amqp_cstring_bytes("n");
        e->value.kind = AMQP_FIELD_KIND_TABLE;
        e->value.value.table = t;
        t.num_entries = 1;
        t.entries = e;
    }
    f->kind = AMQP_FIELD_KIND_TABLE;
    f->value.table = t;
}

static const char *bp_reply(amqp_rpc_reply_t r)
{
    static char buf[300];
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        return amqp_error_string2(r.library_error);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD || r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)) {
        amqp_channel_close_t *m = r.reply.decoded; /* same layout for both */
        snprintf(buf, sizeof(buf), "closed by broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
        return buf;
    }
    return "unexpected reply";
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *user = "guest", *password = "guest", *vhost = "/";
    const char *exchange = "", *rkey = NULL, *user_id = NULL, *expiration = NULL;
    const char *app_id = NULL;
    int port = 5672;
    long repeat = 1, body_size = -1;
    amqp_bytes_t id = {0, NULL}, body = amqp_cstring_bytes("badpub"), text = {0, NULL};
    bool have_id = false;
    amqp_table_entry_t h[BP_MAX_HEADERS];
    int nh = 0;

    signal(SIGPIPE, SIG_IGN);
    if (argc == 2 && !strcmp(argv[1], "--librabbitmq-version")) {
        printf("%s\n", amqp_version()); /* which limits the stack's decoder has */
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            bp_usage();
        const char *v = argv[++i];
        if (!strcmp(a, "-H"))
            host = v;
        else if (!strcmp(a, "-P"))
            port = atoi(v);
        else if (!strcmp(a, "-u"))
            user = v;
        else if (!strcmp(a, "-p"))
            password = v;
        else if (!strcmp(a, "-V"))
            vhost = v;
        else if (!strcmp(a, "-e"))
            exchange = v;
        else if (!strcmp(a, "-r"))
            rkey = v;
        else if (!strcmp(a, "--id")) {
            id = bp_unescape(v);
            have_id = true;
        } else if (!strcmp(a, "--body"))
            text = body = bp_unescape(v);
        else if (!strcmp(a, "--body-size"))
            body_size = (long)bp_int(v, a);
        else if (!strcmp(a, "--user-id"))
            user_id = v;
        else if (!strcmp(a, "--app-id"))
            app_id = v;
        else if (!strcmp(a, "--expiration"))
            expiration = v;
        else if (!strcmp(a, "--repeat"))
            repeat = (long)bp_int(v, a);
        else if (!strcmp(a, "--header") || !strcmp(a, "--nested") || !strcmp(a, "--big")) {
            const char *eq = strchr(v, '=');
            if (eq == NULL || eq == v || nh == BP_MAX_HEADERS)
                bp_usage();
            h[nh].key = amqp_bytes_malloc_dup(amqp_cstring_bytes(strndup(v, (size_t)(eq - v))));
            if (!strcmp(a, "--header")) {
                bp_field(&h[nh].value, eq + 1);
            } else if (!strcmp(a, "--nested")) {
                bp_nested(&h[nh].value, (long)bp_int(eq + 1, a));
            } else {
                long long n = bp_int(eq + 1, a);
                if (n < 0 || n > BP_FRAME_MAX)
                    bp_die("--big: %lld bytes is out of range", n);
                h[nh].value.kind = AMQP_FIELD_KIND_UTF8;
                h[nh].value.value.bytes.len = (size_t)n;
                h[nh].value.value.bytes.bytes = malloc((size_t)n + 1);
                if (h[nh].value.value.bytes.bytes == NULL)
                    bp_die("out of memory");
                memset(h[nh].value.value.bytes.bytes, 'y', (size_t)n);
            }
            nh++;
        } else
            bp_usage();
    }
    if (rkey == NULL)
        bp_usage();
    if (have_id && id.len > 255)
        bp_die("--id of %zu bytes does not fit the message_id property", id.len);
    if (body_size >= 0) {
        body.len = (size_t)body_size;
        body.bytes = malloc(body.len ? body.len : 1);
        if (body.bytes == NULL)
            bp_die("out of memory");
        memset(body.bytes, 'x', body.len);
        if (text.len > 0)
            memcpy(body.bytes, text.bytes, text.len < body.len ? text.len : body.len);
    }

    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (s == NULL)
        bp_die("cannot create socket");
    int rc = amqp_socket_open(s, host, port);
    if (rc != AMQP_STATUS_OK)
        bp_die("connect %s:%d: %s", host, port, amqp_error_string2(rc));
    amqp_rpc_reply_t r =
        amqp_login(c, vhost, 0, BP_FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, user, password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        bp_die("login: %s", bp_reply(r));
    amqp_channel_open(c, BP_CHANNEL);
    if ((r = amqp_get_rpc_reply(c)).reply_type != AMQP_RESPONSE_NORMAL)
        bp_die("channel.open: %s", bp_reply(r));
    amqp_confirm_select(c, BP_CHANNEL);
    if ((r = amqp_get_rpc_reply(c)).reply_type != AMQP_RESPONSE_NORMAL)
        bp_die("confirm.select: %s", bp_reply(r));

    amqp_basic_properties_t props;
    memset(&props, 0, sizeof(props));
    props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
    props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    if (nh) {
        props._flags |= AMQP_BASIC_HEADERS_FLAG;
        props.headers.num_entries = nh;
        props.headers.entries = h;
    }
    if (have_id) {
        props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        props.message_id = id;
    }
    if (user_id) {
        props._flags |= AMQP_BASIC_USER_ID_FLAG;
        props.user_id = amqp_cstring_bytes(user_id);
    }
    if (app_id) {
        props._flags |= AMQP_BASIC_APP_ID_FLAG;
        props.app_id = amqp_cstring_bytes(app_id);
    }
    if (expiration) {
        props._flags |= AMQP_BASIC_EXPIRATION_FLAG;
        props.expiration = amqp_cstring_bytes(expiration);
    }
    for (long k = 0; k < repeat; k++) {
        rc = amqp_basic_publish(c, BP_CHANNEL, amqp_cstring_bytes(exchange),
                                amqp_cstring_bytes(rkey), 1, 0, &props, body);
        if (rc != AMQP_STATUS_OK)
            bp_die("publish: %s", amqp_error_string2(rc));
    }

    /* Wait for every confirm; a basic.return comes before the ack of its message. */
    uint64_t settled = 0, confirmed = 0, failed = 0;
    bool returned = false;
    while (settled < (uint64_t)repeat) {
        amqp_frame_t f;
        struct timeval tv = {60, 0};
        rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (rc != AMQP_STATUS_OK)
            bp_die("waiting for confirms: %s", amqp_error_string2(rc));
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD:
        case AMQP_BASIC_NACK_METHOD: {
            bool ack = f.payload.method.id == AMQP_BASIC_ACK_METHOD;
            amqp_basic_ack_t *m = f.payload.method.decoded; /* nack starts the same way */
            uint64_t upto = m->delivery_tag, n = m->multiple ? upto - settled : 1;
            settled += n;
            if (ack && !returned)
                confirmed += n;
            else
                failed += n;
            if (returned)
                fprintf(stderr, "badpub: message returned (unroutable)\n");
            if (!ack)
                fprintf(stderr, "badpub: message nacked\n");
            returned = false;
            break;
        }
        case AMQP_BASIC_RETURN_METHOD: {
            amqp_message_t msg;
            returned = true;
            r = amqp_read_message(c, f.channel, &msg, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL)
                bp_die("reading returned message: %s", bp_reply(r));
            amqp_destroy_message(&msg);
            break;
        }
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD: {
            amqp_channel_close_t *m = f.payload.method.decoded;
            bp_die("closed by broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
                   (char *)m->reply_text.bytes);
        }
        default:
            break;
        }
        amqp_maybe_release_buffers(c);
    }
    amqp_channel_close(c, BP_CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    printf("published %ld confirmed %" PRIu64 "\n", repeat, confirmed);
    return failed ? 1 : 0;
}
