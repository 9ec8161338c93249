//! `kind = "exec"`: runs a program per event.
//!
//! The payload JSON goes to its stdin; `HOOKBOX_EVENT_ID`, `HOOKBOX_EVENT_TYPE`,
//! `HOOKBOX_EVENT_KEY` and `HOOKBOX_ATTEMPT` are in its environment, and
//! `TRACEPARENT` (with `TRACESTATE`) when the event has a trace context. Exit 0 is
//! success, 65 (`EX_DATAERR`) a permanent failure, anything else (or a signal) a
//! retryable one; the tail of stderr (≤ 2 KB) becomes `last_error`. There is no
//! shell unless the command names one. The program runs in its own process group,
//! and the whole group is killed when the attempt ends — by exit, by timeout or by
//! shutdown — so no grandchild outlives its attempt.
//!
//! The child's environment is clean: only the variables it is handed (see
//! [`INHERITED`] and the manifest's `[exec] env`, resolved when the manifest is
//! loaded) and the `HOOKBOX_*` ones set here. Nothing else of hookbox's environment
//! (`ADMIN_TOKEN`, `DATABASE_URL`, signing secrets) reaches it, so nothing it prints
//! to stderr can leak them into `last_error`, which unauthenticated reads show; the
//! values of the variables the manifest lists are hidden from it too (as
//! `[redacted]`), as are credentials of URLs it prints.
//!
//! The attempt ends with the program's exit, not with its pipes: a grandchild that
//! escaped the process group and still holds stderr gets [`STDERR_GRACE`] to let go,
//! then the stderr seen so far is used.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::super::{BoxHandler, Event, HandlerError, handler_fn};
use crate::redact::{Redactions, strip_named_credentials, strip_url_credentials};

/// Exit code that dead-letters at once (`EX_DATAERR` of sysexits.h).
pub const PERMANENT_EXIT_CODE: i32 = 65;
/// How much of stderr is kept.
pub const STDERR_TAIL_BYTES: usize = 2048;
/// How long stderr may stay open after the program exited (held by a grandchild
/// outside its process group) before the attempt ends without the rest of it.
pub const STDERR_GRACE: Duration = Duration::from_millis(250);
/// The variables of hookbox's own environment every child gets, when set.
pub const INHERITED: &[&str] = &["PATH", "HOME", "LANG", "TZ"];

/// A handler that runs `command` (program and arguments) per event, with `env`
/// (name, value) as its whole environment besides the `HOOKBOX_*` variables.
pub fn handler(command: Vec<String>, env: Vec<(String, String)>) -> BoxHandler {
    let hidden = Redactions::new(
        env.iter()
            .filter(|(name, _)| !INHERITED.contains(&name.as_str()))
            .map(|(_, value)| value.clone()),
    );
    let program: Arc<Program> = Arc::new(Program {
        command,
        env,
        hidden,
    });
    handler_fn(move |event: Event| {
        let program = program.clone();
        async move { run(&program, &event).await }
    })
}

/// What one exec handler runs.
struct Program {
    command: Vec<String>,
    env: Vec<(String, String)>,
    /// The listed variables' values, never shown in an error.
    hidden: Redactions,
}

/// Kills the process group when dropped (the attempt ended, one way or another).
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // ESRCH (nobody left) is the normal case after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

async fn run(spec: &Program, event: &Event) -> Result<(), HandlerError> {
    let Some((program, args)) = spec.command.split_first() else {
        return Err(HandlerError::Permanent("empty exec command".into()));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("HOOKBOX_EVENT_ID", event.id.to_string())
        .env("HOOKBOX_EVENT_TYPE", &event.event_type)
        .env("HOOKBOX_EVENT_KEY", &event.idempotency_key)
        .env("HOOKBOX_ATTEMPT", event.attempt.to_string());
    if let Some(trace) = event.trace() {
        command.env("TRACEPARENT", trace.traceparent());
        if let Some(state) = trace.tracestate() {
            command.env("TRACESTATE", state);
        }
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| HandlerError::Retry(format!("cannot start {program:?}: {e}")))?;
    let guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    );
    let stderr = Tail::spawn(child.stderr.take());
    // Feed stdin while waiting for the exit: a program that exits without reading
    // it all (while a grandchild keeps the pipe open) must not block the attempt.
    let stdin = child.stdin.take();
    let exit = child.wait();
    tokio::pin!(exit);
    let status = tokio::select! {
        status = &mut exit => status,
        () = feed(stdin, event.payload().as_bytes()) => exit.await,
    }
    .map_err(|e| HandlerError::Retry(format!("waiting for {program:?}: {e}")))?;
    // Kill what the program left behind, so pipes it holds close now.
    drop(guard);
    let stderr = stderr.finish(STDERR_GRACE).await;
    let stderr = spec.hidden.apply(&stderr);
    let stderr = strip_named_credentials(&strip_url_credentials(&stderr)).into_owned();
    match status.code() {
        Some(0) => Ok(()),
        Some(PERMANENT_EXIT_CODE) => {
            Err(HandlerError::Permanent(describe("exit code 65", &stderr)))
        }
        Some(code) => Err(HandlerError::Retry(describe(
            &format!("exit code {code}"),
            &stderr,
        ))),
        None => Err(HandlerError::Retry(describe("killed by a signal", &stderr))),
    }
}

/// Writes the payload to stdin and closes it. A program that does not read its
/// input is fine: a broken pipe is ignored.
async fn feed(stdin: Option<tokio::process::ChildStdin>, payload: &[u8]) {
    if let Some(mut stdin) = stdin {
        let _ = stdin.write_all(payload).await;
    }
}

/// `{what}: {stderr}`, at most [`Attempt::MAX_ERROR_BYTES`](crate::model::Attempt::MAX_ERROR_BYTES):
/// what does not fit goes from the front of stderr, whose last lines usually say
/// what went wrong.
fn describe(what: &str, stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        return what.to_owned();
    }
    let room = crate::model::Attempt::MAX_ERROR_BYTES.saturating_sub(what.len() + 2);
    let mut start = stderr.len().saturating_sub(room);
    while !stderr.is_char_boundary(start) {
        start += 1;
    }
    format!("{what}: {}", &stderr[start..])
}

/// A task reading a stream to its end, keeping its last [`STDERR_TAIL_BYTES`];
/// stopped when dropped (the attempt was cancelled) or finished.
struct Tail {
    kept: Arc<Mutex<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl Tail {
    fn spawn(stream: Option<impl AsyncRead + Unpin + Send + 'static>) -> Self {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(read_into(stream, kept.clone()));
        Self { kept, task }
    }

    /// Waits up to `grace` for the end of the stream, then returns what was read.
    async fn finish(mut self, grace: Duration) -> String {
        let _ = tokio::time::timeout(grace, &mut self.task).await;
        self.task.abort();
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let start = kept.len().saturating_sub(STDERR_TAIL_BYTES);
        String::from_utf8_lossy(&kept[start..]).into_owned()
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_into(stream: Option<impl AsyncRead + Unpin>, kept: Arc<Mutex<Vec<u8>>>) {
    let Some(mut stream) = stream else {
        return;
    };
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * STDERR_TAIL_BYTES {
            let extra = kept.len() - STDERR_TAIL_BYTES;
            kept.drain(..extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_stderr_keeps_its_end_within_the_bound() {
        let stderr = format!("{}é the real error", "x".repeat(3000));
        let message = describe("exit code 3", &stderr);
        assert!(message.len() <= crate::model::Attempt::MAX_ERROR_BYTES);
        assert!(message.starts_with("exit code 3: "), "{message}");
        assert!(message.ends_with("é the real error"), "{message}");
        assert_eq!(describe("exit code 1", "  "), "exit code 1");
        assert_eq!(describe("exit code 1", "short\n"), "exit code 1: short");
    }
}
