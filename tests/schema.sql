-- schema.sql: test-only tables: effects counts how often a handler's effect ran per (queue, message id); reconcile_runs logs counter.so's reconcile() runs; counter_flags switches counter.so's behaviour; trace_seen holds the trace context counter.so saw; order_effects records ordered.so's effects in commit order; order_key_rows is the row per key ordered.so's settings.key_table writes.
CREATE TABLE IF NOT EXISTS effects (
    queue VARCHAR(128) NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    n INT NOT NULL,
    PRIMARY KEY (queue, msg_id)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS reconcile_runs (
    id BIGINT NOT NULL AUTO_INCREMENT,
    pid INT NOT NULL,
    started_at DATETIME(6) NOT NULL,
    ended_at DATETIME(6) NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS counter_flags (
    name VARCHAR(64) NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS trace_seen (
    id BIGINT NOT NULL AUTO_INCREMENT,
    msg_id VARBINARY(255) NOT NULL,
    traceparent VARCHAR(64) NOT NULL,
    tracestate TEXT NOT NULL,
    baggage TEXT NOT NULL,
    trace_id VARCHAR(32) NOT NULL,
    span_id VARCHAR(16) NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS order_effects (
    id BIGINT NOT NULL AUTO_INCREMENT,
    queue VARCHAR(128) NOT NULL,
    okey VARBINARY(255) NOT NULL,
    seq BIGINT NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    pos BIGINT NULL, -- with ordered.so's key_table: the key row's n, its commit counter
    PRIMARY KEY (id),
    KEY idx_key (queue, okey, id)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS order_key_rows (
    okey VARBINARY(255) NOT NULL,
    n INT NOT NULL,
    PRIMARY KEY (okey)
) ENGINE=InnoDB;
