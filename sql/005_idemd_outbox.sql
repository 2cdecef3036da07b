-- 005_idemd_outbox.sql: the transactional outbox: onward messages handlers send with host->publish (ABI 1.3).
-- A row is written in the handler's transaction and deleted once the broker confirmed its message.
CREATE TABLE IF NOT EXISTS idemd_outbox (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, -- publishing order
    consumer VARBINARY(128) NOT NULL,                        -- the queue's dedup namespace
    source_id VARBINARY(255) NOT NULL,                       -- the id of the message that sent it
    msg_id VARBINARY(255) NOT NULL,                          -- the onward message's id
    exchange VARBINARY(255) NOT NULL,
    routing_key VARBINARY(255) NOT NULL,
    content_type VARBINARY(255) NOT NULL DEFAULT '',
    headers BLOB NULL,                                       -- idemd's own encoding (src/outbox.c)
    body LONGBLOB NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT NOW(3),
    KEY idemd_outbox_source (consumer, source_id),
    KEY idemd_outbox_age (consumer, created_at)
) ENGINE=InnoDB;
