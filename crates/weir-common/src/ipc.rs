//! Arrow IPC stream bytes: the one way Weir turns record batches into bytes and back, for
//! query state and checkpoints alike.
//!
//! [`write_stream`] writes one batch as a complete IPC stream (schema message, record batch,
//! end marker). [`read_stream`] reads any IPC stream and is safe on damaged bytes: before
//! Arrow's reader sees them, their framing is checked (every message lies within the bytes, so
//! a corrupt length never makes the reader allocate or read past the end), and a panic inside
//! the reader (it panics on some malformed schemas, e.g. an unknown type id) is turned into an
//! error. Errors are [`WeirError::Execution`] with a message about the bytes only; callers add
//! what the bytes were (a query's state, a checkpoint file).

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::error::{Result, WeirError};

/// `batch` as the bytes of an Arrow IPC stream holding it alone.
pub fn write_stream(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(buf)
}

/// The schema and the batches of Arrow IPC stream bytes. Errs, never panics, on bytes that are
/// not a well-formed stream (see the module docs).
pub fn read_stream(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    check_framing(bytes)?;
    let read = || -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let unreadable = |e| WeirError::exec(format!("unreadable Arrow IPC stream: {e}"));
        let reader =
            StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(unreadable)?;
        let schema = reader.schema();
        let batches = reader.collect::<std::result::Result<Vec<_>, _>>().map_err(unreadable)?;
        Ok((schema, batches))
    };
    std::panic::catch_unwind(read)
        .unwrap_or_else(|_| Err(WeirError::exec("malformed Arrow IPC stream (the reader gave up)")))
}

/// Checks that every message of IPC stream bytes lies within them: each message is the
/// continuation marker, a metadata length, the metadata (a flatbuffer, verified) and a body of
/// the length the metadata states; the stream ends with the end marker and nothing after it.
fn check_framing(bytes: &[u8]) -> Result<()> {
    let truncated = || WeirError::exec("truncated or malformed Arrow IPC stream");
    let mut at = 0usize;
    loop {
        let head = bytes.get(at..at.saturating_add(8)).ok_or_else(truncated)?;
        if head[..4] != [0xff; 4] {
            return Err(truncated());
        }
        let len = i32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        at += 8;
        if len == 0 {
            return if at == bytes.len() {
                Ok(())
            } else {
                Err(WeirError::exec("bytes after the end of the stream"))
            };
        }
        let len = usize::try_from(len).map_err(|_| truncated())?;
        let meta = bytes.get(at..at.saturating_add(len)).ok_or_else(truncated)?;
        let message = arrow::ipc::root_as_message(meta).map_err(|_| truncated())?;
        let body = usize::try_from(message.bodyLength()).map_err(|_| truncated())?;
        at = at.saturating_add(len).saturating_add(body);
        if at > bytes.len() {
            return Err(truncated());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            Arc::new(Int64Array::from(vec![Some(1), Some(2), None])),
        ];
        RecordBatch::try_new(schema, cols).expect("batch")
    }

    fn message(e: WeirError) -> String {
        match e {
            WeirError::Execution(m) => m,
            other => panic!("not an execution error: {other}"),
        }
    }

    #[test]
    fn a_batch_round_trips() {
        let b = batch();
        let (schema, batches) = read_stream(&write_stream(&b).expect("write")).expect("read");
        assert_eq!(schema, b.schema());
        assert_eq!(batches, [b]);
    }

    #[test]
    fn a_batch_without_rows_or_columns_round_trips() {
        let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
        let (schema, batches) = read_stream(&write_stream(&empty).expect("write")).expect("read");
        assert!(schema.fields().is_empty());
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = write_stream(&batch()).expect("write");
        for n in 0..bytes.len() {
            let err = read_stream(&bytes[..n]).expect_err("truncated");
            assert!(message(err).contains("Arrow IPC stream"), "truncated to {n}");
        }
    }

    #[test]
    fn damaged_bytes_are_errors_not_panics() {
        let bytes = write_stream(&batch()).expect("write");
        // Flip each byte in turn: some damage still reads (a value changes), none may panic
        // or read past the end.
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x5a;
            let _ = read_stream(&damaged);
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(
            message(read_stream(&trailing).expect_err("trailing")),
            "bytes after the end of the stream"
        );
        assert_eq!(
            message(read_stream(b"not arrow at all").expect_err("garbage")),
            "truncated or malformed Arrow IPC stream"
        );
    }
}
