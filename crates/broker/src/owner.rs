//! The default lease-owner id: host, process and a random part, unique per broker.

/// `host-pid-random`, unique for each call.
pub(crate) fn default_owner_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}-{}-{:08x}", std::process::id(), fastrand::u32(..))
}
