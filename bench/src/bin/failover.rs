//! Figure 4: failover on kinesis-local + moto with default timings (lease 10 s, renew 3 s).
//! Graceful: time from one broker's `shutdown()` returning to the other holding every shard.
//! Crash: a second broker runs in a child process; after the two balance, the child is killed
//! with SIGKILL; time until the survivor holds every shard.
//!
//! Needs `AWS_ENDPOINT_URL_KINESIS` and `AWS_ENDPOINT_URL_DYNAMODB` (`cargo xtask bench`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kinesis_bench::figure;
use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, RunningBroker, StartAt};
use kinesis_integ::{
    create_stream, kinesis_client, put_records, sdk_config_for, unique_account, unique_name,
};

const SHARDS: usize = 4;

fn broker(config: &aws_config::SdkConfig, table: &str, stream: &str, owner: &str) -> Broker {
    let mut broker = Broker::builder()
        .sdk_config(config)
        .lease_store(DynamoLeaseStore::new(config, table))
        .owner_id(owner)
        .build()
        .expect("broker");
    broker
        .subscribe(stream)
        .start_at(StartAt::TrimHorizon)
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker
}

async fn until_holding(
    broker: &RunningBroker,
    stream: &str,
    n: usize,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    while broker.stats().shards(stream).len() != n {
        assert!(
            started.elapsed() < limit,
            "held {} of {n} after {limit:?}",
            broker.stats().shards(stream).len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = kinesis_bench::runtime();
    if let [flag, account, table, stream] = &args[..] {
        if flag == "--child" {
            // The broker that gets killed: runs until SIGKILL.
            runtime.block_on(async {
                let config = sdk_config_for(account).await;
                let _running = broker(&config, table, stream, "child")
                    .start()
                    .await
                    .expect("start");
                println!("child running");
                std::future::pending::<()>().await;
            });
            return;
        }
    }
    runtime.block_on(async {
        let account = unique_account();
        let (config, client) = kinesis_client(&account).await;
        let stream = unique_name("failover");
        create_stream(&client, &stream, SHARDS as i32).await;
        put_records(&client, &stream, 20, 0, 400).await;
        let table = unique_name("failover-leases");
        DynamoLeaseStore::new(&config, &table)
            .ensure_table()
            .await
            .expect("table");

        // Graceful.
        let a = broker(&config, &table, &stream, "a")
            .start()
            .await
            .expect("start a");
        until_holding(&a, &stream, SHARDS, Duration::from_secs(20)).await;
        let b = broker(&config, &table, &stream, "b")
            .start()
            .await
            .expect("start b");
        until_holding(&b, &stream, SHARDS / 2, Duration::from_secs(60)).await;
        a.shutdown().await;
        let graceful = until_holding(&b, &stream, SHARDS, Duration::from_secs(30)).await;
        println!("graceful: b held all {SHARDS} shards {graceful:.2?} after a's shutdown returned");

        // Crash.
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args(["--child", &account, &table, &stream])
            .stdout(Stdio::null())
            .spawn()
            .expect("child");
        until_holding(&b, &stream, SHARDS / 2, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_secs(4)).await; // at least one renewal on each side
        child.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix
        let killed = Instant::now();
        child.wait().expect("reap");
        until_holding(&b, &stream, SHARDS, Duration::from_secs(60)).await;
        let crash = killed.elapsed();
        println!("crash: b held all {SHARDS} shards {crash:.2?} after the SIGKILL");
        b.shutdown().await;
        figure(
            "failover: graceful shutdown -> other holds all",
            &format!("{:.2} s", graceful.as_secs_f64()),
            "<= 1 s",
            Some(graceful <= Duration::from_secs(1)),
        );
        figure(
            "failover: SIGKILL -> takeover",
            &format!("{:.2} s", crash.as_secs_f64()),
            "<= 13 s",
            Some(crash <= Duration::from_secs(13)),
        );
    });
}
