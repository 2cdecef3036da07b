/* onward.c: test handler that sends each message on through the outbox, once per configured route.
 */
/*
 * settings.routes = "EXCHANGE KEY;EXCHANGE KEY;...": per handled message,
 * one onward message (the message's body) to each route, in that order,
 * with the host's derived ids; exchange "-" is the default exchange. A
 * message whose body is "route:N" goes to route N (0-based) only; one whose
 * body is "big:N" sends N bytes of 'x' instead of its body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idemd/handler.h>

#define ONWARD_ROUTES 8

typedef struct onward_state {
    const idemd_host_t *host;
    int n;
    char exchange[ONWARD_ROUTES][128];
    char key[ONWARD_ROUTES][128];
} onward_state_t;

static int onward_init(const idemd_host_t *host, const idemd_settings_t *settings, MYSQL *db,
                       void **state, char *err, size_t errlen)
{
    const char *routes = NULL;
    (void)db;
    if (host->abi_minor < 3 || host->publish == NULL) {
        snprintf(err, errlen, "onward needs an idemd with host ABI 1.3 (outbox)");
        return -1;
    }
    onward_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    st->host = host;
    (void)host->setting_string(settings, "routes", &routes);
    for (const char *r = routes; r && *r && st->n < ONWARD_ROUTES;) {
        const char *end = strchr(r, ';');
        size_t len = end ? (size_t)(end - r) : strlen(r);
        char one[300];
        snprintf(one, sizeof(one), "%.*s", (int)len, r);
        if (sscanf(one, "%127s %127s", st->exchange[st->n], st->key[st->n]) == 2)
            st->n++;
        r = end ? end + 1 : r + len;
    }
    if (st->n == 0) {
        free(st);
        snprintf(err, errlen, "settings.routes: expected \"EXCHANGE KEY;...\"");
        return -1;
    }
    *state = st;
    return 0;
}

static idemd_result_t onward_handle(void *state, MYSQL *db, const idemd_message_t *msg, char *err,
                                    size_t errlen)
{
    onward_state_t *st = state;
    int only = -1;
    char num[16];
    size_t big = 0;
    if (msg->body_len > 4 && msg->body_len < 16) {
        memcpy(num, msg->body, msg->body_len);
        num[msg->body_len] = '\0';
        if (strncmp(num, "route:", 6) == 0)
            only = atoi(num + 6);
        else if (strncmp(num, "big:", 4) == 0)
            big = (size_t)strtoul(num + 4, NULL, 10);
    }
    char *fill = big ? malloc(big) : NULL;
    if (fill)
        memset(fill, 'x', big);
    for (int i = 0; i < st->n; i++) {
        if (only >= 0 && i != only)
            continue;
        idemd_publish_t p;
        memset(&p, 0, sizeof(p));
        p.exchange = strcmp(st->exchange[i], "-") == 0 ? "" : st->exchange[i];
        p.routing_key = st->key[i];
        p.body = fill ? fill : msg->body;
        p.body_len = fill ? big : msg->body_len;
        if (st->host->publish(db, msg, &p, err, errlen) != 0) {
            free(fill);
            return IDEMD_RESULT_RETRY;
        }
    }
    free(fill);
    return IDEMD_RESULT_OK;
}

static void onward_fini(void *state)
{
    free(state);
}

const idemd_handler_t idemd_handler = {
    .abi_major = 1,
    .abi_minor = 3,
    .name = "onward",
    .init = onward_init,
    .handle = onward_handle,
    .fini = onward_fini,
};
