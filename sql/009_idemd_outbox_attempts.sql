-- 009_idemd_outbox_attempts.sql: per-row attempts and backoff of onward messages the broker refuses, added to a table made by 005.
--
-- attempts: sends the broker refused (unroutable, exchange missing, nack);
-- next_at: not sent again before; failed_at: the first refusal; last_error:
-- the broker's words. After daemon.outbox_max_attempts the row is
-- dead-lettered to its source queue's dead-letter queue and deleted.
-- Written without ADD COLUMN IF NOT EXISTS so that MySQL runs it too. Safe
-- to apply more than once.
SET @idemd_sql = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE idemd_outbox ADD COLUMN attempts INT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN next_at DATETIME(3) NULL, ADD COLUMN failed_at DATETIME(3) NULL, ADD COLUMN last_error VARBINARY(512) NULL',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idemd_outbox' AND COLUMN_NAME = 'attempts');
PREPARE idemd_stmt FROM @idemd_sql;
EXECUTE idemd_stmt;
DEALLOCATE PREPARE idemd_stmt;
