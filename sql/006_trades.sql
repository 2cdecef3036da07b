-- 006_trades.sql: the demo trade table that trade_sync.so applies order.paid messages to.
CREATE TABLE IF NOT EXISTS trades (
    order_id BIGINT NOT NULL PRIMARY KEY,
    status VARCHAR(16) NOT NULL,
    settle_count INT NOT NULL DEFAULT 0, -- applications of order.paid: 1 when exactly once
    updated_at DATETIME(3) NOT NULL DEFAULT NOW(3) ON UPDATE NOW(3)
) ENGINE=InnoDB;
