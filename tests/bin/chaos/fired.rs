//! What fired, and when: the report's lines and the checks' input.

/// What fired, when (unix ms), for the checks and the report.
#[derive(Debug, Clone)]
pub(crate) enum Fired {
    /// A process that exited without being told to (a failed subscription, a panic).
    Died {
        process: String,
        at: u128,
        status: String,
    },
    Killed {
        process: String,
        at: u128,
    },
    Frozen {
        process: String,
        from: u128,
        to: u128,
    },
    Termed {
        process: String,
        at: u128,
        exited: Option<u128>,
    },
    Proxy {
        slot: usize,
        what: String,
        from: u128,
        to: u128,
    },
    /// The stream's shards changed (`what`: the split or merge, or why it could not be done).
    Resharded {
        what: String,
        at: u128,
    },
}

impl Fired {
    /// When it fired (unix ms), for the report's order.
    pub(crate) fn at(&self) -> u128 {
        match self {
            Fired::Died { at, .. }
            | Fired::Killed { at, .. }
            | Fired::Termed { at, .. }
            | Fired::Resharded { at, .. } => *at,
            Fired::Frozen { from, .. } | Fired::Proxy { from, .. } => *from,
        }
    }

    /// A line of the report, times relative to the run's start (unix ms `start`).
    pub(crate) fn describe(&self, start: u128) -> String {
        let rel = |t: u128| format!("{:.1} s", t.saturating_sub(start) as f64 / 1e3);
        match self {
            Fired::Died {
                process,
                at,
                status,
            } => format!("{} {process} EXITED on its own: {status}", rel(*at)),
            Fired::Killed { process, at } => format!("{} SIGKILL {process}", rel(*at)),
            Fired::Frozen { process, from, to } => {
                format!("{} SIGSTOP {process} until {}", rel(*from), rel(*to))
            }
            Fired::Termed {
                process,
                at,
                exited,
            } => format!(
                "{} SIGTERM {process}, exited {}",
                rel(*at),
                exited.map_or("NOT within the deadline".to_owned(), |e| format!(
                    "after {:.1} s",
                    (e - at) as f64 / 1e3
                ))
            ),
            Fired::Proxy {
                slot,
                what,
                from,
                to,
            } => format!("{} proxy of p{slot}: {what} until {}", rel(*from), rel(*to)),
            Fired::Resharded { what, at } => format!("{} {what}", rel(*at)),
        }
    }
}
