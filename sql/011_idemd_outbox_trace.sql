-- 011_idemd_outbox_trace.sql: the W3C trace context of onward messages, captured when host->publish writes the row, added to a table made by 005.
--
-- traceparent: the onward message's own traceparent (same trace as its
-- source message, a new span id whose parent is idemd's processing span);
-- tracestate and baggage: the source message's, as it came. NULL when the
-- source had none, or when the handler set its own header of that name
-- (the handler's wins; it is in headers). Without these columns idemd puts
-- the context into the row's headers instead and says to apply this file.
-- Written without ADD COLUMN IF NOT EXISTS so that MySQL runs it too. Safe
-- to apply more than once.
SET @idemd_sql = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE idemd_outbox ADD COLUMN traceparent VARBINARY(55) NULL, ADD COLUMN tracestate BLOB NULL, ADD COLUMN baggage BLOB NULL',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idemd_outbox' AND COLUMN_NAME = 'traceparent');
PREPARE idemd_stmt FROM @idemd_sql;
EXECUTE idemd_stmt;
DEALLOCATE PREPARE idemd_stmt;
