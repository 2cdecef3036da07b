-- 012_idemd_order.sql: per-key ordering (order_key, docs/ordering.md): the keys that are blocked, and the messages waiting behind each.
--
-- A key is blocked while the message at its head waits for a retry (or, with
-- order_dead_letter = "hold", was dead-lettered): only the head may be
-- handled. A later message of the key is appended to idemd_order_waiter (seq
-- keeps arrival order) and goes to the first delay queue to wait; that is not
-- an attempt. When the head commits (or is dead-lettered with "release"), the
-- first waiter becomes the head; with no waiter left the block row goes. Every
-- change is made inside the message's own batch transaction, with the block
-- row locked (SELECT ... FOR UPDATE), and committed before the broker hears
-- of it. Binary columns: keys and ids compare byte for byte. Safe to apply
-- more than once. idemctl order list / release read and change these rows.
CREATE TABLE IF NOT EXISTS idemd_order_block (
    consumer VARBINARY(128) NOT NULL,
    okey VARBINARY(255) NOT NULL,
    head_id VARBINARY(255) NOT NULL,
    held TINYINT NOT NULL DEFAULT 0,
    since DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (consumer, okey)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS idemd_order_waiter (
    seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    consumer VARBINARY(128) NOT NULL,
    okey VARBINARY(255) NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    since DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (seq),
    UNIQUE KEY uk_waiter (consumer, okey, msg_id),
    KEY idx_key_seq (consumer, okey, seq)
) ENGINE=InnoDB;
