-- 010_idemd_key_since.sql: when each relay key took its role (see 007), added to a table made before this column existed.
--
-- Row id 1 of idemd_key signs idemd's headers; row 2 is a new key staged
-- (accepted, not yet signing), row 3 the key a promotion replaced (still
-- accepted until retired). idemctl key promote and key retire read since to
-- refuse a step taken before every worker has seen the one before it. A
-- table created by today's 007 has the column already: then this does
-- nothing. Written without ADD COLUMN IF NOT EXISTS so that MySQL runs it
-- too. Safe to apply more than once.
SET @idemd_sql = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE idemd_key ADD COLUMN since DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP AFTER k',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idemd_key' AND COLUMN_NAME = 'since');
PREPARE idemd_stmt FROM @idemd_sql;
EXECUTE idemd_stmt;
DEALLOCATE PREPARE idemd_stmt;
