-- Counters and push lanes.
--
-- {{counters}}, {{lanes}} and {{check}} are replaced by the quoted,
-- schema-qualified names of Config before this file runs; values never are
-- (every value in the store's statements is a bind parameter).

-- One row per counter. Window start and size are bigint milliseconds (no
-- 2038 overflow); counts are double precision (fractional hits, refunds).
-- key is bytea because PostgreSQL text cannot hold NUL or invalid UTF-8 and
-- the library stores every key byte-exact. The primary key serves every
-- read: GetCounters and Purge scan by its prefix (namespace, window_size,
-- window_start). fillfactor leaves room on each page for HOT updates of
-- count, which no index covers.
CREATE TABLE {{counters}} (
    namespace    text             NOT NULL,
    window_size  bigint           NOT NULL CHECK (window_size > 0),
    window_start bigint           NOT NULL,
    key          bytea            NOT NULL,
    count        double precision NOT NULL,
    PRIMARY KEY (namespace, window_size, window_start, key)
) WITH (fillfactor = 80);

-- The last batch applied per push lane (Batch.Node). seq is a uint64 kept
-- exact in numeric(20,0); updated_at (server clock) is when the lane last
-- applied a batch, for Purge. No index on updated_at: it would stop the HOT
-- updates every push makes, and Purge scans this small table hourly.
CREATE TABLE {{lanes}} (
    node       text          PRIMARY KEY,
    seq        numeric(20,0) NOT NULL CHECK (seq >= 0),
    updated_at timestamptz   NOT NULL DEFAULT now()
) WITH (fillfactor = 50);
