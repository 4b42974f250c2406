//! `FirstRead`: where a taken shard's first second goes, logged once per holding.
//!
//! A shard that changes hands is unprocessed from the moment its last holder stopped until
//! the new holder's handler starts on its first record. The lease decides most of that; what
//! comes after the take is the reader's to spend: opening the iterator (or subscribing),
//! the first page, and the first record's place in the subscription's channel. One `info`
//! line (`first read since the take`) gives each step's time since the take landed, so a slow
//! step shows in the logs of the instance that took the shard, and the `takeover` benchmark
//! measures the whole on a latency model.

use std::time::Duration;

use tokio::time::Instant;

/// The times of one holding's first open, first page and first queued record.
#[derive(Debug)]
pub(crate) struct FirstRead {
    taken: Instant,
    opened: Option<Duration>,
    page: Option<(Duration, usize)>,
    logged: bool,
}

impl FirstRead {
    /// A timeline starting when the take landed.
    pub(crate) fn since(taken: Instant) -> Self {
        Self {
            taken,
            opened: None,
            page: None,
            logged: false,
        }
    }

    /// The iterator opened, or the subscription was made.
    pub(crate) fn opened(&mut self) {
        self.opened.get_or_insert_with(|| self.taken.elapsed());
    }

    /// A page (or an event) of `records` arrived, `at_tip` when it says it is 0 ms behind
    /// (or says nothing). The first page with records is the one timed; an empty page at the
    /// tip before any ends the timeline (there was nothing to read). An empty page behind the
    /// tip (Kinesis skipping an empty stretch of the shard) does neither.
    pub(crate) fn page(&mut self, records: usize, at_tip: bool) {
        if self.logged || self.page.is_some() {
            return;
        }
        if records > 0 {
            self.page = Some((self.taken.elapsed(), records));
        } else if at_tip {
            self.page = Some((self.taken.elapsed(), 0));
            self.log(None);
        }
    }

    /// A record took its place in the channel; the first one ends the timeline.
    pub(crate) fn queued(&mut self) {
        if !self.logged {
            self.log(Some(self.taken.elapsed()));
        }
    }

    fn log(&mut self, queued: Option<Duration>) {
        self.logged = true;
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        tracing::info!(
            opened_ms = ms(self.opened),
            first_page_ms = ms(self.page.map(|p| p.0)),
            records = self.page.map_or(0, |p| p.1),
            queued_ms = ms(queued),
            "first read since the take"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_step_is_timed_once() {
        let mut first = FirstRead::since(Instant::now());
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.opened();
        tokio::time::sleep(Duration::from_millis(30)).await;
        first.opened();
        first.page(0, false);
        assert_eq!(
            first.page, None,
            "an empty page behind the tip is not the first read"
        );
        first.page(3, false);
        tokio::time::sleep(Duration::from_millis(5)).await;
        first.page(0, true);
        assert!(!first.logged, "the first page had records: not done");
        first.queued();
        assert!(first.logged);
        assert_eq!(first.opened, Some(Duration::from_millis(20)));
        assert_eq!(first.page, Some((Duration::from_millis(50), 3)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_first_page_ends_it() {
        let mut first = FirstRead::since(Instant::now());
        first.opened();
        first.page(0, true);
        assert!(first.logged);
    }
}
