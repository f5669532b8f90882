//! Embedding Weir: register a stream, a table and a view, subscribe to a continuous query, push
//! events, and read the output changes. Run with `cargo run -p weir --example embed`.

use std::sync::Arc;

use weir::arrow::array::{Int64Array, RecordBatch, StringArray};
use weir::arrow::datatypes::{DataType, Field, Schema};
use weir::{Engine, ExecResult, Value};

fn main() -> anyhow::Result<()> {
    let mut engine = Engine::new();
    engine.execute(
        "CREATE STREAM bids (auction BIGINT, bidder VARCHAR, price BIGINT, t BIGINT,
                             WATERMARK FOR t AS t - 2);
         CREATE TABLE auctions (id BIGINT, title VARCHAR);
         INSERT INTO auctions VALUES (1, 'lamp'), (2, 'chair') AT 0;
         -- The highest bid per auction over the last 10 ticks, as a relation.
         CREATE VIEW top AS
           SELECT a.title, MAX(b.price) AS best
           FROM bids [RANGE 10] b JOIN auctions a ON b.auction = a.id
           GROUP BY a.title",
    )?;

    // A continuous query: every change of the view, with its instant and diff.
    let top = engine.subscribe("top")?;
    // A derived stream: bids above 100 as they arrive.
    let big = engine.subscribe("SELECT ISTREAM auction, price FROM bids WHERE price > 100")?;

    // Push an Arrow batch (any order within the declared disorder of 2 ticks)...
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Utf8, true),
        Field::new("price", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 1])),
            Arc::new(StringArray::from(vec!["ann", "bob", "cy"])),
            Arc::new(Int64Array::from(vec![90, 120, 150])),
            Arc::new(Int64Array::from(vec![3, 1, 5])),
        ],
    )?;
    engine.push("bids", batch)?;
    // ...or rows of values.
    engine.push_rows(
        "bids",
        &[vec![
            Value::Int64(Some(2)),
            Value::from("dee"),
            Value::Int64(Some(130)),
            Value::Int64(Some(8)),
        ]],
    )?;
    // A heartbeat completes instant 20: the window slides and old bids expire.
    engine.advance("bids", 20)?;

    println!("top (relation changes):");
    for c in top.poll_changes()? {
        println!("  {c}");
    }
    println!("big (stream):");
    for c in big.poll_changes()? {
        println!("  {c}");
    }

    // A one-shot query reads the view's current contents.
    for r in engine.execute("SELECT * FROM top")? {
        if let ExecResult::Rows { batches, .. } = r {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            println!("top now: {rows} row(s) (every bid has expired by instant 20)");
        }
    }
    Ok(())
}
