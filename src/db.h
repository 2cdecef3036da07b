/* db.h: the worker's MySQL/MariaDB connection: connect, dedup record insert, transaction control.
 */
#ifndef IDEMD_DB_H
#define IDEMD_DB_H

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <stdbool.h>
#include <stddef.h>

#include "conf.h"

/*
 * Error numbers the two client libraries do not both name. Each is the
 * server's number, whichever library reads it: 1927 is MariaDB's KILL of
 * our connection (ER_CONNECTION_KILLED, MariaDB headers only); 4031 is
 * MySQL 8.0.24+'s disconnect of an idle session (ER_CLIENT_INTERACTION_TIMEOUT,
 * Oracle's headers only). MariaDB's own 4031 is ER_REFERENCED_TRG_DOES_NOT_EXIST,
 * raised only by CREATE TRIGGER ... FOLLOWS/PRECEDES: DDL, which commits
 * implicitly and so never belongs in a dedup transaction; taking it for a
 * lost connection rolls back and reconnects, the safe reading either way.
 */
#define DB_ER_CONNECTION_KILLED 1927
#define DB_ER_IDLE_DISCONNECT 4031
/* MySQL 8.0.1+'s NOWAIT refusal (ER_LOCK_NOWAIT; MariaDB reports NOWAIT as 1205): the
 * statement failed on a lock another transaction holds, like a lock wait timeout. */
#define DB_ER_LOCK_NOWAIT 3572
/* XA (both servers name them alike, MySQL's headers without ER_ for some): a statement that
 * would end an open branch is refused (1399, XAER_RMFAIL); a branch cannot start inside a plain
 * transaction (1400); an unknown branch (1397); the server rolled the branch back (1402, 1613,
 * 1614: XA_RBROLLBACK, XA_RBTIMEOUT, XA_RBDEADLOCK). */
#define DB_ER_XAER_NOTA 1397
#define DB_ER_XAER_RMFAIL 1399
#define DB_ER_XAER_OUTSIDE 1400
#define DB_ER_XA_RBROLLBACK 1402
#define DB_ER_XA_RBTIMEOUT 1613
#define DB_ER_XA_RBDEADLOCK 1614
/*
 * A server that takes no writes now, and MySQL Group Replication (MySQL's numbers; MariaDB has
 * none in 3061..3999). 1290 (ER_OPTION_PREVENTS_STATEMENT, both libraries): read_only or
 * super_read_only, as on a secondary or a primary just demoted: find the primary. 3101
 * (ER_TRANSACTION_ROLLBACK_DURING_COMMIT): the group's certification rolled the transaction back
 * at COMMIT, as Galera's 1213: nothing committed, redo it. 3100 (ER_RUN_HOOK_ERROR): a
 * replication hook failed, at COMMIT on a member leaving the group: the outcome is not known on
 * this connection, the record on the new primary tells. 3781..3783 (ER_GR_HOLD_WAIT_TIMEOUT,
 * _KILLED, _MEMBER_STATUS_ERROR): a statement held while a new primary applied its backlog was
 * given up; 3796 (ER_GRP_TRX_CONSISTENCY_NOT_ALLOWED): the member is not ONLINE. All of these
 * but 3101 end the session's use: reconnect, to the primary.
 */
#define DB_ER_READ_ONLY 1290
#define DB_ER_GR_HOOK 3100
#define DB_ER_GR_ROLLBACK 3101
#define DB_ER_GR_HOLD_TIMEOUT 3781
#define DB_ER_GR_HOLD_KILLED 3782
#define DB_ER_GR_HOLD_MEMBER 3783
#define DB_ER_GR_NOT_ONLINE 3796
/* Not the server's: idemd's word, after a handler call, for a transaction the server-status
 * flags show ended (db_boundary). No server error has this number. */
#define DB_ER_TXN_ENDED 60001

/* Outcome of a statement, classified by what the server did (see NOTES). */
typedef enum db_status {
    DB_OK = 0,
    DB_DUPLICATE = 1,         /* 1062: statement rolled back; the key exists */
    DB_ERR_DEADLOCK = -1,     /* 1213: whole transaction rolled back: redo it */
    DB_ERR_LOCK_TIMEOUT = -2, /* 1205: statement rolled back; roll back, never commit */
    DB_ERR_CONNECTION = -3,   /* 2006/2013/...: server rolls back; reconnect */
    DB_ERR_TX_LOST = -4,      /* our savepoint is gone: the transaction was rolled back */
    DB_ERR_OTHER = -5,        /* anything else (schema, privileges, ...) */
    DB_ERR_HANDLER = -6,      /* the handler's SQL left the transaction so that idemd's own
                               * statement fails (1178: a table without savepoints): the
                               * connection is sound, the message at fault is the handler's */
    DB_ERR_REFUSED = -7,      /* 1399/1400: a statement would have ended idemd's XA branch;
                               * the server refused it, nothing was committed */
    DB_ERR_ENDED = -8,        /* DB_ER_TXN_ENDED: a handler ended idemd's transaction */
} db_status_t;

#define DB_ATTEMPT_TABLE "idemd_attempt"
#define DB_KEY_TABLE "idemd_key" /* sql/007_idemd_key.sql */

typedef struct db {
    MYSQL *my;
    MYSQL_STMT *record_stmt;  /* INSERT INTO <record_table>(consumer, msg_id) VALUES (?, ?) */
    MYSQL_STMT *bump_stmt;    /* attempts + 1 for (consumer, msg_id); prepared on first use */
    MYSQL_STMT *crash_stmt;   /* crashes + 1 for (consumer, msg_id); prepared on first use */
    MYSQL_STMT *start_stmt;   /* attempts + 1 of an existing row; prepared on first use */
    MYSQL_STMT *unstart_stmt; /* attempts - 1 (a start that finished); prepared on first use */
    MYSQL_STMT *clear_stmt;   /* DELETE the attempts row; prepared on first use */
    char consumer[129];
    unsigned long consumer_len;
    char id_buf[256];
    unsigned long id_len;
    unsigned last_errno; /* of the last statement that failed */
    bool galera;         /* the server is a Galera node (wsrep_on = ON) */
    int max_connections; /* the server's @@max_connections (0: not read) */
    char record_table[65];
    char *sql; /* statement buffer of the set-based record calls, grown as needed */
    size_t sql_size;
    int *ord; /* the order db_record_many writes its ids in, grown as needed */
    int ord_size;
    char host[256]; /* the server this connection reached ("" over the unix socket) */
    unsigned port;
    int boundary;              /* DB_BOUNDARY_XA or _CHECK: how idemd's transaction is kept */
    bool xa_open;              /* an XA branch of db_begin's is open */
    unsigned long long xa_seq; /* branches begun on this connection */
    char xid[64];              /* the open branch's id, quoted */
} db_t;

/* How idemd's transaction is kept whole (db_t.boundary, db_boundary's answers). */
typedef enum db_boundary {
    DB_BOUNDARY_XA = 1,      /* an XA branch: the server refuses what would end it (1399) */
    DB_BOUNDARY_CHECK = 2,   /* START TRANSACTION: an end is seen after the fact (flags) */
    DB_BOUNDARY_HELD = 0,    /* db_boundary: the transaction is open and whole */
    DB_BOUNDARY_REFUSED = 3, /* db_boundary: the last statement tried to end it, refused */
    DB_BOUNDARY_ENDED = 4,   /* db_boundary: it was ended (committed or rolled back) */
} db_boundary_t;

/*
 * Connect with the configured timeouts, autocommit off, READ COMMITTED,
 * never MYSQL_OPT_RECONNECT. Keys are written for consumer; when record is
 * true the record insert is prepared too. With cfg->hosts, the servers are
 * tried once each, from hosts[start % n_hosts] on, the first that answers
 * wins (workers pass their index so they spread). The server's version is
 * checked against the oldest idemd supports (src/version.h). A server that
 * takes no writes (read-only, or a Group Replication member other than the
 * ONLINE PRIMARY: db_gr.c) is closed and the next tried. Returns 0 and a
 * new db_t in *out (free with db_close); -1 after logging why;
 * DB_OPEN_NO_PRIMARY when servers answered but none took writes (a primary
 * is being elected: worth trying again soon); or DB_OPEN_REFUSED when every
 * server is older than that minimum, or a Group Replication primary runs
 * with a consistency idemd may not use: the reason is then in refused
 * (refused_len bytes; the caller reports it), or logged when refused is
 * NULL.
 */
#define DB_OPEN_REFUSED (-2)
#define DB_OPEN_NO_PRIMARY (-3)
int db_open(const conf_database_t *cfg, const char *consumer, bool record, int start, char *refused,
            size_t refused_len, db_t **out) __attribute__((warn_unused_result));

/*
 * A second connection to the server db reached, with cfg's credentials and
 * TLS and read/write timeouts of DB_PROBE_TIMEOUT s, for looking at db's
 * session from outside (stall.c); autocommit stays on, nothing is checked
 * or logged but a TLS option the library refuses. db is only read (its
 * host and port), so another thread may call this while db's owner is
 * inside a statement. Returns a handle to mysql_close, or NULL with the
 * reason in err.
 */
#define DB_PROBE_TIMEOUT 5
MYSQL *db_probe_open(const db_t *db, const conf_database_t *cfg, char *err, size_t errlen);

/*
 * Write later keys (records, attempts) for another consumer; the prepared
 * statements follow. consumer is copied. 0, or -1 when too long (logged).
 */
int db_set_consumer(db_t *db, const char *consumer) __attribute__((warn_unused_result));

/* Close the connection and free db; NULL is fine. */
void db_close(db_t *db);

/* Classify a MySQL error number (inline: the protocol module uses it without the client library).
 */
static inline db_status_t db_classify(unsigned int err)
{
    switch (err) {
    case 0:
        return DB_OK;
    case ER_DUP_ENTRY:
        return DB_DUPLICATE;
    case ER_LOCK_DEADLOCK:
    case DB_ER_XA_RBDEADLOCK:
    case DB_ER_GR_ROLLBACK: /* certification: rolled back at COMMIT, nothing committed */
        return DB_ERR_DEADLOCK;
    case DB_ER_XA_RBROLLBACK:
    case DB_ER_XA_RBTIMEOUT:
        return DB_ERR_TX_LOST; /* the server rolled the branch back */
    case ER_LOCK_WAIT_TIMEOUT:
    case DB_ER_LOCK_NOWAIT:
        return DB_ERR_LOCK_TIMEOUT;
    case ER_SP_DOES_NOT_EXIST:
        return DB_ERR_TX_LOST; /* 1305: SAVEPOINT does not exist */
    case DB_ER_XAER_RMFAIL:
    case DB_ER_XAER_OUTSIDE:
        return DB_ERR_REFUSED;
    case DB_ER_TXN_ENDED:
        return DB_ERR_ENDED;
    case ER_CHECK_NOT_IMPLEMENTED:
        /* 1178 "The storage engine for the table doesn't support SAVEPOINT": a handler
         * wrote to a table whose engine takes part in the transaction but cannot roll
         * back to a savepoint (MariaDB's Aria). Not the connection's fault. */
        return DB_ERR_HANDLER;
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_SERVER_LOST_EXTENDED:
    case DB_ER_CONNECTION_KILLED:
    case DB_ER_IDLE_DISCONNECT:
    case ER_SERVER_SHUTDOWN:
    case CR_COMMANDS_OUT_OF_SYNC:
        return DB_ERR_CONNECTION;
    case DB_ER_READ_ONLY:
    case DB_ER_GR_HOOK:
    case DB_ER_GR_HOLD_TIMEOUT:
    case DB_ER_GR_HOLD_KILLED:
    case DB_ER_GR_HOLD_MEMBER:
    case DB_ER_GR_NOT_ONLINE:
        /* Not a lost connection, but one not to write on: the worker reconnects, and the
         * connect takes only a writable primary (db_gr.c); nothing is counted against the
         * message. At COMMIT, the redelivery's record INSERT on the primary tells whether it
         * committed. */
        return DB_ERR_CONNECTION;
    default:
        return DB_ERR_OTHER;
    }
}

/*
 * Whether err says a unique key already holds the value, in any of the server's spellings: 1062
 * (ER_DUP_ENTRY), 1022 (ER_DUP_KEY: "Can't write; duplicate key"), 1169 (ER_DUP_UNIQUE: a
 * unique constraint) and 1586 (ER_DUP_ENTRY_WITH_KEY_NAME). The SQL handler's on_duplicate
 * takes them alike; idemd's own record insert meets only 1062 (db_classify).
 */
static inline bool db_duplicate_key(unsigned int err)
{
    return err == 1062 || err == 1022 || err == 1169 || err == 1586;
}

/*
 * Insert the dedup record. DB_OK: inserted (the key is now locked by our
 * transaction); DB_DUPLICATE: another committed transaction holds it (this
 * waits while one is still open); errors classified. Logs errors other than
 * duplicates, with the printable id.
 */
db_status_t db_record(db_t *db, const char *id, size_t len);

/* Write b as an SQL hex literal X'..' at s (2 * len + 4 bytes with the NUL); returns its end. */
char *db_hex_literal(char *s, const void *b, size_t len);

/*
 * Set-based dedup: INSERT the records of ids[0..k-1] (lens: their lengths)
 * in one statement. DB_OK: all inserted; DB_DUPLICATE: one was committed
 * before, and the statement inserted nothing; errors classified (logged,
 * except duplicates).
 */
db_status_t db_record_many(db_t *db, const char *const *ids, const size_t *lens, int k);

/*
 * Which of ids[0..k-1] have a committed record (one SELECT): sets found[j].
 * Returns the classified status (logged).
 */
db_status_t db_find_records(db_t *db, const char *const *ids, const size_t *lens, int k,
                            bool *found);

/*
 * Prepare the crash-loop guard's statements on idemd_attempt (done on first
 * use too): 0, or -1 (logged) when they do not prepare, e.g. a table
 * without the crashes column of sql/008_idemd_attempt_crashes.sql.
 */
int db_attempt_prepare(db_t *db);

/*
 * Count one more start of a redelivered message, committed at once and on
 * its own (call it with no transaction open). Returns the start count after
 * this start (1 the first time), and in *crashes the crashes confirmed so
 * far (db_attempt_crash), or -1 on error (logged).
 */
long long db_attempt_bump(db_t *db, const char *id, size_t len, long long *crashes);

/*
 * Count one confirmed crash of a message (its worker died inside the
 * handler, by the handler's fault), committed at once and on its own; with
 * add_start also one more start (the crashed run was not counted before it
 * began). Returns the crash count after it, or -1 on error (logged).
 */
long long db_attempt_crash(db_t *db, const char *id, size_t len, bool add_start);

/*
 * Take back one start of a message whose run finished (never below 0),
 * committed at once and on its own. 0, or -1 on error (logged).
 */
int db_attempt_unstart(db_t *db, const char *id, size_t len);

/* db_txn.c: idemd's transaction. */

/* Set db->boundary at connect: XA where cfg->transaction asks for it and the server takes it
 * (not on Galera). 0, or -1 when the connection was lost (logged). */
int db_txn_probe(db_t *db, const conf_database_t *cfg, const char *where);

/*
 * Open idemd's transaction: XA START (DB_BOUNDARY_XA) or START TRANSACTION,
 * after committing a read-only transaction a look-up left open. Errors
 * classified, in db->last_errno.
 */
db_status_t db_begin(db_t *db);

/*
 * End the open transaction: commit or roll back (XA END, XA COMMIT ... ONE
 * PHASE or XA ROLLBACK for a branch; COMMIT or ROLLBACK otherwise), and
 * autocommit off again if a handler turned it on. A failed commit of a
 * branch rolls it back. Errors classified, the first in db->last_errno.
 */
db_status_t db_end(db_t *db, bool commit);

/*
 * After a handler call or statement whose last error number was err: is
 * idemd's transaction still open and whole? From the server-status flags
 * of the last reply (no round trip). HELD, REFUSED (err: the server refused
 * to end it) or ENDED.
 */
db_boundary_t db_boundary(const db_t *db, unsigned err);

struct copies_keys; /* copies.h */

/*
 * Read the installation's relay keys (sql/007_idemd_key.sql, sql/010) into
 * keys: row id 1, the signing key, into k[0], rows 2..COPIES_KEYS_MAX (keys
 * accepted for checking only, during a rotation) after it. With create,
 * row 1 is made first when no instance has yet: each connection offers 32
 * bytes of its own from getrandom(2), INSERT IGNORE keeps the first. A key
 * under COPIES_KEY_LEN bytes is refused (logged with the remedy); of a
 * longer one the first COPIES_KEY_LEN bytes are used. 0; 1 without create
 * when no key was made yet (a fresh install: no worker connected, so no copy
 * was signed; logged at debug only); or -1 (logged; the table may be
 * missing). keys holds none unless 0.
 */
int db_copies_keys(db_t *db, bool create, struct copies_keys *keys)
    __attribute__((warn_unused_result));

/* Delete the message's attempts row inside the current transaction. */
db_status_t db_attempt_clear(db_t *db, const char *id, size_t len);

/*
 * Retention: delete up to limit of this consumer's rows older than days
 * from table (column time_col), committed. Returns the rows deleted, or -1
 * (logged).
 */
long long db_purge(db_t *db, const char *table, const char *time_col, int days, int limit);

/* Run one statement without a result set (SAVEPOINT, ROLLBACK TO, ...). Logs errors. */
db_status_t db_exec(db_t *db, const char *sql);

/* COMMIT / ROLLBACK the open transaction. Log errors. */
db_status_t db_commit(db_t *db);
db_status_t db_rollback(db_t *db);

/* The MySQL error number of the last failed db_* statement. */
static inline unsigned db_last_errno(const db_t *db)
{
    return db->last_errno;
}

#endif
