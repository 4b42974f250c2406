//! The keeper's decisions of quiet mode (`ReaderConfig::quiet_idle`, see `quiet`): when a tick
//! may skip its write, and when the keeper must write before its next tick. Apart from
//! `keeper` so that the keeper's file stays about renewing and handing over.

/// The keeper's decisions of quiet mode: when a tick may skip its write, and when it must write
/// before its next tick.
impl crate::keeper::Keeper {
    /// True when this quiet keeper has a poke of its member row to check.
    pub(crate) fn unchecked_poke(&self) -> bool {
        let Some(quiet) = &self.quiet else {
            return false;
        };
        let member = self.shared.member.borrow().clone();
        quiet.unchecked(&member)
    }

    /// True when this tick may skip writing the row: a quiet keeper with nothing to
    /// checkpoint, no poke to check, and no rows of a release before the roster in sight.
    pub(crate) fn may_skip(&self) -> bool {
        self.quiet.is_some()
            && !self.unchecked_poke()
            && !self
                .shared
                .legacy_rows
                .load(std::sync::atomic::Ordering::Relaxed)
            && self.cursor.due(&self.settlement).is_none()
    }

    /// Resolves when this keeper must write its row before its next tick: for a quiet keeper
    /// an unchecked poke, or a nudge (from a listing, or from its coordinator marking the row
    /// to give it away); for a keeper that writes every tick only such a nudge, so that a
    /// hand-over by load starts at once rather than at the next tick, up to a renew interval
    /// later (in the load simulation a second giver chose the same light member in that gap,
    /// before the first hand-over showed on its row: seed 102).
    pub(crate) async fn poked(&self) {
        if self.quiet.is_none() {
            tokio::time::sleep_until(self.poke_retry_at).await;
            return self.nudge.notified().await;
        }
        tokio::time::sleep_until(self.poke_retry_at).await;
        let mut member = self.shared.member.subscribe();
        loop {
            member.borrow_and_update();
            if self.unchecked_poke() {
                return;
            }
            tokio::select! {
                biased;
                () = self.nudge.notified() => return,
                changed = member.changed() => if changed.is_err() {
                    return std::future::pending().await;
                },
            }
        }
    }
}
