//! Tracing: every handler call runs in a `handle` span naming its stream, shard, sequence
//! number and partition key, and errors are logged with their whole source chain.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, Publisher, RetryPolicy, StartAt};

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An error with a cause, as a database client's would be.
#[derive(Debug)]
struct Outer(std::io::Error);

impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("could not store the order")
    }
}

impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn handler_calls_run_in_a_span_and_errors_show_their_cause() {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 1).unwrap();
    let stored = Publisher::new(kinesis.clone(), "orders")
        .put("customer-7", "order")
        .await
        .unwrap();
    let mut broker = Broker::builder().kinesis(kinesis).build().unwrap();
    broker
        .subscribe("orders")
        .start_at(StartAt::TrimHorizon)
        .retry(RetryPolicy::default().max_attempts(2).then_skip())
        .handle(|_d: Delivery| async {
            tracing::info!("storing");
            Err::<(), _>(Outer(std::io::Error::other("connection reset by peer")))
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    running.shutdown().await;

    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let storing = text
        .lines()
        .find(|l| l.contains("storing"))
        .unwrap_or_else(|| panic!("{text}"));
    for field in [
        "stream=\"orders\"".to_owned(),
        format!("shard=\"{}\"", stored.shard),
        format!("sequence=\"{}\"", stored.sequence),
        "partition_key=\"customer-7\"".to_owned(),
    ] {
        assert!(storing.contains(&field), "{field} in {storing}");
    }
    let retried = text
        .lines()
        .find(|l| l.contains("waits for its next attempt"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        retried.contains("could not store the order: connection reset by peer"),
        "the cause is logged: {retried}"
    );
}
