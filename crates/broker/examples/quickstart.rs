//! Quickstart: a lease taken, renewed, checkpointed and released on the in-process store.

use std::time::Duration;

use kinesis_broker::{Checkpoint, LeaseKey, LeaseStore, MemoryLeaseStore, Outcome, Take};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryLeaseStore::new();
    let key = LeaseKey::new("orders", "shardId-000000000000")?;
    let ttl = Duration::from_secs(10);
    let show = |what: &str, out: &Outcome| match out {
        Outcome::Written(l) => println!(
            "{what:<10} {key} owner={:?} counter={} checkpoint={:?}",
            l.owner,
            l.counter,
            l.checkpoint.as_ref().map(ToString::to_string)
        ),
        Outcome::Lost(lost) => println!("{what:<10} lost to {:?}", lost.holder),
    };
    show(
        "take",
        &store.take(&key, "instance-a", Take::new(ttl)).await?,
    );
    show(
        "steal",
        &store.take(&key, "instance-b", Take::new(ttl)).await?,
    );
    show("renew", &store.renew(&key, "instance-a", ttl, None).await?);
    let cp = Checkpoint::sequence("49590338271490256608559692538361571095921575989136588898")?;
    show(
        "checkpoint",
        &store.checkpoint(&key, "instance-a", &cp).await?,
    );
    show("release", &store.release(&key, "instance-a", None).await?);
    show(
        "take",
        &store.take(&key, "instance-b", Take::new(ttl)).await?,
    );
    Ok(())
}
