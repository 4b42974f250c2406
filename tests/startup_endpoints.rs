//! `start()` against real endpoints that do not answer yet, or never: a Kinesis port of
//! 127.0.0.1 closed at first and opened (forwarding to kinesis-local) a few seconds later lets
//! the start succeed; a DynamoDB port that never opens fails the start with the operation that
//! failed (`DescribeTable`, nothing was created) and the endpoint, once the start-up deadline
//! passed; a table with another key schema is named as found by `DescribeTable`.

use std::time::Duration;

use kinesis_broker::lease::LeaseError;
use kinesis_broker::{
    Broker, BrokerError, Delivery, DynamoLeaseError, DynamoLeaseStore, TableSetup,
};
use kinesis_integ::*;
use tokio::net::{TcpListener, TcpStream};

/// A port of 127.0.0.1 nobody listens on: bound, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// After `delay`, listens on `port` and forwards every connection to `upstream`
/// (`http://host:port`).
fn open_later(port: u16, upstream: String, delay: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // The scenario itself: the port opens a few seconds into the start.
        tokio::time::sleep(delay).await;
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        let target = upstream.trim_start_matches("http://").to_owned();
        loop {
            let (mut inbound, _) = listener.accept().await.expect("accept");
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

fn subscribed(mut broker: Broker, stream: &str) -> Broker {
    broker
        .subscribe(stream)
        .handle(|_: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker
}

#[tokio::test]
async fn a_kinesis_port_that_opens_after_a_few_seconds_lets_the_start_succeed() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("late-port");
    create_stream(&client, &stream, 1).await;
    let table = unique_name("late-port-leases");
    let port = closed_port();
    let late = format!("http://127.0.0.1:{port}");
    let forward = open_later(port, endpoint(Service::Kinesis), Duration::from_secs(3));
    let kinesis_config = sdk_config_via(&account, &late).await;
    let broker = subscribed(
        Broker::builder()
            .sdk_config(&kinesis_config)
            .dynamo_lease_table(
                DynamoLeaseStore::new(&config, &table),
                TableSetup::CreateIfMissing,
            )
            .build()
            .expect("build"),
        &stream,
    );
    let running = broker
        .start()
        .await
        .unwrap_or_else(|e| panic!("start should wait for the port: {e:?}"));
    // Reading through the port that opened: the shard is taken.
    let deadline = tokio::time::Instant::now() + patience(Duration::from_secs(30));
    while running.stats().shards(&stream).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no shard taken");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown().await;
    forward.abort();
}

#[tokio::test]
async fn a_dynamodb_port_that_never_opens_names_describe_table_and_the_endpoint() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("closed-port");
    create_stream(&client, &stream, 1).await;
    let closed = format!("http://127.0.0.1:{}", closed_port());
    let dynamo_config = sdk_config_via(&account, &closed).await;
    let broker = subscribed(
        Broker::builder()
            .sdk_config(&config)
            .dynamo_lease_table(
                DynamoLeaseStore::new(&dynamo_config, "never-leases"),
                TableSetup::CreateIfMissing,
            )
            .startup_deadline(Duration::from_secs(3))
            .build()
            .expect("build"),
        &stream,
    );
    match broker.start().await {
        Err(BrokerError::Unreachable {
            operation,
            endpoint,
            stream: named,
            attempts,
            ..
        }) => {
            assert_eq!(operation, "DescribeTable", "nothing was created");
            assert_eq!(endpoint, closed);
            assert_eq!(named, stream);
            assert!(attempts > 1, "retried: {attempts}");
        }
        Err(other) => panic!("{other}: {other:?}"),
        Ok(_) => panic!("started without a lease table"),
    }
}

#[tokio::test]
async fn a_table_with_another_key_is_reported_by_describe_table() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("wrong-key");
    create_stream(&client, &stream, 1).await;
    let table = unique_name("wrong-key-leases");
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    dynamo
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create a table with another key");
    for setup in [TableSetup::CreateIfMissing, TableSetup::MustExist] {
        let broker = subscribed(
            Broker::builder()
                .sdk_config(&config)
                .dynamo_lease_table(DynamoLeaseStore::new(&config, &table), setup)
                .build()
                .expect("build"),
            &stream,
        );
        let err = match broker.start().await {
            Err(err) => err,
            Ok(_) => panic!("started on a table with the wrong key"),
        };
        let BrokerError::LeaseTable { source, .. } = &err else {
            panic!("{err:?}");
        };
        match &**source {
            LeaseError::Refused {
                operation, source, ..
            } => {
                assert_eq!(*operation, "DescribeTable", "{setup:?}: {err:?}");
                let schema = source.downcast_ref::<DynamoLeaseError>();
                assert!(
                    matches!(schema, Some(DynamoLeaseError::WrongKeySchema { .. })),
                    "{setup:?}: {source:?}"
                );
            }
            other => panic!("{setup:?}: {other:?}"),
        }
    }
}
