/* plugin_host.c: the services ABI 1.6 offers a handler beyond its settings: whether a statement
 * changed a value, and a value of the body as idemd's one JSON reader reads it.
 */
#include <stdio.h>
#include <string.h>

#include "db_warn.h"
#include "json_body.h"
#include "plugin.h"

int plugin_host_value_check(MYSQL *db, char *why, size_t whylen)
{
    if (db == NULL || why == NULL || whylen == 0)
        return -1;
    why[0] = '\0';
    return db_value_warnings(db, why, whylen);
}

/* Split path ("a.b.0") into segs (at most max); the count, or -1 when it is malformed (an
 * empty step, or too many). Each step names a member, or an index when it is all digits. */
static int plugin_host_path(const char *path, json_body_seg_t *segs, int max)
{
    int n = 0;
    const char *p = path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0 || n == max)
            return -1;
        long index = -1;
        if (len <= 9 && strspn(p, "0123456789") >= len) {
            index = 0;
            for (size_t i = 0; i < len; i++)
                index = index * 10 + (p[i] - '0');
        }
        segs[n++] = (json_body_seg_t){p, len, index, false};
        if (dot == NULL)
            break;
        p = dot + 1;
        if (*p == '\0')
            return -1;
    }
    return n;
}

int plugin_host_body_value(const idemd_message_t *msg, const char *path, char *out, size_t outlen,
                           char *err, size_t errlen)
{
    json_body_seg_t segs[32];
    json_body_buf_t buf = {0};
    size_t start = 0, end = 0;
    int n, rc = -1;

    if (msg == NULL || path == NULL || out == NULL || outlen == 0) {
        snprintf(err, errlen, "body_value: a message, a path and room for the value are needed");
        return -1;
    }
    out[0] = '\0';
    if ((n = plugin_host_path(path, segs, (int)(sizeof(segs) / sizeof(segs[0])))) < 0) {
        snprintf(err, errlen, "body_value: path \"%.100s\" is not NAME[.NAME...]", path);
        return -1;
    }
    const char *body = msg->body ? msg->body : "";
    int r = json_body_find(body, msg->body_len, segs, n, &start, &end, err, errlen);
    if (r <= 0)
        return r;
    const char *v = body + start;
    size_t vlen = end - start;
    if (json_body_kind(v) == JSON_BODY_STRING) {
        if (json_body_string(v, vlen, &buf, err, errlen) != 0)
            goto done;
        v = buf.p ? buf.p : "";
        vlen = buf.len;
    }
    if (vlen >= outlen) {
        snprintf(err, errlen, "body_value: the value at %.100s has %zu bytes, more than %zu fit",
                 path, vlen, outlen - 1);
        goto done;
    }
    memcpy(out, v, vlen);
    out[vlen] = '\0';
    rc = 1;
done:
    json_body_buf_free(&buf);
    return rc;
}
