//! Hang guards: how long a test waits for what an idle machine does in a given time before
//! it gives up.
//!
//! The integration tests assert behaviour, never speed (the speed targets live in the
//! benchmarks, the time bounds in the simulation's paused clock): a wait's limit only keeps a
//! broken test from hanging. CI runs four binaries at once on two cores beside both emulators
//! and the Java KCL, and has been seen to take three times as long as an idle machine
//! (`fault_network` 195 s against 68 s, `balance_dynamo` 64 s against 17 s), so every limit
//! is [`PATIENCE`] times what an idle machine needs. `INTEG_PATIENCE` overrides the factor.

use std::time::Duration;

/// The factor by which a wait's limit exceeds what an idle machine needs.
pub const PATIENCE: u32 = 5;

/// The limit for a wait that takes `expected` on an idle machine.
pub fn patience(expected: Duration) -> Duration {
    let factor = std::env::var("INTEG_PATIENCE")
        .ok()
        .and_then(|f| f.parse::<u32>().ok())
        .filter(|f| *f > 0)
        .unwrap_or(PATIENCE);
    expected * factor
}
