//! The wire protocol between the supervisor and the resident exec agent: one
//! stream (a Unix socket), binary frames, both directions.
//!
//! A frame is `len: u32` (big-endian; the length of what follows), `type: u8`,
//! then the body. Integers are big-endian; a byte string is `len: u32` then
//! its bytes. Parsing is strict: a frame longer than [`MAX_FRAME`], an unknown
//! type, a field cut short, bytes left over, an empty argv or a NUL inside an
//! argv word, a cwd or an environment entry: each is an error, and the side
//! that reads it ends the connection. A command is started only from a
//! `Start` frame read whole and parsed whole.
//!
//! Output is flow-controlled per command: the agent may send
//! [`INITIAL_WINDOW`] bytes of a command's output before it must wait for
//! `Credit`; once the command's processes are gone it may send up to
//! [`DRAIN_MAX`] more of what is left in its pipes without credit.
//!
//! Pure data: no I/O, no clock. Both the agent and the supervisor use it, and
//! it is fuzzed from both ends.

use std::fmt;

/// Bumped whenever a frame's layout changes.
pub const VERSION: u32 = 1;
/// Largest frame (type byte and body), either direction.
pub const MAX_FRAME: usize = 1024 * 1024;
/// Largest piece of output or stdin in one frame (the size the agent gives
/// each command's pipes, so one read can take what the pipe holds).
pub const MAX_CHUNK: usize = 256 * 1024;
/// Output bytes a command may have in flight before the supervisor grants more.
pub const INITIAL_WINDOW: u32 = 1024 * 1024;
/// Output the agent may still send without credit after a command's processes
/// are gone (what was left in its pipes).
pub const DRAIN_MAX: u32 = 1024 * 1024;
/// Most argv words, and most environment entries, of one command.
pub const MAX_WORDS: usize = 65_536;

const HEADER: usize = 4;

/// Frame types. Supervisor to agent: 0x10-0x1f; agent to supervisor: 0x01,
/// 0x20-0x2f.
mod ty {
    pub const HELLO: u8 = 0x01;
    pub const START: u8 = 0x10;
    pub const STDIN: u8 = 0x11;
    pub const STDIN_EOF: u8 = 0x12;
    pub const KILL: u8 = 0x13;
    pub const CREDIT: u8 = 0x14;
    pub const STDOUT: u8 = 0x20;
    pub const STDERR: u8 = 0x21;
    pub const EXITED: u8 = 0x22;
    pub const SPAWN_FAILED: u8 = 0x23;
    pub const FATAL: u8 = 0x2f;
}

/// Why bytes could not be read as a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The length prefix is 0 or above [`MAX_FRAME`].
    BadLength(usize),
    /// A frame type this side does not accept.
    UnknownType(u8),
    /// A field runs past the end of its frame.
    Truncated(&'static str),
    /// Bytes left after the last field.
    Trailing(usize),
    /// A field holds a value the protocol forbids.
    Invalid(&'static str),
    /// The stream ended inside a frame.
    CutOff(usize),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadLength(n) => write!(f, "frame length {n} is outside 1..={MAX_FRAME}"),
            WireError::UnknownType(t) => write!(f, "unknown frame type 0x{t:02x}"),
            WireError::Truncated(what) => write!(f, "frame ends inside its {what}"),
            WireError::Trailing(n) => write!(f, "{n} bytes after the frame's last field"),
            WireError::Invalid(what) => write!(f, "invalid {what}"),
            WireError::CutOff(n) => {
                write!(f, "the stream ended inside a frame ({n} bytes of it read)")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

/// One command to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Chosen by the supervisor; unique among the connection's commands.
    pub id: u64,
    /// Milliseconds from receipt until the agent kills the command's processes.
    pub deadline_ms: u64,
    /// stderr goes down the stdout stream.
    pub merge_stderr: bool,
    /// stdin is a pipe fed by `Stdin` frames (else /dev/null).
    pub stdin_pipe: bool,
    pub cwd: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    /// The command's whole environment, `(name, value)`.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Supervisor to agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToAgent {
    Start(Start),
    /// Bytes for a command's stdin (a `stdin_pipe` command).
    Stdin {
        id: u64,
        data: Vec<u8>,
    },
    /// Close a command's stdin.
    StdinEof {
        id: u64,
    },
    /// Kill every process of a command now.
    Kill {
        id: u64,
    },
    /// The supervisor took `bytes` more of a command's output.
    Credit {
        id: u64,
        bytes: u32,
    },
}

/// What the agent found about itself at start, from /proc/self/status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    /// Its pid in the container's pid namespace (1).
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// `NoNewPrivs`.
    pub no_new_privs: u32,
    /// `Seccomp` (2: filter mode).
    pub seccomp: u32,
    /// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb`.
    pub caps: [u64; 5],
}

/// A command ended and its processes are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited {
    pub id: u64,
    pub status: Status,
    /// Its deadline passed and the agent killed it.
    pub timed_out: bool,
    /// A `Kill` frame killed it.
    pub killed: bool,
}

/// Agent to supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromAgent {
    Hello(Hello),
    Stdout {
        id: u64,
        data: Vec<u8>,
    },
    Stderr {
        id: u64,
        data: Vec<u8>,
    },
    Exited(Exited),
    /// The command could not be started at all (no process was made).
    SpawnFailed {
        id: u64,
        message: Vec<u8>,
    },
    /// The agent is about to exit because of what it read (or failed to).
    Fatal {
        message: Vec<u8>,
    },
}

// ---------------------------------------------------------------- encoding

struct Enc<'a> {
    out: &'a mut Vec<u8>,
    at: usize,
}

impl<'a> Enc<'a> {
    fn new(out: &'a mut Vec<u8>, ty: u8) -> Enc<'a> {
        let at = out.len();
        out.extend_from_slice(&[0, 0, 0, 0, ty]);
        Enc { out, at }
    }
    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(len32(b.len()));
        self.out.extend_from_slice(b);
    }
    fn rest(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }
    fn finish(self) {
        let n = len32(self.out.len() - self.at - HEADER);
        self.out[self.at..self.at + HEADER].copy_from_slice(&n.to_be_bytes());
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl ToAgent {
    /// Appends the frame to `out`. A frame over [`MAX_FRAME`] is appended
    /// anyway (the reader refuses it): callers keep within the limits.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ToAgent::Start(s) => {
                let mut e = Enc::new(out, ty::START);
                e.u64(s.id);
                e.u64(s.deadline_ms);
                e.u8(u8::from(s.merge_stderr) | (u8::from(s.stdin_pipe) << 1));
                e.bytes(&s.cwd);
                e.u32(len32(s.argv.len()));
                for a in &s.argv {
                    e.bytes(a);
                }
                e.u32(len32(s.env.len()));
                for (k, v) in &s.env {
                    e.bytes(k);
                    e.bytes(v);
                }
                e.finish();
            }
            ToAgent::Stdin { id, data } => {
                let mut e = Enc::new(out, ty::STDIN);
                e.u64(*id);
                e.rest(data);
                e.finish();
            }
            ToAgent::StdinEof { id } => id_only(out, ty::STDIN_EOF, *id),
            ToAgent::Kill { id } => id_only(out, ty::KILL, *id),
            ToAgent::Credit { id, bytes } => {
                let mut e = Enc::new(out, ty::CREDIT);
                e.u64(*id);
                e.u32(*bytes);
                e.finish();
            }
        }
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

fn id_only(out: &mut Vec<u8>, t: u8, id: u64) {
    let mut e = Enc::new(out, t);
    e.u64(id);
    e.finish();
}

/// Appends an output frame without building a [`FromAgent`] (the agent's hot
/// path). `data` must be at most [`MAX_CHUNK`] bytes.
pub fn encode_output(out: &mut Vec<u8>, stderr: bool, id: u64, data: &[u8]) {
    let mut e = Enc::new(out, if stderr { ty::STDERR } else { ty::STDOUT });
    e.u64(id);
    e.rest(data);
    e.finish();
}

impl FromAgent {
    /// Appends the frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            FromAgent::Hello(h) => {
                let mut e = Enc::new(out, ty::HELLO);
                e.u32(h.version);
                e.u32(h.pid);
                e.u32(h.uid);
                e.u32(h.gid);
                e.u32(h.no_new_privs);
                e.u32(h.seccomp);
                for c in h.caps {
                    e.u64(c);
                }
                e.finish();
            }
            FromAgent::Stdout { id, data } => encode_output(out, false, *id, data),
            FromAgent::Stderr { id, data } => encode_output(out, true, *id, data),
            FromAgent::Exited(x) => {
                let mut e = Enc::new(out, ty::EXITED);
                e.u64(x.id);
                match x.status {
                    Status::Code(c) => {
                        e.u8(0);
                        e.i32(c);
                    }
                    Status::Signal(s) => {
                        e.u8(1);
                        e.i32(s);
                    }
                }
                e.u8(u8::from(x.timed_out) | (u8::from(x.killed) << 1));
                e.finish();
            }
            FromAgent::SpawnFailed { id, message } => {
                let mut e = Enc::new(out, ty::SPAWN_FAILED);
                e.u64(*id);
                e.bytes(message);
                e.finish();
            }
            FromAgent::Fatal { message } => {
                let mut e = Enc::new(out, ty::FATAL);
                e.bytes(message);
                e.finish();
            }
        }
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

// ---------------------------------------------------------------- decoding

struct Dec<'a> {
    b: &'a [u8],
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_be_bytes(a))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4, what)?);
        Ok(i32::from_be_bytes(a))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_be_bytes(a))
    }
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, WireError> {
        let n = self.u32(what)? as usize;
        Ok(self.take(n, what)?.to_vec())
    }
    /// A count of items that each take at least `min` bytes: refused before
    /// anything is allocated for it when the frame cannot hold that many.
    fn count(&mut self, what: &'static str, min: usize) -> Result<usize, WireError> {
        let n = self.u32(what)? as usize;
        if n > MAX_WORDS {
            return Err(WireError::Invalid(what));
        }
        if n.saturating_mul(min) > self.b.len() {
            return Err(WireError::Truncated(what));
        }
        Ok(n)
    }
    fn rest(&mut self) -> Vec<u8> {
        let v = self.b.to_vec();
        self.b = &[];
        v
    }
    fn end(&self) -> Result<(), WireError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.b.len()))
        }
    }
}

fn no_nul(b: &[u8], what: &'static str) -> Result<(), WireError> {
    if b.contains(&0) {
        Err(WireError::Invalid(what))
    } else {
        Ok(())
    }
}

fn flag_bits(v: u8, known: u8, what: &'static str) -> Result<u8, WireError> {
    if v & !known != 0 {
        Err(WireError::Invalid(what))
    } else {
        Ok(v)
    }
}

impl ToAgent {
    /// Parses one frame's type and body (as [`FrameReader`] yields them).
    pub fn parse(t: u8, body: &[u8]) -> Result<ToAgent, WireError> {
        let mut d = Dec { b: body };
        let msg = match t {
            ty::START => {
                let id = d.u64("command id")?;
                let deadline_ms = d.u64("deadline")?;
                let flags = flag_bits(d.u8("flags")?, 0b11, "start flags")?;
                let cwd = d.bytes("cwd")?;
                if cwd.is_empty() {
                    return Err(WireError::Invalid("cwd (empty)"));
                }
                no_nul(&cwd, "cwd (NUL byte)")?;
                let argc = d.count("argv", 4)?;
                if argc == 0 {
                    return Err(WireError::Invalid("argv (empty)"));
                }
                let mut argv = Vec::with_capacity(argc);
                for _ in 0..argc {
                    let a = d.bytes("argv word")?;
                    no_nul(&a, "argv word (NUL byte)")?;
                    argv.push(a);
                }
                let envc = d.count("environment", 8)?;
                let mut env = Vec::with_capacity(envc);
                for _ in 0..envc {
                    let k = d.bytes("environment name")?;
                    let v = d.bytes("environment value")?;
                    if k.is_empty() || k.contains(&b'=') {
                        return Err(WireError::Invalid("environment name"));
                    }
                    no_nul(&k, "environment name (NUL byte)")?;
                    no_nul(&v, "environment value (NUL byte)")?;
                    env.push((k, v));
                }
                ToAgent::Start(Start {
                    id,
                    deadline_ms,
                    merge_stderr: flags & 1 != 0,
                    stdin_pipe: flags & 2 != 0,
                    cwd,
                    argv,
                    env,
                })
            }
            ty::STDIN => {
                let id = d.u64("command id")?;
                let data = d.rest();
                if data.len() > MAX_CHUNK {
                    return Err(WireError::Invalid("stdin chunk (too large)"));
                }
                ToAgent::Stdin { id, data }
            }
            ty::STDIN_EOF => ToAgent::StdinEof {
                id: d.u64("command id")?,
            },
            ty::KILL => ToAgent::Kill {
                id: d.u64("command id")?,
            },
            ty::CREDIT => ToAgent::Credit {
                id: d.u64("command id")?,
                bytes: d.u32("credit")?,
            },
            other => return Err(WireError::UnknownType(other)),
        };
        d.end()?;
        Ok(msg)
    }
}

impl FromAgent {
    /// [`FromAgent::parse`] taking the body, so output data is not copied.
    pub fn parse_owned(t: u8, mut body: Vec<u8>) -> Result<FromAgent, WireError> {
        if t != ty::STDOUT && t != ty::STDERR {
            return FromAgent::parse(t, &body);
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(body.get(..8).ok_or(WireError::Truncated("command id"))?);
        let id = u64::from_be_bytes(id);
        body.drain(..8);
        if body.is_empty() || body.len() > MAX_CHUNK {
            return Err(WireError::Invalid("output chunk size"));
        }
        Ok(if t == ty::STDOUT {
            FromAgent::Stdout { id, data: body }
        } else {
            FromAgent::Stderr { id, data: body }
        })
    }

    /// Parses one frame's type and body (as [`FrameReader`] yields them).
    pub fn parse(t: u8, body: &[u8]) -> Result<FromAgent, WireError> {
        let mut d = Dec { b: body };
        let msg = match t {
            ty::HELLO => {
                let version = d.u32("version")?;
                let pid = d.u32("pid")?;
                let uid = d.u32("uid")?;
                let gid = d.u32("gid")?;
                let no_new_privs = d.u32("no_new_privs")?;
                let seccomp = d.u32("seccomp")?;
                let mut caps = [0u64; 5];
                for c in &mut caps {
                    *c = d.u64("capabilities")?;
                }
                FromAgent::Hello(Hello {
                    version,
                    pid,
                    uid,
                    gid,
                    no_new_privs,
                    seccomp,
                    caps,
                })
            }
            ty::STDOUT | ty::STDERR => {
                let id = d.u64("command id")?;
                let data = d.rest();
                if data.is_empty() || data.len() > MAX_CHUNK {
                    return Err(WireError::Invalid("output chunk size"));
                }
                if t == ty::STDOUT {
                    FromAgent::Stdout { id, data }
                } else {
                    FromAgent::Stderr { id, data }
                }
            }
            ty::EXITED => {
                let id = d.u64("command id")?;
                let kind = d.u8("status kind")?;
                let value = d.i32("status value")?;
                let status = match kind {
                    0 => Status::Code(value),
                    1 if (1..=64).contains(&value) => Status::Signal(value),
                    _ => return Err(WireError::Invalid("exit status")),
                };
                let flags = flag_bits(d.u8("flags")?, 0b11, "exit flags")?;
                FromAgent::Exited(Exited {
                    id,
                    status,
                    timed_out: flags & 1 != 0,
                    killed: flags & 2 != 0,
                })
            }
            ty::SPAWN_FAILED => FromAgent::SpawnFailed {
                id: d.u64("command id")?,
                message: d.bytes("message")?,
            },
            ty::FATAL => FromAgent::Fatal {
                message: d.bytes("message")?,
            },
            other => return Err(WireError::UnknownType(other)),
        };
        d.end()?;
        Ok(msg)
    }
}

/// Splits a byte stream into frames. Feed it what was read; take frames out
/// until it says it needs more.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next whole frame as `(type, body)`, `Ok(None)` when more bytes are
    /// needed, `Err` when the length prefix is out of bounds (the stream is
    /// then unusable).
    pub fn next_frame(&mut self) -> Result<Option<(u8, Vec<u8>)>, WireError> {
        let avail = &self.buf[self.start..];
        if avail.len() < HEADER {
            self.compact();
            return Ok(None);
        }
        let mut n = [0u8; 4];
        n.copy_from_slice(&avail[..HEADER]);
        let len = u32::from_be_bytes(n) as usize;
        if len == 0 || len > MAX_FRAME {
            return Err(WireError::BadLength(len));
        }
        if avail.len() < HEADER + len {
            self.compact();
            return Ok(None);
        }
        let t = avail[HEADER];
        let body = avail[HEADER + 1..HEADER + len].to_vec();
        self.start += HEADER + len;
        Ok(Some((t, body)))
    }

    /// The buffer to append freshly read bytes to (what [`FrameReader::push`]
    /// does, without a copy: `read_buf(reader.buffer())`).
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.compact();
        &mut self.buf
    }

    /// Bytes held that do not make a whole frame yet.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// At end of stream: `Err` when a frame was cut off.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.pending() {
            0 => Ok(()),
            n => Err(WireError::CutOff(n)),
        }
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Start {
        Start {
            id: 7,
            deadline_ms: 1500,
            merge_stderr: true,
            stdin_pipe: false,
            cwd: b"/w d".to_vec(),
            argv: vec![b"sh".to_vec(), b"-c".to_vec(), b"echo \xff\n'x'".to_vec()],
            env: vec![
                (b"PATH".to_vec(), b"/bin".to_vec()),
                (b"E".to_vec(), Vec::new()),
            ],
        }
    }

    fn all_to_agent() -> Vec<ToAgent> {
        vec![
            ToAgent::Start(start()),
            ToAgent::Stdin {
                id: 7,
                data: b"abc".to_vec(),
            },
            ToAgent::Stdin {
                id: 7,
                data: Vec::new(),
            },
            ToAgent::StdinEof { id: 7 },
            ToAgent::Kill { id: u64::MAX },
            ToAgent::Credit {
                id: 1,
                bytes: 65536,
            },
        ]
    }

    fn all_from_agent() -> Vec<FromAgent> {
        vec![
            FromAgent::Hello(Hello {
                version: VERSION,
                pid: 1,
                uid: 1000,
                gid: 1001,
                no_new_privs: 1,
                seccomp: 2,
                caps: [0, 0, 0, 0, 0],
            }),
            FromAgent::Stdout {
                id: 3,
                data: b"out".to_vec(),
            },
            FromAgent::Stderr {
                id: 3,
                data: vec![0xff; MAX_CHUNK],
            },
            FromAgent::Exited(Exited {
                id: 3,
                status: Status::Code(-1),
                timed_out: false,
                killed: true,
            }),
            FromAgent::Exited(Exited {
                id: 4,
                status: Status::Signal(9),
                timed_out: true,
                killed: false,
            }),
            FromAgent::SpawnFailed {
                id: 5,
                message: b"fork: EAGAIN".to_vec(),
            },
            FromAgent::Fatal {
                message: b"bad frame".to_vec(),
            },
        ]
    }

    fn frames(bytes: &[u8]) -> Result<Vec<(u8, Vec<u8>)>, WireError> {
        let mut r = FrameReader::new();
        r.push(bytes);
        let mut v = Vec::new();
        while let Some(f) = r.next_frame()? {
            v.push(f);
        }
        r.finish()?;
        Ok(v)
    }

    #[test]
    fn every_frame_round_trips_whole_and_byte_by_byte() {
        let mut stream = Vec::new();
        for m in all_to_agent() {
            m.encode(&mut stream);
        }
        let got: Vec<ToAgent> = frames(&stream)
            .unwrap()
            .into_iter()
            .map(|(t, b)| ToAgent::parse(t, &b).unwrap())
            .collect();
        assert_eq!(got, all_to_agent());
        // One byte at a time: the same frames, none early.
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        for b in &stream {
            r.push(std::slice::from_ref(b));
            while let Some((t, body)) = r.next_frame().unwrap() {
                got.push(ToAgent::parse(t, &body).unwrap());
            }
        }
        assert_eq!(got, all_to_agent());
        assert_eq!(r.pending(), 0);

        let mut stream = Vec::new();
        for m in all_from_agent() {
            m.encode(&mut stream);
        }
        let got: Vec<FromAgent> = frames(&stream)
            .unwrap()
            .into_iter()
            .map(|(t, b)| FromAgent::parse(t, &b).unwrap())
            .collect();
        assert_eq!(got, all_from_agent());
    }

    #[test]
    fn parse_owned_agrees_with_parse_on_every_frame_and_every_cut() {
        for m in all_from_agent() {
            let f = m.to_bytes();
            let (t, body) = (f[4], &f[5..]);
            assert_eq!(FromAgent::parse_owned(t, body.to_vec()), Ok(m.clone()));
            for cut in 0..body.len().min(64) {
                assert_eq!(
                    FromAgent::parse_owned(t, body[..cut].to_vec()).is_ok(),
                    FromAgent::parse(t, &body[..cut]).is_ok(),
                    "{m:?} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn a_cut_off_frame_is_never_a_frame() {
        let whole = ToAgent::Start(start()).to_bytes();
        for cut in 0..whole.len() {
            let mut r = FrameReader::new();
            r.push(&whole[..cut]);
            assert_eq!(r.next_frame(), Ok(None), "cut at {cut}");
            assert_eq!(r.finish().is_err(), cut > 0);
        }
    }

    #[test]
    fn every_shortened_or_lengthened_body_is_refused() {
        for m in all_to_agent() {
            let f = m.to_bytes();
            let (t, body) = (f[4], &f[5..]);
            for cut in 0..body.len().min(256) {
                // An empty stdin chunk is the one body that may shrink to
                // nothing but its id.
                if let ToAgent::Stdin { .. } = m
                    && cut >= 8
                {
                    continue;
                }
                assert!(ToAgent::parse(t, &body[..cut]).is_err(), "{m:?} cut {cut}");
            }
            if !matches!(m, ToAgent::Stdin { .. }) {
                let mut longer = body.to_vec();
                longer.push(0);
                assert_eq!(ToAgent::parse(t, &longer), Err(WireError::Trailing(1)));
            }
        }
        for m in all_from_agent() {
            let f = m.to_bytes();
            let (t, body) = (f[4], &f[5..]);
            for cut in 0..body.len().min(256) {
                if matches!(m, FromAgent::Stdout { .. } | FromAgent::Stderr { .. }) && cut > 8 {
                    continue;
                }
                assert!(
                    FromAgent::parse(t, &body[..cut]).is_err(),
                    "{m:?} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn forbidden_values_are_refused() {
        let bad = |f: fn(&mut Start)| {
            let mut s = start();
            f(&mut s);
            let b = ToAgent::Start(s).to_bytes();
            ToAgent::parse(b[4], &b[5..]).unwrap_err()
        };
        assert_eq!(bad(|s| s.argv.clear()), WireError::Invalid("argv (empty)"));
        assert_eq!(
            bad(|s| s.argv[1] = b"a\0b".to_vec()),
            WireError::Invalid("argv word (NUL byte)")
        );
        assert_eq!(
            bad(|s| s.cwd = b"/\0".to_vec()),
            WireError::Invalid("cwd (NUL byte)")
        );
        assert_eq!(bad(|s| s.cwd.clear()), WireError::Invalid("cwd (empty)"));
        assert_eq!(
            bad(|s| s.env.push((b"A=B".to_vec(), b"x".to_vec()))),
            WireError::Invalid("environment name")
        );
        assert_eq!(
            bad(|s| s.env.push((Vec::new(), b"x".to_vec()))),
            WireError::Invalid("environment name")
        );
        assert_eq!(
            bad(|s| s.env.push((b"A".to_vec(), b"\0".to_vec()))),
            WireError::Invalid("environment value (NUL byte)")
        );
        // Unknown flag bits, types and lengths.
        let mut b = ToAgent::Start(start()).to_bytes();
        b[5 + 16] |= 0x80;
        assert_eq!(
            ToAgent::parse(b[4], &b[5..]),
            Err(WireError::Invalid("start flags"))
        );
        assert_eq!(
            ToAgent::parse(0x20, &[0; 9]),
            Err(WireError::UnknownType(0x20))
        );
        assert_eq!(
            FromAgent::parse(0x10, &[0; 9]),
            Err(WireError::UnknownType(0x10))
        );
        for len in [0u32, MAX_FRAME as u32 + 1, u32::MAX] {
            let mut r = FrameReader::new();
            r.push(&len.to_be_bytes());
            r.push(&[0x13]);
            assert_eq!(r.next_frame(), Err(WireError::BadLength(len as usize)));
        }
        // A count that the frame cannot hold is refused before allocating.
        let mut e = Vec::new();
        let mut enc = Enc::new(&mut e, ty::START);
        enc.u64(1);
        enc.u64(1);
        enc.u8(0);
        enc.bytes(b"/");
        enc.u32(60_000);
        enc.finish();
        assert_eq!(
            ToAgent::parse(e[4], &e[5..]),
            Err(WireError::Truncated("argv"))
        );
        // Signals outside 1..=64.
        for sig in [0, 65, -9] {
            let b = FromAgent::Exited(Exited {
                id: 1,
                status: Status::Signal(sig),
                timed_out: false,
                killed: false,
            })
            .to_bytes();
            assert_eq!(
                FromAgent::parse(b[4], &b[5..]),
                Err(WireError::Invalid("exit status"))
            );
        }
        // Empty and oversized output chunks.
        let mut b = Vec::new();
        encode_output(&mut b, false, 1, b"");
        assert!(FromAgent::parse(b[4], &b[5..]).is_err());
        let mut b = Vec::new();
        encode_output(&mut b, false, 1, &vec![0; MAX_CHUNK + 1]);
        assert!(FromAgent::parse(b[4], &b[5..]).is_err());
    }

    /// A small deterministic generator (no dependency for a fuzz loop).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn garbage_never_panics_and_mutated_frames_parse_or_fail_cleanly() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let seeds: Vec<Vec<u8>> = all_to_agent()
            .iter()
            .map(ToAgent::to_bytes)
            .chain(all_from_agent().iter().map(FromAgent::to_bytes))
            .collect();
        for round in 0..20_000 {
            let mut b = seeds[round % seeds.len()].clone();
            for _ in 0..1 + rng.next() % 4 {
                let i = (rng.next() as usize) % b.len();
                match rng.next() % 3 {
                    0 => b[i] = rng.next() as u8,
                    1 => b.truncate(i.max(1)),
                    _ => b.insert(i, rng.next() as u8),
                }
            }
            let mut r = FrameReader::new();
            r.push(&b);
            while let Ok(Some((t, body))) = r.next_frame() {
                let _ = ToAgent::parse(t, &body);
                let _ = FromAgent::parse(t, &body);
            }
            // Pure noise.
            let noise: Vec<u8> = (0..rng.next() % 64).map(|_| rng.next() as u8).collect();
            let _ = ToAgent::parse(noise.first().copied().unwrap_or(0), &noise);
            let _ = FromAgent::parse(noise.first().copied().unwrap_or(0), &noise);
        }
    }
}
