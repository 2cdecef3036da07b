-- 007_idemd_key.sql: the installation's key for signing idemd's own retry headers.
--
-- idemd signs the headers it puts on its retry and dead-letter copies
-- (idemd-attempts, idemd-first-failure, idemd-original-*) with HMAC-SHA256
-- under this key, and believes them on a delivery only when the signature
-- checks out: a publisher cannot set idemd-attempts to skip retries. The
-- first worker to connect creates the one row: each offers 32 bytes of its own
-- from getrandom(2) with INSERT IGNORE, the first row stays; every instance on
-- the database shares it. Keep the
-- row secret like the data. Deleting it makes a new key: copies in flight
-- then count their attempts from 1 again. Row id 1 signs; rows 2 and 3 are
-- only accepted, during a key change (idemctl key stage / promote / retire,
-- see 009 and docs/security.md). Keys under 32 bytes are refused. Safe to
-- apply more than once.
CREATE TABLE IF NOT EXISTS idemd_key (
    id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
    k VARBINARY(64) NOT NULL,
    since DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB;
