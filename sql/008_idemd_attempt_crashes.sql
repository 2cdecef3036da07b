-- 008_idemd_attempt_crashes.sql: the crash-loop guard's confirmed crashes (see 003), added to a table made before this column existed.
--
-- A table created by today's 003 has the column already: then this does
-- nothing. Written without ADD COLUMN IF NOT EXISTS so that MySQL runs it
-- too. Safe to apply more than once.
SET @idemd_sql = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE idemd_attempt ADD COLUMN crashes INT UNSIGNED NOT NULL DEFAULT 0 AFTER attempts',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idemd_attempt' AND COLUMN_NAME = 'crashes');
PREPARE idemd_stmt FROM @idemd_sql;
EXECUTE idemd_stmt;
DEALLOCATE PREPARE idemd_stmt;
