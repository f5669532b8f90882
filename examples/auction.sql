-- An auction site, the classic CQL example. Run it with
--
--     cargo run -p weir-cli -- run examples/auction.sql
--
-- Each continuous query below is numbered; its output lines start with [N]. A relation's
-- output is a list of changes: +1 a row appears, -1 it goes away. At the end of the script
-- every stream is closed, so the remaining instants are evaluated and printed.

-- Bids arrive stamped with their event time `ts`. The watermark trails the largest timestamp
-- seen by 2 seconds: a bid may arrive up to 2 seconds out of order.
CREATE STREAM bids (
    auction BIGINT,
    bidder  BIGINT,
    price   BIGINT,
    ts      TIMESTAMP,
    WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
);

-- The items on sale, with the lowest price their sellers accept.
CREATE TABLE auctions (id BIGINT, item VARCHAR, reserve BIGINT);
INSERT INTO auctions VALUES (1, 'bicycle', 150), (2, 'camera', 300), (3, 'guitar', 200);

-- [1] Activity: bids and top price per auction over the last 20 seconds, every 10 seconds.
--     A sliding window [t-20s, t) becomes current at its last instant, t minus 1 microsecond.
SELECT auction, COUNT(*) AS bids, MAX(price) AS top
FROM bids [RANGE 20 SECONDS SLIDE 10 SECONDS]
GROUP BY auction;

-- [2] New high bids: ISTREAM turns the relation "highest bid so far, per auction" into the
--     stream of rows it gains.
SELECT ISTREAM auction, MAX(price) AS high
FROM bids
GROUP BY auction;

-- [3] A stream-table join: each bid that meets its item's reserve, as it arrives.
SELECT ISTREAM a.item, b.bidder, b.price
FROM bids [NOW] b JOIN auctions a ON b.auction = a.id
WHERE b.price >= a.reserve;

-- [4] A filter over the unbounded stream is a stream itself (an implicit ISTREAM).
SELECT bidder, auction, price FROM bids WHERE price >= 400;

-- The first 15 seconds. Output for an instant appears once the watermark has passed it.
INSERT INTO bids VALUES
    (1, 10, 100, '2024-05-01 12:00:01'),
    (2, 11, 250, '2024-05-01 12:00:03'),
    (1, 12, 120, '2024-05-01 12:00:04'),
    (3, 13, 180, '2024-05-01 12:00:06'),
    (1, 10, 160, '2024-05-01 12:00:09'),
    (2, 14, 310, '2024-05-01 12:00:08'),   -- a second late: within the watermark's 2 seconds
    (3, 11, 210, '2024-05-01 12:00:12'),
    (1, 12, 175, '2024-05-01 12:00:14');

-- The next 15 seconds.
INSERT INTO bids VALUES
    (2, 11, 320, '2024-05-01 12:00:17'),
    (3, 13, 230, '2024-05-01 12:00:19'),
    (2, 14, 400, '2024-05-01 12:00:22'),
    (1, 10, 190, '2024-05-01 12:00:24'),
    (3, 15, 260, '2024-05-01 12:00:27');

-- The last half minute: bidding slows down, then a final rush on the camera.
INSERT INTO bids VALUES
    (1, 12, 200, '2024-05-01 12:00:35'),
    (3, 13, 280, '2024-05-01 12:00:41'),
    (2, 11, 420, '2024-05-01 12:00:52'),
    (2, 14, 450, '2024-05-01 12:00:55'),
    (2, 11, 480, '2024-05-01 12:00:57'),
    (1, 16, 210, '2024-05-01 12:00:59');

-- The auction closes at noon plus one minute: every instant up to it is complete.
ADVANCE bids TO TIMESTAMP '2024-05-01 12:01:00';
