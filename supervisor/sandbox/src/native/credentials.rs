//! Step 6: drop to the session owner, with no capability left anywhere.
//!
//! Order matters: securebits and the bounding set need CAP_SETPCAP, so they
//! go first; then groups, gid, uid; then the capability sets are cleared
//! explicitly (a uid-0 session keeps them across setresuid(0), and in a user
//! namespace the uid never changes at all); PR_SET_PDEATHSIG last, because a
//! uid change clears it.

use nix::unistd::{Gid, Uid};

use super::SetupError;
use super::sys;

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> SetupError {
    SetupError {
        step: "credentials",
        detail: format!("{what}: {e}"),
    }
}

/// Drops every privilege and becomes `uid`/`gid`. `rootless`: inside a user
/// namespace where setgroups is denied and only our own ids are mapped.
pub(crate) fn drop_to(uid: u32, gid: u32, rootless: bool) -> Result<(), SetupError> {
    // No way back to capabilities: execve of anything as uid 0 grants none,
    // keep-caps stays off, ambient raising is impossible. All locked.
    let bits = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    sys::set_securebits(bits).map_err(|e| err("securebits", e))?;
    let mut cap = 0;
    while sys::capbset_drop(cap)
        .map_err(|e| err(format!("drop capability {cap} from the bounding set"), e))?
    {
        cap += 1;
    }
    sys::ambient_clear_all().map_err(|e| err("clear ambient capabilities", e))?;
    if !rootless {
        nix::unistd::setgroups(&[]).map_err(|e| err("setgroups([])", e))?;
    }
    let (g, u) = (Gid::from_raw(gid), Uid::from_raw(uid));
    nix::unistd::setresgid(g, g, g).map_err(|e| err(format!("setresgid({gid})"), e))?;
    nix::unistd::setresuid(u, u, u).map_err(|e| err(format!("setresuid({uid})"), e))?;
    sys::capset_clear_all().map_err(|e| err("clear capability sets", e))?;
    let ids = nix::unistd::getresuid().map_err(|e| err("getresuid", e))?;
    if ids.real != u || ids.effective != u || ids.saved != u {
        return Err(err("uid check", format!("still {ids:?}, wanted {uid}")));
    }
    Ok(())
}

/// Dies with the helper (set after the uid change, which clears it), and
/// keeps other processes of the same uid out of pid 1's memory and fds.
pub(crate) fn lock_init() -> Result<(), SetupError> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| err("PR_SET_PDEATHSIG", e))?;
    nix::sys::prctl::set_dumpable(false).map_err(|e| err("PR_SET_DUMPABLE", e))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| err("PR_SET_NO_NEW_PRIVS", e))?;
    Ok(())
}
