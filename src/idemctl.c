/* idemctl.c: idemd's operator tool: the command line (its helpers: ctl_common.c, ctl_out.c). */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_batch.h"
#include "ctl_pace.h"
#include "log.h"

#ifndef IDEMCTL_VERSION
#define IDEMCTL_VERSION "unknown"
#endif

/* The usage summary (also idemctl(8), SYNOPSIS). */
static void ctl_usage(FILE *out)
{
    ctl_fprintf(
        out,
        "usage: idemctl [-c FILE] [--json] [-v] COMMAND ...\n"
        "  status\n"
        "  lookup [--consumer C] ID...\n"
        "  dlq list QUEUE [--reason REGEX] [--id ID]... [--verified-only] [--limit N]\n"
        "  dlq replay QUEUE (--id ID... | --reason REGEX | --all) [--to-original | --to QUEUE]\n"
        "             [--consumer C] [--verified-only] [--unverified] [--allow-empty-body]\n"
        "             [--force] [--dry-run] [--rate N/s] [--batch N]\n"
        "  dlq purge QUEUE [--reason REGEX] [--id ID]... [--verified-only] --yes\n"
        "  dlq history [QUEUE] [--limit N]\n"
        "  records purge --older-than DURATION (--consumer C | --yes) [--batch N]\n"
        "  outbox list [QUEUE] [--limit N]\n"
        "  key (status | stage | promote | retire)\n"
        "  order list [QUEUE] | order release QUEUE KEY\n"
        "  try QUEUE (--body FILE | --body-json TEXT | --from-dlq DLQ --id ID) [--id MSGID]\n"
        "      [--header K=V]... [--force-run]\n"
        "options: -c, --config FILE (default " CTL_DEFAULT_CONF "), --json, -v (more logs),\n"
        "         -h, --help, -V, --version\n"
        "exit: 0 ok, 1 not found / nothing matched (try: retry or reject), 2 usage, 3 cannot\n"
        "      connect, 4 partial\n");
}

/* Parse "90", "90s", "15m", "12h", "30d", "2w" or sums like "1h30m" into seconds; -1 if bad. */
static long long ctl_duration(const char *s)
{
    long long total = 0;
    if (*s == '\0')
        return -1;
    while (*s) {
        char *end;
        errno = 0;
        long long n = strtoll(s, &end, 10);
        if (end == s || errno != 0 || n < 0)
            return -1;
        long long unit = 1;
        switch (*end) {
        case '\0':
            break;
        case 's':
            end++;
            break;
        case 'm':
            unit = 60, end++;
            break;
        case 'h':
            unit = 3600, end++;
            break;
        case 'd':
            unit = 86400, end++;
            break;
        case 'w':
            unit = 604800, end++;
            break;
        default:
            return -1;
        }
        if (n > (1LL << 40) / unit)
            return -1;
        total += n * unit;
        s = end;
    }
    return total;
}

/* A usage error: print fmt (one %s: arg) and the usage; returns CTL_EXIT_USAGE. */
static int ctl_bad(const char *fmt, const char *arg)
{
    ctl_fprintf(stderr, "idemctl: ");
    ctl_fprintf(stderr, fmt, arg);
    ctl_fprintf(stderr, "\n");
    ctl_usage(stderr);
    return CTL_EXIT_USAGE;
}

/* A positive number for --limit, --batch, --slow-ms; -1 when bad. */
static long ctl_number(const char *s)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    return (errno || end == s || *end || n < 0) ? -1 : n;
}

/* What main keeps of the command line besides ctl's fields. */
typedef struct ctl_cli {
    const char *path;  /* the configuration file (-c) */
    const char *older; /* --older-than as given, or NULL */
    int verbose;       /* -v given this often */
    bool have_id;      /* --id given */
} ctl_cli_t;

#define CTL_PURGE_BATCH 1000 /* records purge without --batch: rows per DELETE */
#define CTL_GO_ON (-1)       /* not an exit status: the command line is fine, go on */

/*
 * Parse the options of argv into ctl and cli (both borrow from argv).
 * Returns CTL_GO_ON; or an exit status when done (--help, --version) or
 * refused (said, with the usage).
 */
static int ctl_options(int argc, char **argv, ctl_t *ctl, ctl_cli_t *cli)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"consumer", required_argument, NULL, 'C'},
        {"reason", required_argument, NULL, 'r'},
        {"limit", required_argument, NULL, 'n'},
        {"id", required_argument, NULL, 'i'},
        {"all", no_argument, NULL, 'a'},
        {"to-original", no_argument, NULL, 'o'},
        {"to", required_argument, NULL, 't'},
        {"yes", no_argument, NULL, 'y'},
        {"older-than", required_argument, NULL, 'O'},
        {"batch", required_argument, NULL, 'b'},
        {"slow-ms", required_argument, NULL, 'S'},
        {"rate", required_argument, NULL, 'R'},
        {"unverified", no_argument, NULL, 'U'},
        {"allow-empty-body", no_argument, NULL, 'E'},
        {"verified-only", no_argument, NULL, 'Y'},
        {"force", no_argument, NULL, 'F'},
        {"dry-run", no_argument, NULL, 'D'},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char err[1024];
    int o;

    while ((o = getopt_long(argc, argv, "c:vVh", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            cli->path = optarg;
            break;
        case 'j':
            ctl->json = true;
            break;
        case 'C':
            ctl->consumer = optarg;
            break;
        case 'r':
            if (ctl->has_reason)
                return ctl_bad("--reason given twice%s", "");
            if ((o = regcomp(&ctl->reason, optarg, REG_EXTENDED | REG_NOSUB)) != 0) {
                regerror(o, &ctl->reason, err, sizeof(err));
                ctl_fprintf(stderr, "idemctl: --reason '%s': %s\n", optarg, err);
                return CTL_EXIT_USAGE;
            }
            ctl->has_reason = true;
            ctl->reason_src = optarg;
            break;
        case 'n':
            if ((ctl->limit = ctl_number(optarg)) < 0)
                return ctl_bad("--limit '%s': expected a number", optarg);
            break;
        case 'i':
            ctl->ids[ctl->n_ids++] = optarg;
            cli->have_id = true;
            break;
        case 'a':
            ctl->all = true;
            break;
        case 'o':
            ctl->to_original = true;
            break;
        case 't':
            ctl->to_queue = optarg;
            break;
        case 'y':
            ctl->yes = true;
            break;
        case 'U':
            ctl->unverified = true;
            break;
        case 'E':
            ctl->allow_empty_body = true;
            break;
        case 'Y':
            ctl->verified_only = true;
            break;
        case 'F':
            ctl->force = true;
            break;
        case 'D':
            ctl->dry_run = true;
            break;
        case 'O':
            cli->older = optarg;
            if ((ctl->older_s = ctl_duration(optarg)) < 0)
                return ctl_bad("--older-than '%s': expected a duration like 30d, 12h, 1h30m, 90s",
                               optarg);
            break;
        case 'b':
            if ((ctl->batch = ctl_number(optarg)) <= 0)
                return ctl_bad("--batch '%s': expected a number above 0", optarg);
            break;
        case 'R':
            if ((ctl->rate = ctl_pace_parse(optarg)) < 0)
                return ctl_bad("--rate '%s': expected letters a second, like 500/s or 500", optarg);
            break;
        case 'S':
            if ((ctl->slow_ms = ctl_number(optarg)) < 0)
                return ctl_bad("--slow-ms '%s': expected a number", optarg);
            break;
        case 'v':
            cli->verbose++;
            break;
        case 'V':
            ctl_printf("idemctl %s\n", IDEMCTL_VERSION);
            return CTL_EXIT_OK;
        case 'h':
            ctl_usage(stdout);
            return CTL_EXIT_OK;
        default:
            ctl_usage(stderr);
            return CTL_EXIT_USAGE;
        }
    }
    return CTL_GO_ON;
}

/*
 * Whether the command args[0..n_args-1] (n_args >= 1) takes the options
 * given; --id's extra words after dlq replay QUEUE join ctl->ids. Returns
 * CTL_GO_ON, or CTL_EXIT_USAGE (said, with the usage).
 */
static int ctl_check_command(ctl_t *ctl, const ctl_cli_t *cli, char **args, int n_args)
{
    const char *cmd = args[0], *sub = n_args > 1 ? args[1] : "";
    bool is_dlq = strcmp(cmd, "dlq") == 0;
    if (strcmp(cmd, "status") == 0) {
        if (n_args != 1)
            return ctl_bad("status takes no arguments%s", "");
    } else if (strcmp(cmd, "lookup") == 0) {
        if (n_args < 2)
            return ctl_bad("lookup: which ids?%s", "");
    } else if (is_dlq && (!strcmp(sub, "list") || !strcmp(sub, "purge"))) {
        if (n_args != 3)
            return ctl_bad("dlq %s: one QUEUE expected", sub);
        if (ctl->all || ctl->to_queue || ctl->to_original || ctl->unverified ||
            ctl->allow_empty_body || ctl->force || ctl->dry_run)
            return ctl_bad("dlq %s takes --reason, --id and --verified-only only to select", sub);
    } else if (is_dlq && !strcmp(sub, "history")) {
        if (n_args > 3)
            return ctl_bad("dlq history: at most one QUEUE%s", "");
    } else if (is_dlq && !strcmp(sub, "replay")) {
        if (n_args < 3 || (n_args > 3 && !cli->have_id))
            return ctl_bad("dlq replay: one QUEUE expected%s", "");
        for (int i = 3; i < n_args; i++) /* --id a b c: the rest are ids too */
            ctl->ids[ctl->n_ids++] = args[i];
        if (ctl->all == (cli->have_id || ctl->has_reason))
            return ctl_bad("dlq replay: choose --id ID..., --reason REGEX, or --all%s", "");
        if (ctl->to_queue && ctl->to_original)
            return ctl_bad("dlq replay: --to and --to-original exclude each other%s", "");
        if (ctl->to_queue && strcmp(ctl->to_queue, args[2]) == 0)
            return ctl_bad("dlq replay: --to %s is the dead letter queue itself", ctl->to_queue);
        if (ctl->verified_only && ctl->unverified)
            return ctl_bad("dlq replay: --verified-only and --unverified exclude each other%s", "");
        if (ctl->batch == 0)
            ctl->batch = CTL_REPLAY_BATCH;
    } else if (!strcmp(cmd, "outbox") && !strcmp(sub, "list")) {
        if (n_args > 3)
            return ctl_bad("outbox list: at most one QUEUE%s", "");
    } else if (!strcmp(cmd, "key")) {
        if (n_args != 2 || (strcmp(sub, "status") && strcmp(sub, "stage") &&
                            strcmp(sub, "promote") && strcmp(sub, "retire")))
            return ctl_bad("key: status, stage, promote or retire%s", "");
    } else if (!strcmp(cmd, "order")) {
        if (!((!strcmp(sub, "list") && n_args <= 3) || (!strcmp(sub, "release") && n_args == 4)))
            return ctl_bad("order: list [QUEUE], or release QUEUE KEY%s", "");
    } else if (!strcmp(cmd, "records") && !strcmp(sub, "purge")) {
        if (n_args != 2)
            return ctl_bad("records purge takes no arguments%s", "");
        if (cli->older == NULL)
            return ctl_bad("records purge: --older-than DURATION is required%s", "");
        if (ctl->batch == 0)
            ctl->batch = CTL_PURGE_BATCH;
    } else {
        return ctl_bad("unknown command '%s'", cmd);
    }
    if (ctl->rate > 0 && !(is_dlq && !strcmp(sub, "replay")))
        return ctl_bad("--rate is for dlq replay%s", "");

    return CTL_GO_ON;
}

/* Run the command args[0..n_args-1] (checked by ctl_check_command, ctl->conf loaded).
 * Returns its exit status. */
static int ctl_run(ctl_t *ctl, char **args, int n_args)
{
    const char *cmd = args[0], *sub = n_args > 1 ? args[1] : "";

    if (!strcmp(cmd, "status"))
        return ctl_status(ctl);
    else if (!strcmp(cmd, "lookup"))
        return ctl_lookup(ctl, args + 1, n_args - 1);
    else if (!strcmp(cmd, "records"))
        return ctl_records_purge(ctl);
    else if (!strcmp(cmd, "outbox"))
        return ctl_outbox_list(ctl, n_args > 2 ? args[2] : NULL);
    else if (!strcmp(cmd, "key"))
        return ctl_key(ctl, sub);
    else if (!strcmp(cmd, "order"))
        return ctl_order(ctl, sub, args + 2, n_args - 2);
    else if (!strcmp(sub, "history"))
        return ctl_dlq_history(ctl, n_args > 2 ? args[2] : NULL);
    else if (!strcmp(sub, "list"))
        return ctl_dlq(ctl, args[2], CTL_LIST);
    else if (!strcmp(sub, "replay"))
        return ctl_dlq(ctl, args[2], CTL_REPLAY);
    else
        return ctl_dlq(ctl, args[2], ctl->yes ? CTL_PURGE : CTL_COUNT);
}

/* Parse the command line, load the configuration, run one command; exit codes CTL_EXIT_*. */
int main(int argc, char **argv)
{
    ctl_t ctl = {.older_s = -1};
    ctl_cli_t cli = {.path = CTL_DEFAULT_CONF};
    char err[1024];
    int rc;

    if (ctl_try_wanted(argc, argv))
        return ctl_try_main(argc, argv); /* its own options */
    ctl.ids = calloc((size_t)argc + 1, sizeof(*ctl.ids));
    if (ctl.ids == NULL)
        return CTL_EXIT_PARTIAL;
    if ((rc = ctl_options(argc, argv, &ctl, &cli)) != CTL_GO_ON)
        return rc;
    char **args = argv + optind;
    int n_args = argc - optind;
    if (n_args < 1)
        return ctl_bad("no command%s", "");
    if (ctl_check_command(&ctl, &cli, args, n_args) != CTL_GO_ON)
        return CTL_EXIT_USAGE;

    log_set_target(LOG_TARGET_STDERR);
    log_set_context("idemctl");
    log_set_level(cli.verbose >= 2   ? LOG_LEVEL_DEBUG
                  : cli.verbose == 1 ? LOG_LEVEL_INFO
                                     : LOG_LEVEL_WARNING);
    if (conf_load(cli.path, &ctl.conf, err, sizeof(err)) != 0) {
        ctl_fprintf(stderr, "idemctl: %s\n", err);
        return CTL_EXIT_USAGE;
    }
    rc = ctl_run(&ctl, args, n_args);
    conf_free(ctl.conf);
    if (ctl.has_reason)
        regfree(&ctl.reason);
    free(ctl.ids);
    return rc;
}
