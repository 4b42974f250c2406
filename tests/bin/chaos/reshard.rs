//! Resharding the campaign's stream while it runs, and reading back its family tree of shards
//! for the parents-first check.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_kinesis::types::Shard;

use crate::schedule::Reshard;

/// At most this many open shards: past it, a drawn split becomes a merge.
const MOST_OPEN: usize = 16;

/// Every shard of the stream, open and closed, by paged ListShards.
pub(crate) async fn all_shards(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<Vec<Shard>, String> {
    let mut shards = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let call = match &token {
            Some(t) => client.list_shards().next_token(t),
            None => client.list_shards().stream_name(stream),
        };
        let out = call
            .send()
            .await
            .map_err(|e| format!("ListShards of {stream}: {e}"))?;
        shards.extend(out.shards().iter().cloned());
        match out.next_token() {
            Some(t) => token = Some(t.to_owned()),
            None => return Ok(shards),
        }
    }
}

/// Each shard's parents (one for a split's child, two for a merge's).
pub(crate) fn parents(shards: &[Shard]) -> HashMap<String, Vec<String>> {
    shards
        .iter()
        .map(|s| {
            let parents = [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                .into_iter()
                .flatten()
                .map(str::to_owned)
                .collect();
            (s.shard_id().to_owned(), parents)
        })
        .collect()
}

fn hash_range(shard: &Shard) -> Option<(u128, u128)> {
    let range = shard.hash_key_range()?;
    Some((
        range.starting_hash_key().parse().ok()?,
        range.ending_hash_key().parse().ok()?,
    ))
}

/// How long a split or merge, with the wait for the stream to be ACTIVE again, may take.
const RESHARD_LIMIT: Duration = Duration::from_secs(60);

/// Splits or merges as drawn: the open shard furthest `behind` (acknowledged records not
/// handled yet), among equals the drawn one; a merge takes it with its neighbour, on its right
/// (on its left for the last). `Ok` says what was done, or why nothing could be (no shard wide
/// enough); `Err` is a call that failed or took over a minute: the runner reports it as a
/// violation, since the seed then checked less than it drew.
pub(crate) async fn reshard(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    drawn: &Reshard,
    behind: &HashMap<String, usize>,
) -> Result<String, String> {
    tokio::time::timeout(RESHARD_LIMIT, reshard_now(client, stream, drawn, behind))
        .await
        .map_err(|_| format!("a reshard of {stream} took over {RESHARD_LIMIT:?}"))?
}

async fn reshard_now(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    drawn: &Reshard,
    behind: &HashMap<String, usize>,
) -> Result<String, String> {
    let shards = all_shards(client, stream).await?;
    // Open shards tile the hash space: sorted by their first hash key, neighbours are adjacent.
    let mut open: Vec<(u128, u128, String)> = shards
        .iter()
        .filter(|s| {
            s.sequence_number_range()
                .is_none_or(|r| r.ending_sequence_number().is_none())
        })
        .filter_map(|s| {
            let (start, end) = hash_range(s)?;
            Some((start, end, s.shard_id().to_owned()))
        })
        .collect();
    open.sort();
    if open.is_empty() {
        return Err(format!("{stream} lists no open shard"));
    }
    let split = (drawn.split || open.len() < 2) && open.len() < MOST_OPEN;
    // The shard furthest behind; among equals, the drawn one or the next after it.
    let lag = |i: usize| behind.get(&open[i].2).copied().unwrap_or(0);
    let first = drawn.pick % open.len();
    let candidates = (0..open.len()).map(|k| (first + k) % open.len());
    let done = if split {
        let Some(i) = candidates
            .filter(|i| open[*i].1 > open[*i].0)
            .max_by_key(|i| {
                (
                    lag(*i),
                    std::cmp::Reverse((*i + open.len() - first) % open.len()),
                )
            })
        else {
            return Ok("no reshard: no open shard wide enough to split".to_owned());
        };
        let (start, end, id) = &open[i];
        let at = start + (end - start) / 2 + 1;
        client
            .split_shard()
            .stream_name(stream)
            .shard_to_split(id)
            .new_starting_hash_key(at.to_string())
            .send()
            .await
            .map(|_| format!("split {id} ({} records behind) at {at}", lag(i)))
            .map_err(|e| format!("split of {id}: {e}"))
    } else {
        let i = candidates
            .max_by_key(|i| {
                (
                    lag(*i),
                    std::cmp::Reverse((*i + open.len() - first) % open.len()),
                )
            })
            .unwrap_or(0);
        // With its right-hand neighbour, or its left-hand one for the last.
        let i = i.min(open.len() - 2);
        let (a, b) = (&open[i].2, &open[i + 1].2);
        client
            .merge_shards()
            .stream_name(stream)
            .shard_to_merge(a)
            .adjacent_shard_to_merge(b)
            .send()
            .await
            .map(|_| {
                format!(
                    "merged {a} and {b} ({} and {} records behind)",
                    lag(i),
                    lag(i + 1)
                )
            })
            .map_err(|e| format!("merge of {a} and {b}: {e}"))
    };
    let what = done?;
    wait_active(client, stream).await?;
    Ok(what)
}

/// Waits for the stream to be ACTIVE again after a split or merge (bounded by the caller).
async fn wait_active(client: &aws_sdk_kinesis::Client, stream: &str) -> Result<(), String> {
    loop {
        let out = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .map_err(|e| format!("DescribeStreamSummary of {stream}: {e}"))?;
        let active = out
            .stream_description_summary()
            .is_some_and(|d| *d.stream_status() == aws_sdk_kinesis::types::StreamStatus::Active);
        if active {
            return Ok(());
        }
        // Orchestration: the emulator's status is polled.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
