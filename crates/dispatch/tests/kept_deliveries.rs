//! The memory of a delivery whose handler is done serves the next record its lane takes (a
//! reader makes each delivery as it numbers the record, and the handlers' loops hand the
//! memory back; the unit test in `delivery.rs` pins that the memory is the same): every
//! handler sees its own record (payload, key, sequence and its text, shard), and a delivery a
//! handler keeps (a clone) still shows its own record after hundreds more went through. Serial
//! and by key, fed as the reader feeds (`QuietFeed`), on tokio's paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kinesis_dispatch::{
    channel_for, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::new(format!("{}", 100 + n), None).expect("digits")
}

fn key(n: u64) -> String {
    format!("k{}", n % 5)
}

fn payload(n: u64) -> String {
    format!("{}#{n}", key(n))
}

#[tokio::test(start_paused = true)]
async fn a_delivery_a_handler_keeps_is_never_reused_for_another_record() {
    for workers in [Workers::Serial, Workers::ByKey(3)] {
        let config = DispatchConfig {
            workers,
            lane_capacity: 8,
            ..Default::default()
        };
        let (tx, rx) = channel_for(16, &config);
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (wrong, handled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (k, w, h) = (kept.clone(), wrong.clone(), handled.clone());
        let handler = Handler::one(move |d: Delivery| {
            let (k, w, h) = (k.clone(), w.clone(), h.clone());
            async move {
                let n = d.sequence().number().parse::<u64>().expect("number") - 100;
                let own = d.payload() == payload(n).as_bytes()
                    && d.partition_key() == key(n)
                    && d.shard() == "shard-0"
                    && d.sequence_text() == (100 + n).to_string();
                if !own {
                    w.fetch_add(1, Ordering::SeqCst);
                }
                h.fetch_add(1, Ordering::SeqCst);
                // Every third delivery is kept past its handler.
                if n % 3 == 0 {
                    k.lock().expect("kept").push((n, d.clone()));
                }
                Ok::<(), std::io::Error>(())
            }
        });
        let handle = Dispatcher::spawn(rx, handler, config).expect("dispatcher");
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        for page in 0..30u64 {
            let mut quiet = feed.quietly().expecting(10);
            for i in 0..10 {
                let n = page * 10 + i;
                quiet
                    .send(Record::new(payload(n), key(n), seq(n)))
                    .await
                    .expect("send");
            }
            quiet.flush();
        }
        tokio::time::timeout(std::time::Duration::from_secs(60), settlement.all_settled())
            .await
            .expect("every record settled");
        assert_eq!(handled.load(Ordering::SeqCst), 300, "{workers:?}");
        assert_eq!(
            wrong.load(Ordering::SeqCst),
            0,
            "{workers:?}: a handler saw another record"
        );
        let kept = std::mem::take(&mut *kept.lock().expect("kept"));
        assert_eq!(kept.len(), 100, "{workers:?}");
        for (n, d) in &kept {
            assert_eq!(d.payload(), payload(*n).as_bytes(), "{workers:?}");
            assert_eq!(d.partition_key(), key(*n), "{workers:?}");
            assert_eq!(d.sequence(), &seq(*n), "{workers:?}");
        }
        drop((feed, tx));
        handle.join().await;
    }
}
