-- 013_idemd_replay.sql: the replay trail: one row per dead letter idemctl dlq replay sent back, who did it and where it went.
--
-- idemctl writes a row after the broker confirmed the replayed copy and
-- before it acks the dead letter, in the transaction that clears the
-- letter's attempts row. os_user is the login name of idemctl's real user
-- id, sudo_user the SUDO_USER it ran under (NULL without sudo; the
-- environment says so, nothing checks it), db_user the server's
-- CURRENT_USER(). signature is what the letter's idemd-sig was: verified,
-- unsigned, forged or unchecked (docs/idemctl.8); applied whether its id was
-- already recorded for the consumer (1, 0, NULL: unknown); forced that
-- --force replayed it anyway. idemctl dlq history lists the rows. Binary
-- columns: ids and names compare byte for byte. Safe to apply more than once.
CREATE TABLE IF NOT EXISTS idemd_replay (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    replayed_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    os_user VARBINARY(128) NOT NULL,
    sudo_user VARBINARY(128) NULL,
    db_user VARBINARY(288) NOT NULL,
    host VARBINARY(255) NOT NULL,
    letter_id VARBINARY(255) NULL,
    source_queue VARBINARY(255) NOT NULL,
    target_exchange VARBINARY(255) NOT NULL,
    target_routing_key VARBINARY(255) NOT NULL,
    consumer VARBINARY(128) NULL,
    signature VARCHAR(16) NOT NULL,
    applied TINYINT NULL,
    forced TINYINT NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    KEY idx_replayed_at (replayed_at),
    KEY idx_letter (letter_id)
) ENGINE=InnoDB;
