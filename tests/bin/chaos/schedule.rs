//! What a seed draws: the faults and when, the resharding of the stream, and how each process
//! reads. The same seed draws the same plan (times relative to the run's start).

use std::time::Duration;

/// One fault of the schedule.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// SIGKILL, then a restart `down` later, with the same owner id or a new one.
    Kill {
        slot: usize,
        down: Duration,
        same_owner: bool,
    },
    /// SIGSTOP for `frozen`, then SIGCONT.
    Freeze { slot: usize, frozen: Duration },
    /// SIGTERM (a deploy), then a restart once it exited.
    Deploy { slot: usize, same_owner: bool },
    /// The slot's proxy to `service` answers `latency` late for `lasting`.
    Slow {
        slot: usize,
        service: &'static str,
        latency: Duration,
        lasting: Duration,
    },
    /// The slot's proxy to `service` refuses and cuts connections for `lasting`.
    Down {
        slot: usize,
        service: &'static str,
        lasting: Duration,
    },
    /// The slot's proxy answers a share of `service`'s calls with throttling or 500s.
    Errors {
        slot: usize,
        service: &'static str,
        throttle: bool,
        lasting: Duration,
    },
}

/// The schedule a seed draws: (seconds after the start, fault), one fault at a time. The kinds
/// come from a shuffled deck, so that a short run meets each kind before any repeats (a run of
/// 2 minutes has room for about six).
pub(crate) fn schedule(seed: u64, minutes: f64, processes: usize) -> Vec<(Duration, Fault)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut deck: Vec<u8> = Vec::new();
    let end = Duration::from_secs_f64(minutes * 60.0);
    let mut at = Duration::from_secs(12);
    let mut out = Vec::new();
    let secs = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_secs(rng.u64(lo..=hi));
    let service = |rng: &mut fastrand::Rng| if rng.bool() { "dynamodb" } else { "kinesis" };
    while at + Duration::from_secs(10) < end {
        let slot = rng.usize(..processes);
        if deck.is_empty() {
            deck = (0..6).collect();
            rng.shuffle(&mut deck);
        }
        let kind = deck.pop().unwrap_or(0);
        let fault = match kind {
            0 => Fault::Kill {
                slot,
                down: secs(&mut rng, 1, 8),
                same_owner: rng.bool(),
            },
            // Half the freezes near the lease (10 s), where a frozen member's shards are
            // taken while it may wake: the stop bound's edge.
            1 => Fault::Freeze {
                slot,
                frozen: if rng.bool() {
                    secs(&mut rng, 9, 16)
                } else {
                    secs(&mut rng, 1, 25)
                },
            },
            2 => Fault::Deploy {
                slot,
                same_owner: rng.bool(),
            },
            3 => Fault::Slow {
                slot,
                service: service(&mut rng),
                latency: Duration::from_millis(rng.u64(200..=3_000)),
                lasting: secs(&mut rng, 5, 20),
            },
            // Long enough, often, for the process's leases to lapse while it cannot reach
            // the store.
            4 => Fault::Down {
                slot,
                service: service(&mut rng),
                lasting: secs(&mut rng, 2, 20),
            },
            _ => Fault::Errors {
                slot,
                service: service(&mut rng),
                throttle: rng.bool(),
                lasting: secs(&mut rng, 5, 15),
            },
        };
        let took = match &fault {
            Fault::Kill { down, .. } => *down + Duration::from_secs(2),
            Fault::Freeze { frozen, .. } => *frozen,
            Fault::Deploy { .. } => Duration::from_secs(12),
            Fault::Slow { lasting, .. }
            | Fault::Down { lasting, .. }
            | Fault::Errors { lasting, .. } => *lasting,
        };
        out.push((at, fault));
        // The next fault once this one is over and the fleet had time to settle.
        at += took + secs(&mut rng, 3, 8);
    }
    out
}

/// A rolling deploy over `plan` (`CHAOS_PREVIOUS`, see the runner): every slot is deployed in
/// turn, the first 15 s in and the others spread over the first 60 % of the run, so processes
/// of both releases share the table for most of it while the drawn faults go on. Every other
/// slot keeps its owner id (the new process takes the old one's member row over).
pub(crate) fn rolling(
    minutes: f64,
    processes: usize,
    plan: Vec<(Duration, Fault)>,
) -> Vec<(Duration, Fault)> {
    let first = Duration::from_secs(15);
    let spread = Duration::from_secs_f64(minutes * 60.0 * 0.6).saturating_sub(first);
    let step = spread / u32::try_from(processes.max(1)).unwrap_or(u32::MAX);
    let mut out = plan;
    for slot in 0..processes {
        let at = first + step * u32::try_from(slot).unwrap_or(u32::MAX);
        out.push((
            at,
            Fault::Deploy {
                slot,
                same_owner: slot % 2 == 1,
            },
        ));
    }
    // Stable: a deploy drawn at the same second as a fault fires after it.
    out.sort_by_key(|(at, _)| *at);
    out
}

/// A change of the stream's shards, on a timeline of its own: faults go on meanwhile.
#[derive(Debug, Clone)]
pub(crate) struct Reshard {
    /// A split of an open shard at the middle of its hash range, or a merge of two adjacent
    /// open shards.
    pub(crate) split: bool,
    /// Among open shards equally far behind, which one (counted from the lowest hash key,
    /// modulo how many there are).
    pub(crate) pick: usize,
}

/// The seed's resharding: one in calm, 15 to 30 s in, and one 2 to 5 s into two in three of the
/// kills, freezes and outages, when the shards of the process hit fall behind: the shard split
/// or merged is then the one furthest behind, so its children are ready while it still has
/// records to hand out (where reading a child early shows). A split two draws in three, so
/// children are split again (two and three levels). None in the last 20 s, and none in a seed
/// whose processes read by fan-out: kinesis-local never signals a shard's end on that path
/// (../shared/EMULATORS.md), so a closed parent would never be finished there.
pub(crate) fn reshards(
    seed: u64,
    minutes: f64,
    plan: &[(Duration, Fault)],
    fan_out: &[bool],
) -> Vec<(Duration, Reshard)> {
    if fan_out.iter().any(|f| *f) {
        return Vec::new();
    }
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5e5a_4d00);
    let end = Duration::from_secs_f64(minutes * 60.0);
    let mut times = vec![Duration::from_secs(rng.u64(15..=30))];
    for (at, fault) in plan {
        let hits = matches!(
            fault,
            Fault::Kill { .. } | Fault::Freeze { .. } | Fault::Down { .. }
        );
        if hits && rng.u8(..3) != 0 {
            times.push(*at + Duration::from_secs(rng.u64(2..=5)));
        }
    }
    times.sort();
    times
        .into_iter()
        .filter(|at| *at + Duration::from_secs(20) < end)
        .map(|at| {
            (
                at,
                Reshard {
                    split: rng.u8(..3) != 0,
                    pick: rng.usize(..1_000),
                },
            )
        })
        .collect()
}

/// How each process reads: `true` for enhanced fan-out. One seed in four has fan-out
/// processes, each process with even odds (at least one); the others poll.
pub(crate) fn fan_out(seed: u64, processes: usize) -> Vec<bool> {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0xfa17_0e70);
    if rng.u8(..4) != 0 {
        return vec![false; processes];
    }
    let mut out: Vec<bool> = (0..processes).map(|_| rng.bool()).collect();
    if !out.iter().any(|f| *f) {
        out[rng.usize(..processes)] = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolling_deploy_deploys_every_slot_once_in_the_first_sixty_percent() {
        let drawn = schedule(7, 10.0, 3);
        let plan = rolling(10.0, 3, drawn.clone());
        assert_eq!(plan.len(), drawn.len() + 3);
        assert!(plan.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
        let added: Vec<(Duration, usize, bool)> = plan
            .iter()
            .filter(|(at, f)| {
                matches!(f, Fault::Deploy { .. }) && !drawn.iter().any(|(d, _)| d == at)
            })
            .map(|(at, f)| match f {
                Fault::Deploy { slot, same_owner } => (*at, *slot, *same_owner),
                _ => unreachable!(),
            })
            .collect();
        let slots: Vec<usize> = added.iter().map(|(_, s, _)| *s).collect();
        assert_eq!(slots, vec![0, 1, 2]);
        assert_eq!(added[0].0, Duration::from_secs(15));
        assert!(added
            .iter()
            .all(|(at, _, _)| *at < Duration::from_secs(360)));
        assert_eq!(
            added.iter().map(|(_, _, same)| *same).collect::<Vec<_>>(),
            vec![false, true, false]
        );
    }
}
