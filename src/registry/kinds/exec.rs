//! `kind = "exec"`: runs a program per event.
//!
//! The payload JSON goes to its stdin; `HOOKBOX_EVENT_ID`, `HOOKBOX_EVENT_TYPE`,
//! `HOOKBOX_EVENT_KEY` and `HOOKBOX_ATTEMPT` are in its environment. Exit 0 is
//! success, 65 (`EX_DATAERR`) a permanent failure, anything else (or a signal) a
//! retryable one; the tail of stderr (≤ 2 KB) becomes `last_error`. There is no
//! shell unless the command names one. The program runs in its own process group,
//! and the whole group is killed when the attempt ends — by exit, by timeout or by
//! shutdown — so no grandchild outlives its attempt.

use std::process::Stdio;
use std::sync::Arc;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::super::{BoxHandler, Event, HandlerError, handler_fn};

/// Exit code that dead-letters at once (`EX_DATAERR` of sysexits.h).
pub const PERMANENT_EXIT_CODE: i32 = 65;
/// How much of stderr is kept.
pub const STDERR_TAIL_BYTES: usize = 2048;

/// A handler that runs `command` (program and arguments) per event.
pub fn handler(command: Vec<String>) -> BoxHandler {
    let command: Arc<[String]> = command.into();
    handler_fn(move |event: Event| {
        let command = command.clone();
        async move { run(&command, &event).await }
    })
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

async fn run(command: &[String], event: &Event) -> Result<(), HandlerError> {
    let Some((program, args)) = command.split_first() else {
        return Err(HandlerError::Permanent("empty exec command".into()));
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("HOOKBOX_EVENT_ID", event.id.to_string())
        .env("HOOKBOX_EVENT_TYPE", &event.event_type)
        .env("HOOKBOX_EVENT_KEY", &event.idempotency_key)
        .env("HOOKBOX_ATTEMPT", event.attempt.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
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
    let stderr = tokio::spawn(tail(child.stderr.take()));
    let stdout = tokio::spawn(tail(child.stdout.take()));
    if let Some(mut stdin) = child.stdin.take() {
        // A program that does not read its input is fine: ignore a broken pipe.
        let _ = stdin.write_all(event.payload().as_bytes()).await;
    }
    let status = child
        .wait()
        .await
        .map_err(|e| HandlerError::Retry(format!("waiting for {program:?}: {e}")))?;
    // Kill what the program left behind, so pipes it holds close now.
    drop(guard);
    stdout.abort();
    let stderr = stderr.await.unwrap_or_default();
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

fn describe(what: &str, stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {stderr}")
    }
}

/// Reads a stream to its end, keeping its last [`STDERR_TAIL_BYTES`] as text.
async fn tail(stream: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * STDERR_TAIL_BYTES {
            kept.drain(..kept.len() - STDERR_TAIL_BYTES);
        }
    }
    let start = kept.len().saturating_sub(STDERR_TAIL_BYTES);
    String::from_utf8_lossy(&kept[start..]).into_owned()
}
