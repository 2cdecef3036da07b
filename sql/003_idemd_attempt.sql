-- 003_idemd_attempt.sql: crash-loop guard: how often a redelivered message was started, written before its handler runs.
--
-- idemd only writes here for deliveries the broker marks as redelivered (the
-- worker that had them died or lost its connection). attempts counts their
-- starts, committed on their own, outside the business transaction, before
-- the handler runs. crashes counts runs that ended with the worker dying in
-- the handler by the handler's fault (a signal such as SIGSEGV, or
-- handler_timeout), written by the successor of the worker that died. At
-- max_attempts crashes (or max_attempts + 10 starts without them) the
-- message is dead-lettered without running the handler.
-- A success deletes the row in its own transaction. Leftover rows are
-- harmless (a later message with the same id is a duplicate) and can be
-- deleted by updated_at. Safe to apply more than once.
CREATE TABLE IF NOT EXISTS idemd_attempt (
    consumer VARBINARY(128) NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    attempts INT UNSIGNED NOT NULL,
    crashes INT UNSIGNED NOT NULL DEFAULT 0,
    updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
        ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (consumer, msg_id),
    KEY idx_updated_at (updated_at)
) ENGINE=InnoDB;
