//! Figure 5: scale. One broker owning 1,000 shards of a `MemoryStream` at the tip, idle for
//! 30 s: resident memory and CPU share (of one core) over those 30 s.

use std::time::{Duration, Instant};

use kinesis_bench::{cpu_time, figure, rss_kib};
use kinesis_broker::{testing::MemoryStream, Broker, Delivery, StartAt};

const SHARDS: u32 = 1_000;

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        let kinesis = MemoryStream::new();
        kinesis.create_stream("scale", SHARDS).expect("stream");
        let mut broker = Broker::builder().kinesis(kinesis).build().expect("broker");
        broker
            .subscribe("scale")
            .start_at(StartAt::Latest)
            .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
            .expect("subscribe");
        let running = broker.start().await.expect("start");
        let started = Instant::now();
        while running.stats().shards("scale").len() < SHARDS as usize {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "not all shards taken"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("holding {SHARDS} shards after {:.1?}", started.elapsed());
        tokio::time::sleep(Duration::from_secs(5)).await; // settle into the idle rhythm
        let (cpu0, wall0) = (cpu_time(), Instant::now());
        tokio::time::sleep(Duration::from_secs(30)).await;
        let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());
        let rss_mib = rss_kib() as f64 / 1024.0;
        let share = 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();
        println!(
            "idle 30 s with {SHARDS} shards: RSS {rss_mib:.1} MiB, CPU {share:.2}% of one core"
        );
        figure(
            "scale: RSS, 1,000 idle shards",
            &format!("{rss_mib:.1} MiB"),
            "<= 64 MiB",
            Some(rss_mib <= 64.0),
        );
        figure(
            "scale: CPU, 1,000 idle shards",
            &format!("{share:.2}% of a core"),
            "< 5%",
            Some(share < 5.0),
        );
        running.shutdown().await;
    });
}
