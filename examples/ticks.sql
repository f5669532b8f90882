-- A tiny example on integer ticks, the style of the CQL papers. Run it with
--
--     cargo run -p weir-cli -- run examples/ticks.sql
--
-- Output lines start with [N], the number of the continuous query; _time is the tick.

-- Readings are stamped by the tick in column t; the watermark is the largest tick seen.
CREATE STREAM readings (sensor VARCHAR, temp BIGINT, t BIGINT, WATERMARK FOR t AS t);

-- [1] Readings over 30: a filter over a stream is a stream.
SELECT sensor, temp FROM readings WHERE temp > 30;

-- [2] Per sensor over the last 3 ticks: a relation, printed as +1/-1 changes.
SELECT sensor, COUNT(*) AS n, MAX(temp) AS hottest
FROM readings [RANGE 3]
GROUP BY sensor;

-- [3] DSTREAM: the readings as they leave a 2-tick window.
SELECT DSTREAM sensor, temp, t FROM readings [RANGE 2];

INSERT INTO readings VALUES ('a', 21, 1), ('b', 35, 1), ('a', 24, 2);
INSERT INTO readings VALUES ('b', 33, 4);

-- Nothing arrives at 5 or 6, but they are complete: windows move on.
ADVANCE readings TO 6;

-- End of input: every remaining instant is evaluated.
CLOSE readings;
