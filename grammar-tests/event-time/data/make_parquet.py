"""Writes the Parquet files of ../parquet.slt with DuckDB, a Parquet writer other than the
one Weir uses, so the tests read files as another engine makes them. Run it again (with
`pip install duckdb`) only to change them: python3 make_parquet.py"""
import duckdb

con = duckdb.connect()

# Bids: the event time as a Parquet TIMESTAMP, the auction as a 32-bit INTEGER, the price as
# text (one value is not a number), a column the stream does not declare, a row without an
# event time, and a row late by the watermark (ts - 1 second). Snappy, DuckDB's default.
con.execute("""
COPY (
  SELECT * FROM (VALUES
    (TIMESTAMP '2024-01-01 00:00:01', 1::INTEGER, '10', 'first'),
    (TIMESTAMP '2024-01-01 00:00:02', 2::INTEGER, '20', 'second'),
    (TIMESTAMP '2024-01-01 00:00:03', 1::INTEGER, 'x',  'bad price'),
    (NULL,                            3::INTEGER, '5',  'no time'),
    (TIMESTAMP '2024-01-01 00:00:05', 2::INTEGER, '30', 'third'),
    (TIMESTAMP '2024-01-01 00:00:02', 9::INTEGER, '1',  'late'),
    (TIMESTAMP '2024-01-01 00:00:06', 1::INTEGER, '40', 'fourth')
  ) AS t(ts, auction, price, note)
) TO 'bids.parquet' (FORMAT parquet)
""")

# Auctions for a table: zstd, with the columns in another order and capitalised names.
con.execute("""
COPY (
  SELECT * FROM (VALUES
    (50::BIGINT, 'lamp', 1::BIGINT),
    (80::BIGINT, 'chair', 2::BIGINT),
    (120::BIGINT, 'desk', 3::BIGINT)
  ) AS t("Reserve", "Title", "Id")
) TO 'auctions.parquet' (FORMAT parquet, COMPRESSION zstd)
""")

# More auctions for COPY, gzip-compressed.
con.execute("""
COPY (SELECT 4::BIGINT AS id, 'stool' AS title, 10::BIGINT AS reserve)
TO 'more_auctions.parquet' (FORMAT parquet, COMPRESSION gzip)
""")

# Brotli, a codec Weir does not build: refused by name.
con.execute("""
COPY (SELECT 5::BIGINT AS id, 'sofa' AS title, 300::BIGINT AS reserve)
TO 'auctions_brotli.parquet' (FORMAT parquet, COMPRESSION brotli)
""")
