-- 001_msg_id_record.sql: the dedup record table idemd inserts each message id into, inside the handler's transaction.
--
-- One row per (consumer, msg_id) that was committed. The unique key is what
-- makes delivery exactly-once: a second INSERT of the same key fails with
-- 1062 (or waits for the transaction holding it). Binary columns, so ids
-- compare byte for byte, not by collation. Safe to apply more than once.
-- The name is database.record_table in idemd's config (default msg_id_record).
-- Old rows can be deleted by create_time once the broker can no longer
-- redeliver or a producer re-send those messages.
CREATE TABLE IF NOT EXISTS msg_id_record (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    consumer VARBINARY(128) NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    create_time DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY uk_consumer_msg_id (consumer, msg_id),
    KEY idx_create_time (create_time)
) ENGINE=InnoDB;
