-- Bounded-memory answers over a click stream: replays dropped by a Bloom filter, distinct
-- visitors, the busiest pages and the median latency per 10-second window sliding by 5, a
-- reproducible sample, and an approximate lookup in a table of blocked users. Run it with
--
--     cargo run -p weir-cli -- run examples/sketches.sql
--
-- On a file this small every sketch is exact; on a day of clicks each keeps the memory its
-- parameters give (docs/sql.md states each one's error), where the exact queries keep every
-- distinct value.

-- Clicks, some delivered twice by an at-least-once upstream (the same id), up to 10 seconds
-- out of order.
CREATE STREAM clicks (
    id         BIGINT,
    user_id    BIGINT,
    page       VARCHAR,
    latency_ms BIGINT,
    ts         TIMESTAMP,
    WATERMARK FOR ts AS ts - INTERVAL '10' SECOND
) WITH (source = 'file', path = 'data/clicks.csv');

-- [1] Each click once: a replayed id is dropped (a Bloom filter of 10^6 ids, 0.1 % of new ids
-- taken for replays by mistake). The other queries read this view.
CREATE VIEW unique_clicks AS
SELECT * FROM clicks [DEDUPLICATE BY id CAPACITY 1000000 ERROR 0.001];
SELECT id, user_id, page FROM unique_clicks;

-- [2] Distinct visitors per window (HyperLogLog, 0.81 % standard error).
SELECT ISTREAM APPROX_COUNT_DISTINCT(user_id) AS visitors
FROM unique_clicks [RANGE 10 SECONDS SLIDE 5 SECONDS];

-- [3] The two busiest pages per window, with their counts (a Misra-Gries summary).
SELECT ISTREAM APPROX_TOP_K(page, 2) AS busiest
FROM unique_clicks [RANGE 10 SECONDS SLIDE 5 SECONDS];

-- [4] The median latency per window (a t-digest).
SELECT ISTREAM APPROX_MEDIAN(latency_ms) AS median_ms
FROM unique_clicks [RANGE 10 SECONDS SLIDE 5 SECONDS];

-- [5] Three clicks drawn uniformly from the whole stream, the same three on every run: each
-- shown when it enters the sample (a later one can displace it).
SELECT ISTREAM id, page FROM unique_clicks [SAMPLE 3 ROWS SEED 7];

-- [6] Clicks by blocked users, looked up as they arrive in a counting Bloom filter of the
-- table (no false negatives; at most 1 % of other users taken for blocked ones).
CREATE TABLE blocked (user_id BIGINT);
INSERT INTO blocked VALUES (13), (42);
SELECT user_id, page FROM unique_clicks
WHERE MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(user_id) FROM blocked), user_id);
