-- schema.sql: test-only tables: effects counts how often a handler's effect ran per (queue, message id).
CREATE TABLE IF NOT EXISTS effects (
    queue VARCHAR(128) NOT NULL,
    msg_id VARBINARY(255) NOT NULL,
    n INT NOT NULL,
    PRIMARY KEY (queue, msg_id)
) ENGINE=InnoDB;
