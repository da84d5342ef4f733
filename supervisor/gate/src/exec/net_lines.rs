//! What a command's result says about the network wall: one line per host
//! it was refused, deduplicated (docs/INTERFACES.md "[network]"), so the
//! model reads why a connection failed and how it can be allowed.

use crate::host::Ctx;

/// Where the session's refusals stood before a command ran.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NetMark(u64);

pub(crate) fn mark(cx: &Ctx) -> NetMark {
    NetMark(cx.host.net_mark(&cx.session))
}

/// The lines for the refusals since `mark`, each on its own line after a
/// newline; empty when there were none.
pub(crate) fn refused_since(cx: &Ctx, mark: NetMark) -> String {
    let mut text = String::new();
    for line in cx.host.net_refusals(&cx.session, mark.0) {
        text.push('\n');
        text.push_str(&line);
    }
    text
}
