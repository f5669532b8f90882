-- A messy CSV file read into a stream: out of order within 2 seconds, one element far too
-- late, two unreadable rows. Nothing is lost: late elements go to bids$late, unreadable rows
-- to bids$errors, and SHOW STREAM STATS accounts for every row.
--   cargo run -p weir-cli -- run examples/messy_bids.sql
CREATE STREAM bids (auction BIGINT, bidder VARCHAR, price BIGINT, ts TIMESTAMP,
                    WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
  WITH (source = 'file', path = 'data/bids.csv', bad_rows = 'skip');

-- The best bid per auction over the last 5 seconds, as it changes.
SELECT ISTREAM auction, MAX(price) AS best FROM bids [RANGE 5 SECONDS] GROUP BY auction;
SELECT bidder, price, missed_watermark FROM bids$late;
SELECT line, field, reason FROM bids$errors;
