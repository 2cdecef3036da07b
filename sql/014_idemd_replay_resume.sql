-- 014_idemd_replay_resume.sql: where each replayed letter stands (sending, confirmed, acked) and which letter it was, so that a replay cut short goes on where it stopped.
--
-- idemctl dlq replay writes a letter's idemd_replay row (state 'sending')
-- before its copy is published, sets 'confirmed' once the broker confirmed
-- the copy (in the transaction that clears its attempts row) and 'acked'
-- once the dead letter is acked. fingerprint is the SHA-256 of the dead
-- letter as it lies in the queue (body, properties and headers but the
-- broker's x-delivery-count and x-acquired-count), so that a rerun knows it: a letter still in the queue
-- whose row says 'confirmed' is acked without a second copy
-- (docs/operating.md, "Replaying a large dead letter queue"). Rows written
-- before this file have neither: state 'acked', fingerprint NULL. Apply
-- sql/013_idemd_replay.sql first. Written without ADD COLUMN IF NOT EXISTS
-- so that MySQL runs it too. Safe to apply more than once.
SET @idemd_sql = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE idemd_replay ADD COLUMN state VARCHAR(16) NOT NULL DEFAULT ''acked'' AFTER forced, ADD COLUMN fingerprint BINARY(32) NULL AFTER state, ADD KEY idx_fingerprint (fingerprint)',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idemd_replay' AND COLUMN_NAME = 'state');
PREPARE idemd_stmt FROM @idemd_sql;
EXECUTE idemd_stmt;
DEALLOCATE PREPARE idemd_stmt;
