//! The import's record in the lease table, read and written (see the crate's `record` module
//! for why): a later import that finds the KCL's leases where the record says writes nothing.

use std::time::Duration;

use kinesis_lease_core::{Holder, Lease, LeaseError, LeaseKey, Take};
use kinesis_stream_core::Shard;

use super::{store_error, KclImport, Target, WRITE_ATTEMPTS};
use crate::plan::Action;
use crate::record::{record_key, Imprint, RECORD_OWNER};
use crate::select::{KclMode, Selection};
use crate::{ImportError, ImportReport};

impl KclImport {
    /// The import's record of this stream and KCL table, if any.
    pub(super) async fn record(
        &self,
        target: Target<'_>,
        stream: &str,
    ) -> Result<Option<Lease>, ImportError> {
        let key = self.record_key(target, stream)?;
        self.retrying(stream, || async {
            target
                .store
                .read(&key)
                .await
                .map_err(|source| store_error(target, stream, source))
        })
        .await
    }

    fn record_key(&self, target: Target<'_>, stream: &str) -> Result<LeaseKey, ImportError> {
        record_key(stream, self.table.name(), self.stream_key.as_deref())
            .map_err(|source| store_error(target, stream, source))
    }

    /// Writes the record of an import that left the KCL's leases at `leases`.
    pub(super) async fn write_record(
        &self,
        target: Target<'_>,
        stream: &str,
        leases: &[crate::KclLease],
    ) -> Result<(), ImportError> {
        let key = self.record_key(target, stream)?;
        let imprint = Imprint::of(leases);
        let holder = Holder::new(RECORD_OWNER, "import");
        let store_error = |source: LeaseError| store_error(target, stream, source);
        for _ in 0..WRITE_ATTEMPTS {
            let landed = match self.record(target, stream).await? {
                Some(row) if Imprint::recorded(&row) == Some(imprint) => return Ok(()),
                None => {
                    let row = imprint.row(key.clone());
                    self.retrying(stream, || async {
                        target.store.create(&row).await.map_err(store_error)
                    })
                    .await?
                }
                Some(row) => {
                    let take = Take::fenced(Duration::ZERO, row.counter)
                        .with_reposition(imprint.to_string());
                    self.retrying(stream, || async {
                        target
                            .store
                            .take(&key, &holder, &take)
                            .await
                            .map_err(store_error)
                    })
                    .await?
                    .is_written()
                }
            };
            if landed {
                return Ok(());
            }
        }
        Err(ImportError::Refused {
            table: target.table.to_owned(),
            stream: stream.to_owned(),
            shard: key.to_string(),
            reason: format!(
                "the import's record kept changing over {WRITE_ATTEMPTS} attempts (another import \
                 ran at the same time?); the rows were imported, import again to record it"
            ),
        })
    }

    /// The report of an import that finds its own record with the KCL's leases unchanged (or
    /// the KCL's table gone): every step left as it is.
    pub(super) async fn imported_before(
        &self,
        target: Target<'_>,
        stream: &str,
        read: Option<(&Selection, &[Shard])>,
    ) -> Result<ImportReport, ImportError> {
        let mut report = match read {
            Some((selection, listed)) => {
                let mut report = self.report(target, stream, selection, listed, true).await?;
                for step in &mut report.steps {
                    step.action = Action::Leave;
                    step.after = step.before.clone();
                    step.note = "imported before, and the KCL has not written its leases since: \
                                 left as the brokers and operators keep it"
                        .into();
                }
                report.mode = selection.mode.clone();
                report
            }
            None => ImportReport::new(stream, self.table.name(), KclMode::SingleStream),
        };
        report.dry_run = false;
        report.imported_before = true;
        Ok(report)
    }

    /// Reads the KCL's table and the stream, unless the record says the KCL has not written
    /// its leases since the last import: then `Err` with that import's report.
    pub(super) async fn read_unless_imported(
        &self,
        target: Target<'_>,
        stream: &str,
    ) -> Result<Result<(Selection, Vec<Shard>), ImportReport>, ImportError> {
        self.check_settings()?;
        let recorded = self
            .record(target, stream)
            .await?
            .and_then(|row| Imprint::recorded(&row));
        let read = self.read_kcl(target, stream).await;
        Ok(match (read, recorded) {
            // The KCL's table no longer describes the stream (deleted after the cut-over, its
            // leases of the stream removed, its shards aged out of the stream): the recorded
            // import stands, nothing to import again.
            (
                Err(
                    error @ (ImportError::KclTableNotFound { .. }
                    | ImportError::NoLeases { .. }
                    | ImportError::ForeignShards { .. }),
                ),
                Some(_),
            ) => {
                let mut report = self.imported_before(target, stream, None).await?;
                report.warnings.push(format!(
                    "{error}; imported before: the recorded import stands, nothing written"
                ));
                Err(report)
            }
            (Ok((selection, listed)), Some(imprint))
                if imprint == Imprint::of(&selection.leases) =>
            {
                Err(self
                    .imported_before(target, stream, Some((&selection, &listed)))
                    .await?)
            }
            (read, _) => Ok(read?),
        })
    }
}
