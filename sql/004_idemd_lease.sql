-- 004_idemd_lease.sql: leases that let exactly one idemd worker at a time run retention or reconcile.
--
-- One row per chore: "retention:<consumer>" (deleting old rows of
-- msg_id_record and idemd_attempt) and "reconcile:<queue>" (the handler's
-- reconcile() hook). Every worker of every idemd instance on this database
-- may ask for a chore; it runs only after a conditional UPDATE, committed on
-- its own, made it the owner:
--   UPDATE idemd_lease SET owner = ?, expires_at = NOW(3) + INTERVAL ? SECOND
--   WHERE name = ? AND due_at <= NOW(3) AND (owner = ? OR expires_at < NOW(3))
-- owner is "<host>:<pid>:<start ms>:<queue>#<n>", unique per worker process.
-- A run that ends sets due_at (when the chore is next due) and lets the lease
-- expire at once. A plain row with a conditional UPDATE, not GET_LOCK() or
-- SKIP LOCKED, because those are local to one server and Galera does not
-- replicate them. idemd inserts missing rows itself (INSERT IGNORE), so a
-- deleted row comes back at the next claim. Times are the database server's
-- clock. Safe to apply more than once.
CREATE TABLE IF NOT EXISTS idemd_lease (
    name VARBINARY(300) NOT NULL,
    owner VARBINARY(255) NOT NULL DEFAULT '',
    expires_at DATETIME(3) NOT NULL DEFAULT '2000-01-01 00:00:00.000',
    due_at DATETIME(3) NOT NULL DEFAULT '2000-01-01 00:00:00.000',
    PRIMARY KEY (name)
) ENGINE=InnoDB;
