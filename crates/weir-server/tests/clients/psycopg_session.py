"""A Python application's session with `weir serve`, through psycopg 3 (run by tests/psycopg.rs).

Prepared statements with parameters (psycopg binds them server-side), a transaction block as
psycopg opens one outside autocommit, a one-shot query over a maintained view, and a
subscription pulled through a cursor. Prints one line per check; the Rust test compares them.
"""

import sys

import psycopg

port = int(sys.argv[1])
conninfo = f"host=127.0.0.1 port={port} user=weir dbname=weir"

with psycopg.connect(conninfo, autocommit=True) as conn:
    conn.execute("CREATE STREAM bids (item VARCHAR, price BIGINT, t BIGINT, WATERMARK FOR t AS t)")
    conn.execute(
        "CREATE VIEW totals AS SELECT item, SUM(price) AS total FROM bids [UNBOUNDED] GROUP BY item"
    )
    conn.execute("DECLARE c CURSOR FOR SUBSCRIBE (SELECT ISTREAM item, price FROM bids)")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO bids VALUES (%s, %s, %s)",
            [("a", 10, 1), ("b", 3, 2), ("it's", 12, 3)],
        )
    conn.execute("CLOSE bids")
    rows = conn.execute(
        "SELECT item, total FROM totals WHERE total >= %s ORDER BY item", (10,)
    ).fetchall()
    print("view", rows)
    changes = conn.execute("FETCH ALL c").fetchall()
    print("changes", [(t, d, item, price) for (t, d, item, price) in changes])

# Outside autocommit psycopg wraps statements in BEGIN ... COMMIT.
with psycopg.connect(conninfo) as conn:
    status = conn.execute("SHOW weir_running_queries").fetchone()[0]
    conn.commit()
    print("running", status)
