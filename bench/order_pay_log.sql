-- order_pay_log.sql: the log table of order_pay's settings.log_table, as `make bench` uses it
-- (the two-statement per-message handler: the order's UPDATE, then this INSERT).
CREATE TABLE IF NOT EXISTS order_pay_log (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    order_id BIGINT NOT NULL,
    msg_id VARCHAR(255) NOT NULL,
    logged_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY k_order (order_id)
) ENGINE=InnoDB;
