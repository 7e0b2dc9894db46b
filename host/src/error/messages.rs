//! The helpers that put [`Error`](super::Error)'s messages together: the phrases for an
//! optional rank or process, a driver version, a build's targets, an environment value,
//! and [`Error::PeerLost`](super::Error::PeerLost)'s whole message.

use std::time::Duration;

/// `, with rank N` where there is a rank.
pub(super) fn with_rank(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| format!(", with rank {r}"))
}

/// ` on rank N` where there is a rank.
pub(super) fn on_rank(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| format!(" on rank {r}"))
}

/// ` waiting for rank N` where there is a rank.
pub(super) fn waiting_for(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| format!(" waiting for rank {r}"))
}

/// `rank N` or `a peer`.
pub(super) fn from_rank(rank: Option<usize>) -> String {
    rank.map_or_else(|| "a peer".to_owned(), |r| format!("rank {r}"))
}

/// `pid P uid U`, or that the kernel did not say.
pub(super) fn process(pid: Option<u32>, uid: Option<u32>) -> String {
    match (pid, uid) {
        (Some(pid), Some(uid)) => format!("pid {pid} uid {uid}"),
        _ => "its credentials unreadable".to_owned(),
    }
}

/// `12.4` for the driver version 12040.
pub(super) fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// The targets a program was built with, or that it has none.
pub(super) fn built_targets(built: &[&str]) -> String {
    if built.is_empty() {
        "no GPU target (built on a machine without a GPU)".to_owned()
    } else {
        format!("the targets {}", built.join(", "))
    }
}

/// `is not set` or `is "VALUE"`.
pub(super) fn env_value(value: Option<&str>) -> String {
    value.map_or_else(|| "is not set".to_owned(), |v| format!("is {v:?}"))
}

/// [`Error::PeerLost`]'s message.
pub(super) fn peer_lost(rank: Option<usize>, waited: Duration) -> String {
    match rank {
        Some(rank) => format!(
            "rank {rank} left or was lost while this rank needed it (waited {waited:?}): find \
             why it stopped (its own error or log, or a return before the calls its peers \
             made); if it only started slowly, raise Config::timeout"
        ),
        None => format!(
            "a peer was lost or did not answer within {waited:?}: find why it stopped (its \
             own error or log); if it only started slowly, raise Config::timeout"
        ),
    }
}
