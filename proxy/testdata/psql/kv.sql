-- psql through the keyspace router (proxy/keyspace_clients_test.go).
-- Keyspace kv: keys below 100 are partition p1's, the rest p2's.
\set ON_ERROR_STOP 1
\pset footer off

-- One row on each partition, each statement on its own.
INSERT INTO kv (k, v) VALUES (1, 'one');
INSERT INTO kv (k, v) VALUES (101, 'hundred and one');

-- A block writing on both partitions commits with two-phase commit.
BEGIN;
UPDATE kv SET v = v || '+' WHERE k = 1;
UPDATE kv SET v = v || '+' WHERE k = 101;
INSERT INTO kv (k, v) VALUES (2, 'two');
INSERT INTO kv (k, v) VALUES (102, 'hundred and two');
COMMIT;

-- A block rolled back on both leaves nothing.
BEGIN;
INSERT INTO kv (k, v) VALUES (3, 'rolled back');
INSERT INTO kv (k, v) VALUES (103, 'rolled back');
ROLLBACK;

-- A read over both partitions, merged in key order.
SELECT k, v FROM kv WHERE k IN (102, 1, 101, 2, 3, 103) ORDER BY k;
-- An array literal: the owners of its elements.
SELECT k FROM kv WHERE k = ANY('{101,2}') ORDER BY k DESC;

-- SET sluice.key routes a statement that names no key.
SET sluice.key = 150;
INSERT INTO kv VALUES (150, 'by the hint');
SELECT v FROM kv WHERE k = 150;

-- Meta-commands: catalog queries touch no keyspace table, so the first
-- partition answers them.
\dt
\d kv

-- A statement without its key is refused; the session goes on.
\set ON_ERROR_STOP 0
\set VERBOSITY verbose
UPDATE kv SET v = 'everywhere';
\echo LAST_ERROR_SQLSTATE :LAST_ERROR_SQLSTATE
\set VERBOSITY default
\set ON_ERROR_STOP 1
SELECT k, v FROM kv WHERE k = 1;

-- An error inside a block fails it; ROLLBACK ends it on every partition.
\set ON_ERROR_STOP 0
BEGIN;
UPDATE kv SET v = 'lost' WHERE k = 2;
UPDATE kv SET v = 'lost' WHERE k = 102;
SELECT 1 / 0 FROM kv WHERE k = 2;
UPDATE kv SET v = 'ignored' WHERE k = 2;
ROLLBACK;
\set ON_ERROR_STOP 1
SELECT k, v FROM kv WHERE k IN (2, 102) ORDER BY k DESC;
