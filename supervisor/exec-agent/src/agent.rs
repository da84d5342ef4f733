//! The agent's one loop: read frames from the supervisor, start and kill
//! commands, move their output into frames and stdin into their pipes, reap
//! shepherds, enforce deadlines. Single-threaded, one `poll` per turn.
//!
//! When the connection ends, however it ends (the supervisor exited, was
//! killed, or sent something that is not a frame), the agent kills every
//! process it started and exits; as the container's pid 1, its exit takes
//! down anything still left in the container.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::sys::{self, Wait};
use crate::wire::{
    self, DRAIN_MAX, Exited, FrameReader, FromAgent, INITIAL_WINDOW, MAX_CHUNK, Start, Status,
    ToAgent,
};
use crate::{posture, procs, spawn};

/// After a command's processes are gone, how long output still held in its
/// pipes (by a process that got the pipe some other way) is waited for.
const DRAIN_GRACE: Duration = Duration::from_millis(250);
/// Pipes are not read while this much output waits to go to the supervisor.
const OUTBOX_HIGH: usize = 8 * 1024 * 1024;
/// Most stdin the agent holds for commands that do not read it.
const STDIN_MAX: usize = 16 * 1024 * 1024;
/// Longest deadline honoured (a bigger one is taken as this).
const MAX_DEADLINE: Duration = Duration::from_secs(366 * 24 * 3600);

/// How the agent ended (its exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The supervisor closed the connection between frames.
    Closed = 0,
    /// Setup failed (the socket could not be reached).
    Setup = 70,
    /// The supervisor sent something that is not a valid frame, or the
    /// stream ended inside one.
    Protocol = 2,
    /// Reading or writing the connection failed.
    Io = 3,
}

struct Cmd {
    /// The shepherd's pid.
    pid: i32,
    stdout: Option<File>,
    stderr: Option<File>,
    stdin: Option<File>,
    stdin_queue: VecDeque<Vec<u8>>,
    stdin_queued: usize,
    stdin_eof: bool,
    window: u64,
    drained: u64,
    deadline: Instant,
    timed_out: bool,
    killed: bool,
    status: Option<Status>,
    drain_until: Option<Instant>,
}

impl Cmd {
    /// How much output may be read now.
    fn allowance(&self) -> usize {
        let left = match self.status {
            None => self.window,
            Some(_) => u64::from(DRAIN_MAX).saturating_sub(self.drained),
        };
        usize::try_from(left).unwrap_or(usize::MAX).min(MAX_CHUNK)
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
        self.stdin_queue.clear();
        self.stdin_queued = 0;
    }
}

#[derive(Clone, Copy)]
enum Slot {
    Ctl,
    Sig,
    Out(u64, bool),
    In(u64),
}

struct Agent {
    ctl: UnixStream,
    inbox: FrameReader,
    outbox: Vec<u8>,
    out_at: usize,
    cmds: BTreeMap<u64, Cmd>,
    sigfd: OwnedFd,
    me: i32,
    buf: Vec<u8>,
    /// Git directories no command may make a link or special file beneath.
    guard: crate::links::Guard,
}

/// Connects to the supervisor at `socket`, says hello and serves until the
/// connection ends. Returns how it ended.
pub fn run(socket: &Path) -> End {
    run_guarding(socket, Vec::new())
}

/// [`run`], every command started under a [`crate::links::Guard`] of
/// `guard` (the split git directories, docs/THREAT_MODEL.md).
pub fn run_guarding(socket: &Path, guard: Vec<std::path::PathBuf>) -> End {
    let guard = match crate::links::Guard::new(Path::new("/"), guard) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tollgate-exec-agent: {e}");
            return End::Setup;
        }
    };
    let _ = sys::set_not_dumpable();
    let _ = sys::set_child_subreaper();
    let sigfd = match sys::sigchld_fd() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("tollgate-exec-agent: signalfd: {e}");
            return End::Setup;
        }
    };
    let ctl = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "tollgate-exec-agent: cannot connect to {}: {e}",
                socket.display()
            );
            return End::Setup;
        }
    };
    sys::set_send_buffer(ctl.as_fd(), 4 * 1024 * 1024);
    if let Err(e) = ctl.set_nonblocking(true) {
        eprintln!("tollgate-exec-agent: {e}");
        return End::Setup;
    }
    let me = sys::getpid();
    let mut a = Agent {
        ctl,
        inbox: FrameReader::new(),
        outbox: Vec::with_capacity(256 * 1024),
        out_at: 0,
        cmds: BTreeMap::new(),
        sigfd,
        me,
        buf: vec![0u8; MAX_CHUNK],
        guard,
    };
    FromAgent::Hello(posture::own(u32::try_from(me).unwrap_or(0))).encode(&mut a.outbox);
    let end = a.serve();
    a.kill_everything();
    end
}

impl Agent {
    fn serve(&mut self) -> End {
        loop {
            let now = Instant::now();
            self.fire_timers(now);
            self.finish_done();
            if let Err(e) = self.flush() {
                return e;
            }
            let (mut pfds, slots) = self.poll_set();
            let timeout = self.next_timer(Instant::now());
            if sys::poll(&mut pfds, timeout).is_err() {
                return End::Io;
            }
            for (p, slot) in pfds.iter().zip(slots) {
                if p.revents == 0 {
                    continue;
                }
                let r = match slot {
                    Slot::Ctl => self.on_control(p.revents),
                    Slot::Sig => {
                        sys::drain_signalfd(self.sigfd.as_fd());
                        self.reap();
                        Ok(())
                    }
                    Slot::Out(id, err) => {
                        self.read_output(id, err);
                        Ok(())
                    }
                    Slot::In(id) => {
                        self.write_stdin(id, p.revents);
                        Ok(())
                    }
                };
                if let Err(e) = r {
                    return e;
                }
            }
        }
    }

    fn poll_set(&self) -> (Vec<libc::pollfd>, Vec<Slot>) {
        let pfd = |fd: i32, events: libc::c_short| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let mut ctl_events = libc::POLLIN;
        if self.out_at < self.outbox.len() {
            ctl_events |= libc::POLLOUT;
        }
        let mut pfds = vec![
            pfd(self.ctl.as_raw_fd(), ctl_events),
            pfd(self.sigfd.as_raw_fd(), libc::POLLIN),
        ];
        let mut slots = vec![Slot::Ctl, Slot::Sig];
        let room = self.outbox.len() - self.out_at < OUTBOX_HIGH;
        for (&id, c) in &self.cmds {
            // A pipe that may not be read now is left out entirely: a hung-up
            // pipe would otherwise wake every poll.
            if room && c.allowance() > 0 {
                for (f, err) in [(&c.stdout, false), (&c.stderr, true)] {
                    if let Some(f) = f {
                        pfds.push(pfd(f.as_raw_fd(), libc::POLLIN));
                        slots.push(Slot::Out(id, err));
                    }
                }
            }
            if let Some(f) = &c.stdin
                && !c.stdin_queue.is_empty()
            {
                pfds.push(pfd(f.as_raw_fd(), libc::POLLOUT));
                slots.push(Slot::In(id));
            }
        }
        (pfds, slots)
    }

    /// Milliseconds until the next deadline or drain end; -1 for none.
    fn next_timer(&self, now: Instant) -> libc::c_int {
        let next = self
            .cmds
            .values()
            .filter_map(|c| match c.status {
                None if !c.timed_out && !c.killed => Some(c.deadline),
                Some(_) => c.drain_until,
                None => None,
            })
            .min();
        match next {
            None => -1,
            Some(t) => {
                let ms = t.saturating_duration_since(now).as_millis() + 1;
                libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
            }
        }
    }

    fn live_shepherds(&self, except: Option<u64>) -> HashSet<i32> {
        self.cmds
            .iter()
            .filter(|(id, c)| c.status.is_none() && Some(**id) != except)
            .map(|(_, c)| c.pid)
            .collect()
    }

    fn kill_command(&mut self, id: u64) {
        let keep = self.live_shepherds(Some(id));
        if let Some(c) = self.cmds.get(&id) {
            procs::kill_tree(Some(c.pid), Some(self.me), &keep);
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        let due: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.status.is_none() && !c.timed_out && !c.killed && c.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(c) = self.cmds.get_mut(&id) {
                c.timed_out = true;
            }
            self.kill_command(id);
        }
        for c in self.cmds.values_mut() {
            if c.drain_until.is_some_and(|t| t <= now) {
                c.stdout = None;
                c.stderr = None;
            }
        }
    }

    /// Commands whose processes are gone and whose pipes are closed: report.
    fn finish_done(&mut self) {
        let done: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.status.is_some() && c.stdout.is_none() && c.stderr.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            if let Some(c) = self.cmds.remove(&id)
                && let Some(status) = c.status
            {
                FromAgent::Exited(Exited {
                    id,
                    status,
                    timed_out: c.timed_out,
                    killed: c.killed,
                })
                .encode(&mut self.outbox);
            }
        }
    }

    fn reap(&mut self) {
        let mut abnormal = false;
        while let Ok(Some((pid, w))) = sys::wait_any(false) {
            let Some(c) = self
                .cmds
                .values_mut()
                .find(|c| c.pid == pid && c.status.is_none())
            else {
                // An orphan of a dead shepherd.
                continue;
            };
            c.status = Some(match w {
                Wait::Exited(code) => Status::Code(code),
                Wait::Signaled(sig) => {
                    abnormal = true;
                    Status::Signal(sig)
                }
            });
            c.drain_until = Some(Instant::now() + DRAIN_GRACE);
            c.close_stdin();
        }
        if abnormal {
            // A shepherd killed before it could clean up (by us, or by its
            // own command) leaves orphans to pid 1.
            let keep = self.live_shepherds(None);
            procs::kill_tree(None, Some(self.me), &keep);
        }
    }

    fn read_output(&mut self, id: u64, err: bool) {
        let Some(c) = self.cmds.get_mut(&id) else {
            return;
        };
        let n = c.allowance();
        let slot = if err { &mut c.stderr } else { &mut c.stdout };
        let Some(f) = slot.as_mut() else { return };
        match f.read(&mut self.buf[..n]) {
            Ok(0) => *slot = None,
            Ok(k) => {
                wire::encode_output(&mut self.outbox, err, id, &self.buf[..k]);
                let k = k as u64;
                match c.status {
                    None => c.window = c.window.saturating_sub(k),
                    Some(_) => {
                        c.drained += k;
                        if c.drained >= u64::from(DRAIN_MAX) {
                            c.stdout = None;
                            c.stderr = None;
                        }
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => *slot = None,
        }
    }

    fn write_stdin(&mut self, id: u64, revents: libc::c_short) {
        let Some(c) = self.cmds.get_mut(&id) else {
            return;
        };
        if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            // The command closed its stdin, or is gone: what is left is dropped.
            c.close_stdin();
            return;
        }
        let Some(f) = c.stdin.as_mut() else { return };
        while let Some(front) = c.stdin_queue.front_mut() {
            match f.write(front) {
                Ok(k) => {
                    c.stdin_queued -= k;
                    if k == front.len() {
                        c.stdin_queue.pop_front();
                    } else {
                        front.drain(..k);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    c.close_stdin();
                    return;
                }
            }
        }
        if c.stdin_eof {
            c.close_stdin();
        }
    }

    fn on_control(&mut self, revents: libc::c_short) -> Result<(), End> {
        if revents & libc::POLLOUT != 0 {
            self.flush()?;
        }
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
            return Ok(());
        }
        let mut buf = [0u8; 64 * 1024];
        // A bounded number of reads per turn, so output keeps flowing.
        for _ in 0..16 {
            match self.ctl.read(&mut buf) {
                Ok(0) => {
                    return Err(match self.inbox.finish() {
                        Ok(()) => End::Closed,
                        Err(e) => self.fatal(&e.to_string()),
                    });
                }
                Ok(n) => {
                    self.inbox.push(&buf[..n]);
                    self.handle_frames()?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Io),
            }
        }
        Ok(())
    }

    fn handle_frames(&mut self) -> Result<(), End> {
        loop {
            let frame = match self.inbox.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.fatal(&e.to_string())),
            };
            let msg = match ToAgent::parse(frame.0, &frame.1) {
                Ok(m) => m,
                Err(e) => return Err(self.fatal(&e.to_string())),
            };
            self.handle(msg)?;
        }
    }

    fn handle(&mut self, msg: ToAgent) -> Result<(), End> {
        match msg {
            ToAgent::Start(s) => self.start(s)?,
            ToAgent::Stdin { id, data } => {
                if let Some(c) = self.cmds.get_mut(&id)
                    && c.stdin.is_some()
                    && !c.stdin_eof
                {
                    if c.stdin_queued + data.len() > STDIN_MAX {
                        return Err(self.fatal(&format!(
                            "command {id}: more than {STDIN_MAX} bytes of stdin waiting"
                        )));
                    }
                    c.stdin_queued += data.len();
                    c.stdin_queue.push_back(data);
                }
            }
            ToAgent::StdinEof { id } => {
                if let Some(c) = self.cmds.get_mut(&id) {
                    c.stdin_eof = true;
                    if c.stdin_queue.is_empty() {
                        c.close_stdin();
                    }
                }
            }
            ToAgent::Kill { id } => {
                if let Some(c) = self.cmds.get_mut(&id)
                    && c.status.is_none()
                {
                    c.killed = true;
                    self.kill_command(id);
                }
            }
            ToAgent::Credit { id, bytes } => {
                if let Some(c) = self.cmds.get_mut(&id) {
                    c.window = c.window.saturating_add(u64::from(bytes));
                }
            }
        }
        Ok(())
    }

    fn start(&mut self, s: Start) -> Result<(), End> {
        if self.cmds.contains_key(&s.id) {
            return Err(self.fatal(&format!("command id {} is already in use", s.id)));
        }
        let deadline = Instant::now() + Duration::from_millis(s.deadline_ms).min(MAX_DEADLINE);
        match spawn::spawn(&s, &self.guard) {
            Ok(sp) => {
                self.cmds.insert(
                    s.id,
                    Cmd {
                        pid: sp.pid,
                        stdout: Some(sp.stdout),
                        stderr: sp.stderr,
                        stdin: sp.stdin,
                        stdin_queue: VecDeque::new(),
                        stdin_queued: 0,
                        stdin_eof: false,
                        window: u64::from(INITIAL_WINDOW),
                        drained: 0,
                        deadline,
                        timed_out: false,
                        killed: false,
                        status: None,
                        drain_until: None,
                    },
                );
            }
            Err(message) => FromAgent::SpawnFailed {
                id: s.id,
                message: message.into_bytes(),
            }
            .encode(&mut self.outbox),
        }
        Ok(())
    }

    /// Writes what the outbox holds until the socket would block.
    fn flush(&mut self) -> Result<(), End> {
        while self.out_at < self.outbox.len() {
            match self.ctl.write(&self.outbox[self.out_at..]) {
                Ok(0) => return Err(End::Io),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Io),
            }
        }
        if self.out_at == self.outbox.len() {
            self.outbox.clear();
            self.out_at = 0;
        } else if self.out_at > 1024 * 1024 {
            self.outbox.drain(..self.out_at);
            self.out_at = 0;
        }
        Ok(())
    }

    /// Says why the connection is being dropped (best effort, bounded), and
    /// returns the end to report.
    fn fatal(&mut self, why: &str) -> End {
        FromAgent::Fatal {
            message: why.as_bytes().to_vec(),
        }
        .encode(&mut self.outbox);
        let _ = self.ctl.set_nonblocking(false);
        let _ = self.ctl.set_write_timeout(Some(Duration::from_millis(200)));
        let _ = self.ctl.write_all(&self.outbox[self.out_at..]);
        End::Protocol
    }

    fn kill_everything(&mut self) {
        procs::kill_tree(None, Some(self.me), &HashSet::new());
        while let Ok(Some(_)) = sys::wait_any(false) {}
    }
}
