//! Bad input against the real emulators: each gives a typed error naming the resource, or the
//! documented retry, and nothing is lost or skipped.

use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::{Broker, BrokerError, Delivery, DynamoLeaseStore, StartAt, TableSetup};
use kinesis_integ::*;

fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn ok(
) -> impl Fn(Delivery) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    |_d| std::future::ready(Ok(()))
}

#[tokio::test]
async fn a_missing_stream_is_named() {
    let (config, _) = kinesis_client(&unique_account()).await;
    let stream = unique_name("no-such-stream");
    let mut broker = Broker::builder().sdk_config(&config).build().unwrap();
    broker.subscribe(&stream).handle(ok()).unwrap();
    let err = broker.start().await.unwrap_err();
    assert!(
        matches!(&err, BrokerError::Stream { stream: s, .. } if *s == stream),
        "{}",
        chain(&err)
    );
    assert!(
        chain(&err).contains(&format!("`{stream}` does not exist")),
        "{}",
        chain(&err)
    );
}

#[tokio::test]
async fn an_invalid_stream_name_is_named() {
    let (config, _) = kinesis_client(&unique_account()).await;
    let mut broker = Broker::builder().sdk_config(&config).build().unwrap();
    let err = broker.subscribe("orders/2024").handle(ok()).unwrap_err();
    assert!(
        matches!(&err, BrokerError::Stream { stream, .. } if stream == "orders/2024"),
        "{}",
        chain(&err)
    );
    assert!(err.source().is_some());
}

#[tokio::test]
async fn a_missing_table_without_ensure_is_named() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("s");
    create_stream(&client, &stream, 1).await;
    let table = unique_name("missing-table");
    let dynamo = sdk_config(Service::Dynamodb).await;
    let mut broker = Broker::builder()
        .sdk_config(&config)
        .dynamo_lease_table(
            DynamoLeaseStore::new(&dynamo, &table),
            TableSetup::MustExist,
        )
        .build()
        .unwrap();
    broker.subscribe(&stream).handle(ok()).unwrap();
    let err = broker.start().await.unwrap_err();
    assert!(
        matches!(&err, BrokerError::LeaseTable { .. }),
        "{}",
        chain(&err)
    );
    assert!(
        chain(&err).contains(&format!("lease table `{table}` does not exist")),
        "{}",
        chain(&err)
    );
}

#[tokio::test]
async fn a_table_with_the_wrong_key_is_named() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("s");
    create_stream(&client, &stream, 1).await;
    let dynamo = sdk_config(Service::Dynamodb).await;
    let table = unique_name("wrong-key");
    aws_sdk_dynamodb::Client::new(&dynamo)
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    for setup in [TableSetup::CreateIfMissing, TableSetup::MustExist] {
        let mut broker = Broker::builder()
            .sdk_config(&config)
            .dynamo_lease_table(DynamoLeaseStore::new(&dynamo, &table), setup)
            .build()
            .unwrap();
        broker.subscribe(&stream).handle(ok()).unwrap();
        let err = broker.start().await.unwrap_err();
        let text = chain(&err);
        assert!(
            text.contains(&format!("lease table `{table}` has the wrong key schema")),
            "{text}"
        );
        assert!(text.contains("pk HASH (S)"), "{text}");
    }
}

/// A handler that panics on one record: the documented retry handles it; nothing is lost or
/// skipped, and the service keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_and_nothing_is_lost() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("panics");
    create_stream(&client, &stream, 2).await;
    put_records(&client, &stream, 10, 0, 200).await;
    let log = Log::default();
    let panics = Arc::new(AtomicUsize::new(0));
    let mut broker = Broker::builder()
        .sdk_config(&config)
        .poll_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let (l, p) = (log.clone(), panics.clone());
    broker
        .subscribe(&stream)
        .start_at(StartAt::TrimHorizon)
        .retry(
            kinesis_broker::RetryPolicy::default()
                .backoff(Duration::from_millis(50), Duration::from_millis(200)),
        )
        .workers(2)
        .by_key()
        .handle(move |d: Delivery| {
            let (l, p) = (l.clone(), p.clone());
            async move {
                let text = String::from_utf8_lossy(d.payload()).into_owned();
                if text == "key-7#77" && p.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("handler bug on {text}");
                }
                l.lock().unwrap().push((
                    "a".into(),
                    d.shard().into(),
                    d.partition_key().into(),
                    text,
                ));
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    wait_for_distinct(&log, 200, Duration::from_secs(30)).await;
    running.shutdown().await;
    assert_eq!(
        panics.load(Ordering::SeqCst),
        3,
        "two panics, then the record was handled"
    );
    assert_exactly_once_in_key_order(&log, 200);
}
