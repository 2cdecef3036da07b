-- 002_orders.sql: the orders table the order_pay handler plugin pays (demo and benchmark schema).
--
-- status: 1 unpaid, 2 paid. pay_count counts applied payments: with idemd it
-- stays at 1 per paid order however often a payment is delivered. Creates no
-- rows (the demo and benchmarks seed their own). Safe to apply more than once.
CREATE TABLE IF NOT EXISTS orders (
    id BIGINT NOT NULL,
    status TINYINT NOT NULL DEFAULT 1,
    pay_time DATETIME NULL,
    pay_count INT NOT NULL DEFAULT 0,
    PRIMARY KEY (id)
) ENGINE=InnoDB;
