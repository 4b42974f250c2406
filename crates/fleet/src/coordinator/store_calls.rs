//! The coordinator's store calls, each bounded: a store that hangs delays a round but never
//! stops the coordinator (nor its shutdown). A leaf the coordinator's jobs and the ring watch
//! all use.

use kinesis_lease_core::ErrorChain;

use crate::shared::Shared;

/// Deletes each row, fenced on the counter seen; a row written since stays. Returns the rows
/// whose delete failed (no answer, or an error): they may still stand.
pub(super) async fn delete_rows(
    shared: &Shared,
    rows: Vec<(kinesis_lease_core::LeaseKey, u64)>,
) -> Vec<kinesis_lease_core::LeaseKey> {
    let mut failed = Vec::new();
    for (key, counter) in rows {
        match bounded(shared, "delete", shared.store.delete(&key, counter)).await {
            Ok(true) => tracing::debug!(row = %key, "deleted a row nothing needs any more"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(row = %key, error = %ErrorChain(&error), "deleting a row failed; retrying later");
                failed.push(key);
            }
        }
    }
    failed
}

/// Runs a coordinator's store call for at most a lease duration: a store that hangs must not
/// stall the coordinator (nor its shutdown). A call cut short counts as failed; a take cut
/// short is adopted later if it landed.
pub(super) async fn bounded<T>(
    shared: &Shared,
    operation: &'static str,
    call: impl std::future::Future<Output = kinesis_lease_core::LeaseResult<T>>,
) -> kinesis_lease_core::LeaseResult<T> {
    tokio::time::timeout(shared.config.lease_duration, call)
        .await
        .unwrap_or_else(|_| {
            Err(kinesis_lease_core::LeaseError::Unavailable {
                operation,
                resource: shared.config.stream.clone(),
                source: "no answer within a lease duration".into(),
            })
        })
}

/// Tells `holder` through its member row that `row`, which it holds, was marked wanted: a
/// quiet keeper (see `quiet`) does not write its row until then. In a task of its own, off
/// the caller's path: a slow lease table must not delay a take round. When the poke does not
/// land (failed, or a store without pokes), the epoch is bumped instead: every instance lists
/// the rows at its next epoch read, and the listing rings the holder.
pub(super) fn poke_holder(
    shared: &std::sync::Arc<Shared>,
    row: &kinesis_lease_core::LeaseKey,
    holder: &str,
) {
    let Ok(member) = crate::member::member_key(row.stream(), holder) else {
        return;
    };
    let (shared, holder, about) = (shared.clone(), holder.to_owned(), row.clone());
    let poke = async move {
        let poked = bounded(&shared, "poke", shared.store.poke(&member, &about)).await;
        if !matches!(poked, Ok(true)) {
            tracing::warn!(%holder, poked = ?poked.as_ref().map_err(ToString::to_string), "the holder asked was not poked; bumping the epoch so it learns from a listing");
            shared.bump_epoch("hand-over request not poked").await;
        }
    };
    tokio::spawn(tracing::Instrument::in_current_span(poke));
}
