-- 003_idemd_attempt.sql: crash-loop guard: how often a redelivered message was started, written before its handler runs.
--
-- idemd only writes here for deliveries the broker marks as redelivered (the
-- worker that had them died or lost its connection). The row is committed on
-- its own, outside the business transaction, before the handler runs, so a
-- handler that kills its worker still leaves a count behind; past
-- max_attempts the message is dead-lettered without running the handler.
-- A success deletes the row in its own transaction. Leftover rows are
-- harmless (a later message with the same id is a duplicate) and can be
-- deleted by updated_at. Safe to apply more than once.
CREATE TABLE IF NOT EXISTS idemd_attempt (
    consumer VARBINARY(128) NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    attempts INT UNSIGNED NOT NULL,
    updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
        ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (consumer, msg_id),
    KEY idx_updated_at (updated_at)
) ENGINE=InnoDB;
