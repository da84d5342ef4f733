//! The native backend: namespaces + Landlock + seccomp, no daemon needed.
//! (Being built; see issue 4.)
