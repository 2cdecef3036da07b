/* conf_sqlh.c: the checks of the SQL handler's settings (handler = "sql"): each statement's
 * sources and affected-row rule, each onward message, and which queues may have them. */
#include "conf_int.h"

#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "sqlh_kind.h"
#include "sqlh_param.h"

/* Whether text is a source; else the error at at (setting sp). 0 or -1. */
static int conf_sqlh_source(conf_ctx_t *ctx, const config_setting_t *at, const char *sp,
                            const char *text)
{
    sqlh_src_t src;
    char why[400];

    if (sqlh_src_parse(text, &src, why, sizeof(why)) != 0)
        return conf_error(ctx, at, sp, "%s", why);
    sqlh_src_free(&src);
    return 0;
}

int conf_check_sql(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    conf_sql_stmt_t *st = base;
    const config_setting_t *params = config_setting_get_member(grp, "params");
    char sp[CONF_PATH_MAX], why[300];

    st->line = (int)config_setting_source_line(grp);
    /* The statement's number for the reason: path ends in its index, "...sql.[K]". */
    const char *ix = strrchr(path, '[');
    int k = ix ? atoi(ix + 1) : 0;
    char kwhy[300];
    if (st->statement && sqlh_kind_check(st->statement, kwhy, sizeof(kwhy)) != 0) {
        conf_path(sp, path, "statement");
        return conf_error(ctx, config_setting_get_member(grp, "statement"), sp, "statement %d%s",
                          k + 1, kwhy);
    }
    for (int i = 0; i < st->n_params; i++) {
        char pp[CONF_PATH_MAX];
        conf_path(pp, path, "params");
        conf_path_index(sp, pp, i);
        if (conf_sqlh_source(ctx, config_setting_get_elem(params, (unsigned)i), sp,
                             st->params[i]) != 0)
            return -1;
    }
    if (st->expect) {
        sqlh_expect_t e;
        conf_path(sp, path, "expect");
        if (sqlh_expect_parse(st->expect, &e, why, sizeof(why)) != 0)
            return conf_error(ctx, config_setting_get_member(grp, "expect"), sp, "%s", why);
    }
    return 0;
}

int conf_check_sql_publish(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                           const char *path)
{
    conf_sql_pub_t *p = base;
    const config_setting_t *hs = config_setting_get_member(grp, "headers");
    char sp[CONF_PATH_MAX];

    p->line = (int)config_setting_source_line(grp);
    conf_path(sp, path, "body");
    if (strcmp(p->body, "body") != 0 && strncmp(p->body, "json:", 5) != 0)
        return conf_error(ctx, config_setting_get_member(grp, "body"), sp,
                          "must be \"body\" or \"json:PATH\" (got \"%s\")", p->body);
    if (conf_sqlh_source(ctx, config_setting_get_member(grp, "body"), sp, p->body) != 0)
        return -1;
    for (int i = 0; i < p->n_headers; i++) {
        char hp[CONF_PATH_MAX];
        conf_path(hp, path, "headers");
        conf_path(sp, hp, p->headers[i].key);
        const config_setting_t *at = config_setting_get_member(hs, p->headers[i].key);
        if (p->headers[i].is_int)
            return conf_error(ctx, at, sp,
                              "must be a source string such as \"json:PATH\" or \"const:TEXT\" "
                              "(an integer constant is written \"const:%lld\")",
                              p->headers[i].ival);
        if (conf_sqlh_source(ctx, at, sp, p->headers[i].sval) != 0)
            return -1;
    }
    return 0;
}

int conf_check_queue_sql(conf_ctx_t *ctx, const config_setting_t *grp, conf_queue_t *q,
                         const char *path)
{
    char sp[CONF_PATH_MAX];
    bool is_sql = strcmp(q->handler, "sql") == 0;

    if (is_sql && q->n_sql == 0) {
        conf_path(sp, path, "sql");
        return conf_error(ctx, config_setting_get_member(grp, "handler"), sp,
                          "handler = \"sql\" needs a list of statements: sql = ( { statement = "
                          "\"...\"; params = [ ... ]; } )");
    }
    if (!is_sql && (q->n_sql > 0 || q->n_publish > 0)) {
        const char *which = q->n_sql > 0 ? "sql" : "publish";
        conf_path(sp, path, which);
        return conf_error(ctx, config_setting_get_member(grp, which), sp,
                          "only a queue with handler = \"sql\" runs statements and onward "
                          "messages from the config (this one's handler is %s)",
                          q->handler);
    }
    if (is_sql && q->settings) {
        conf_path(sp, path, "settings");
        return conf_error(ctx, q->settings, sp,
                          "the SQL handler takes no settings group: its statements are in "
                          "sql = ( ... )");
    }
    return 0;
}
