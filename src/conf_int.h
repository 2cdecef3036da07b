/* conf_int.h: what the pieces of conf (table, loader, checks, printers, reload diff) share. */
#ifndef IDEMD_CONF_INT_H
#define IDEMD_CONF_INT_H

#include <libconfig.h>
#include <stdbool.h>
#include <stddef.h>

/* conf.h's configuration, which the table's machinery only points at (C11 allows the typedef
 * twice): this header needs nothing of conf.c, so conf.c's table can include it. */
typedef struct conf conf_t;
typedef struct conf_queue conf_queue_t; /* conf.h: one queue's settings (opaque here too) */

typedef enum conf_type {
    CONF_T_STRING,    /* char *; min..max is the length in bytes (max 0: no limit) */
    CONF_T_INT,       /* int in min..max, or one of enums[] (a word such as "auto") when set */
    CONF_T_BOOL,      /* bool */
    CONF_T_ENUM,      /* int, the value of one of enums[] */
    CONF_T_INT_ARRAY, /* int * at off, count at off_n; each element in min..max */
    CONF_T_STR_ARRAY, /* char ** at off, count at off_n; each element min..max bytes */
    CONF_T_FILE,      /* char * at off, read from the named file; excludes setting "peer" */
    CONF_T_ARGS,      /* conf_arg_t * at off, count at off_n: a group of strings and integers */
    CONF_T_GROUP,     /* a group whose settings are section "sub", stored at base + off */
    CONF_T_LIST,      /* a list of groups of section "sub": array at off, count at off_n */
    CONF_T_RAW,       /* a group kept as a config_setting_t pointer and not checked */
} conf_type_t;

#define CONF_F_REQUIRED 0x01  /* no default: the setting must be present */
#define CONF_F_SECRET 0x02    /* masked as "***" by conf_dump */
#define CONF_F_NO_RELOAD 0x04 /* a change needs a restart */
#define CONF_F_IDENT 0x08     /* [A-Za-z0-9_]+ only: the value is interpolated into SQL */
#define CONF_F_READABLE 0x10  /* STRING: names a file that must be readable at load time */
#define CONF_F_BY_HOSTS 0x20  /* not used when the section's "hosts" list is not empty */

#define CONF_PATH_MAX 512
#define CONF_SECRET_MAX 4096

typedef struct conf_enum {
    const char *name;
    int value;
} conf_enum_t;

typedef struct conf_def {
    const char *section; /* the group this setting belongs to (see conf_sections) */
    const char *name;
    conf_type_t type;
    size_t off;   /* in the section's struct */
    size_t off_n; /* INT_ARRAY, ARGS, LIST: the int count */
    unsigned flags;
    const char *def;          /* default as written in the file; NULL: unset */
    long long min, max;       /* see conf_type_t; LIST: min element count */
    const conf_enum_t *enums; /* ENUM, NULL-terminated */
    const char *sub;          /* GROUP, LIST: section of the contents; FILE: the peer setting */
    size_t elem_size;         /* LIST */
    const char *def_doc;      /* reference only: the default when def is NULL */
    const char *help;         /* one line for the reference */
} conf_def_t;

typedef struct conf_ctx {
    conf_t *conf; /* receives warnings */
    const char *path;
    char *err;
    size_t errlen;
} conf_ctx_t;

typedef int (*conf_check_fn)(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                             const char *path);

typedef struct conf_section {
    const char *name;
    const char *title; /* where it sits in the file, for the reference */
    const char *intro;
    conf_check_fn check; /* cross-setting rules, after the section's settings loaded */
} conf_section_t;

/* What a secret file holds; the kinds differ in what they ask of the file. */
typedef enum conf_secret_kind {
    CONF_SECRET_PASSWORD, /* a mode every user may read is warned about */
    CONF_SECRET_TOKEN,    /* metrics.token_file: see conf_check_token */
} conf_secret_kind_t;

/* The settings table (conf.c): every setting once, ended by {.name = NULL}. */
extern const conf_def_t conf_defs[];
/* Its sections, in the order of the reference, ended by {NULL, ...}. */
extern const conf_section_t conf_sections[];

#define CONF_AT(base, off, type) ((type *)(void *)((char *)(base) + (off)))
#define CONF_CAT(base, off, type) ((const type *)(const void *)((const char *)(base) + (off)))

/* conf.c: the entry of setting name in section, and of section name; NULL when unknown. */
const conf_def_t *conf_find(const char *section, const char *name);
const conf_section_t *conf_section(const char *name);

/* One line of a conf_text_t's text: the file (index in files) and the line it came from. */
typedef struct conf_text_line {
    int file;
    int line;
} conf_text_line_t;

/* conf_text.c: a configuration's text, the main file with every @include expanded, as
 * config_read_string parses it, and where each of its lines came from. */
typedef struct conf_text {
    char *buf; /* the text, NUL-terminated */
    size_t len, cap;
    char **files; /* each file as named in messages: [0] the main one, then the includes */
    int n_files;
    conf_text_line_t *map; /* map[i]: where line i + 1 of buf came from */
    int n_map, cap_map;
    bool at_line_start; /* buf ends at the start of a line */
    char *dir;          /* the main file's directory, for relative @include names; NULL: . */
    char *err;
    size_t errlen;
} conf_text_t;

/* Read the file at path and every file it @includes, each opened once through trust_open (and
 * refused as it says) and read from that descriptor, into t (free with conf_text_free, also on
 * error). 0, or -1 with "FILE[:LINE]: WHY" in err (err may be NULL). */
int conf_text_read(conf_text_t *t, const char *path, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Where line (of t's text, from 1) came from: *file (t's string) and its line there. */
void conf_text_where(const conf_text_t *t, int line, const char **file, int *file_line);
/* Give every setting under s the file and line it came from (the file strings stay t's, or
 * whoever conf_text_take_files gave them to). */
void conf_text_fix(const conf_text_t *t, config_setting_t *s);
/* The file names, handed to the caller (n of them; free each and the array); t keeps none. */
char **conf_text_take_files(conf_text_t *t, int *n);
void conf_text_free(conf_text_t *t);

/* conf_load.c: errors and warnings "FILE:LINE: SETTING: PROBLEM", setting paths. */
void conf_source(const conf_ctx_t *ctx, const config_setting_t *at, char *buf, size_t len,
                 int *line);
int conf_error(conf_ctx_t *ctx, const config_setting_t *at, const char *setting, const char *fmt,
               ...) __attribute__((format(printf, 4, 5)));
int conf_warn(conf_ctx_t *ctx, const config_setting_t *at, const char *setting, const char *fmt,
              ...) __attribute__((format(printf, 4, 5)));
void conf_path(char *buf, const char *parent, const char *name);
void conf_path_index(char *buf, const char *parent, int i);

/* conf_load.c: the table-driven loader. */
int conf_set_string(conf_ctx_t *ctx, const config_setting_t *at, const char *sp, char **field,
                    const char *value);
int conf_read_secret(conf_ctx_t *ctx, const config_setting_t *s, const char *sp, const char *file,
                     conf_secret_kind_t kind, char **field);
int conf_load_section(conf_ctx_t *ctx, const char *section, const config_setting_t *grp,
                      const config_setting_t *anchor, void *base, const char *path);

/* conf_check.c and conf_check_conn.c (broker and database): the rules across the settings of a
 * section (conf_section_t.check). */
int conf_check_root(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);
int conf_check_broker(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);
int conf_check_broker_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                          const char *path);
int conf_check_database(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);
int conf_check_database_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                            const char *path);
int conf_check_metrics(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);
int conf_check_queue(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);
int conf_check_declare(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);

/* conf_sqlh.c: the SQL handler's settings (handler = "sql"): each statement, each onward message,
 * and the queue's rules (conf_check_queue calls conf_check_queue_sql). */
int conf_check_sql(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path);
int conf_check_sql_publish(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                           const char *path);
int conf_check_queue_sql(conf_ctx_t *ctx, const config_setting_t *grp, conf_queue_t *q,
                         const char *path);

#endif
