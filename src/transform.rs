//! Transforms (SPEC §12): JavaScript that reshapes what is delivered or stored,
//! run in an embedded, sandboxed QuickJS (`rquickjs`).
//!
//! A transform's source defines `function handler(webhook)`: it gets a JSON object
//! and returns one (or changes `webhook` in place and returns it). Each run is
//! held to [`TIME_LIMIT`] by the interpreter's interrupt handler and to
//! [`MEMORY_LIMIT`] by the runtime's allocator — the engine stops the script, no
//! thread is abandoned — and has no I/O, no timers and no network (QuickJS's core
//! has none: `fetch`, `require`, `setTimeout` are undefined). A throw, a limit or
//! an answer that is not an object is a [`TransformError`].
//!
//! A [`Transform`] is compiled once (a syntax error is reported with its line),
//! then runs on warm runtimes pooled per transform: a run takes one from the pool
//! (or makes one), and gives it back unless a limit was hit (a runtime that ran
//! out of memory or time is dropped, not reused).
//!
//! ```
//! use hookbox::transform::Transform;
//! use serde_json::json;
//!
//! let rename = Transform::compile("rename.js",
//!     "function handler(webhook) { webhook.payload.total = webhook.payload.amount; \
//!      delete webhook.payload.amount; return webhook; }").unwrap();
//! let out = rename.run(&json!({"payload": {"amount": 5}})).unwrap();
//! assert_eq!(out, json!({"payload": {"total": 5}}));
//! assert!(Transform::compile("bad.js", "function handler(w) {").is_err());
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rquickjs::{CatchResultExt, CaughtError, Context, Function, Runtime};
use serde_json::Value;

/// How long one run may take.
pub const TIME_LIMIT: Duration = Duration::from_millis(100);
/// How much memory one runtime may allocate (the script's and the engine's own).
pub const MEMORY_LIMIT: usize = 16 << 20;
/// Warm runtimes kept per transform.
const POOL_SIZE: usize = 8;
/// The source text a transform may have.
pub const MAX_SOURCE_BYTES: usize = 256 << 10;

/// Why a transform did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// The source does not compile, or defines no `handler` function.
    #[error("{0}")]
    Compile(String),
    /// It threw (the message and where).
    #[error("it threw: {0}")]
    Threw(String),
    /// It ran past [`TIME_LIMIT`].
    #[error("it ran longer than {} ms and was stopped", TIME_LIMIT.as_millis())]
    Timeout,
    /// It allocated past [`MEMORY_LIMIT`].
    #[error("it used more than {} MB and was stopped", MEMORY_LIMIT >> 20)]
    Memory,
    /// What it returned is not what was expected.
    #[error("{0}")]
    Answer(String),
}

/// A compiled transform with its pool of warm runtimes.
pub struct Transform {
    name: String,
    source: Arc<str>,
    pool: Mutex<Vec<Engine>>,
}

impl std::fmt::Debug for Transform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transform")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// One runtime with the transform's script evaluated in its context.
struct Engine {
    /// Kept for as long as its context (the context holds it too).
    _runtime: Runtime,
    context: Context,
    /// Microseconds since `origin` after which the interrupt handler stops the run.
    deadline: Arc<AtomicU64>,
    origin: Instant,
}

impl Transform {
    /// Compiles `source` (named `name` in errors): a syntax error, or no
    /// `handler` function, is an error naming the line.
    pub fn compile(name: &str, source: &str) -> Result<Self, TransformError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(TransformError::Compile(format!(
                "{name}: over {} KB",
                MAX_SOURCE_BYTES >> 10
            )));
        }
        let source: Arc<str> = Arc::from(source);
        let engine = Engine::new(name, &source)?;
        Ok(Self {
            name: name.to_owned(),
            source,
            pool: Mutex::new(vec![engine]),
        })
    }

    /// Its name (a file name, or `subscriber NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Runs `handler(input)` and returns its answer (an object). Blocks for at
    /// most [`TIME_LIMIT`]: call it from a blocking thread
    /// (`tokio::task::spawn_blocking`), not from an async task.
    pub fn run(&self, input: &Value) -> Result<Value, TransformError> {
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let engine = match taken {
            Some(engine) => engine,
            None => Engine::new(&self.name, &self.source)?,
        };
        let result = engine.call(input);
        let spent = matches!(
            result,
            Err(TransformError::Timeout | TransformError::Memory)
        );
        if !spent {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            if pool.len() < POOL_SIZE {
                pool.push(engine);
            }
        }
        result
    }
}

impl Engine {
    fn new(name: &str, source: &str) -> Result<Self, TransformError> {
        let fail = |e: rquickjs::Error| TransformError::Compile(format!("{name}: {e}"));
        let runtime = Runtime::new().map_err(fail)?;
        runtime.set_memory_limit(MEMORY_LIMIT);
        runtime.set_max_stack_size(1 << 20);
        let deadline = Arc::new(AtomicU64::new(u64::MAX));
        let origin = Instant::now();
        let stop = deadline.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || {
            micros(origin.elapsed()) > stop.load(Ordering::Relaxed)
        })));
        let context = Context::full(&runtime).map_err(fail)?;
        let engine = Self {
            _runtime: runtime,
            context,
            deadline,
            origin,
        };
        engine.arm();
        let loaded = engine.context.with(|ctx| {
            ctx.eval::<(), _>(source)
                .catch(&ctx)
                .map_err(|e| format!("{name}: {}", where_(&e)))?;
            ctx.globals()
                .get::<_, Function>("handler")
                .map(drop)
                .map_err(|_| format!("{name}: defines no function handler(webhook)"))
        });
        engine.disarm();
        loaded.map_err(TransformError::Compile)?;
        Ok(engine)
    }

    /// Starts the clock of one run.
    fn arm(&self) {
        let at = micros(self.origin.elapsed()) + micros(TIME_LIMIT);
        self.deadline.store(at, Ordering::Relaxed);
    }

    fn disarm(&self) {
        self.deadline.store(u64::MAX, Ordering::Relaxed);
    }

    fn call(&self, input: &Value) -> Result<Value, TransformError> {
        let text =
            serde_json::to_string(input).map_err(|e| TransformError::Answer(e.to_string()))?;
        self.arm();
        let answer = self
            .context
            .with(|ctx| -> Result<Option<String>, CaughtText> {
                let handler: Function = ctx.globals().get("handler").catch(&ctx).map_err(caught)?;
                let argument = ctx.json_parse(text).catch(&ctx).map_err(caught)?;
                let out: rquickjs::Value = handler.call((argument,)).catch(&ctx).map_err(caught)?;
                if !out.is_object() || out.is_array() || out.is_function() {
                    return Err(CaughtText::NotObject);
                }
                let json = ctx.json_stringify(out).catch(&ctx).map_err(caught)?;
                json.map(|s| s.to_string())
                    .transpose()
                    .catch(&ctx)
                    .map_err(caught)
            });
        let timed_out = micros(self.origin.elapsed()) > self.deadline.load(Ordering::Relaxed);
        self.disarm();
        match answer {
            Ok(Some(text)) => serde_json::from_str(&text)
                .map_err(|e| TransformError::Answer(format!("its answer is not JSON: {e}"))),
            Ok(None) => Err(TransformError::Answer("handler returned nothing".into())),
            Err(CaughtText::NotObject) => Err(TransformError::Answer(
                "handler must return an object (the webhook)".into(),
            )),
            Err(_) if timed_out => Err(TransformError::Timeout),
            Err(CaughtText::Null) => Err(TransformError::Memory),
            Err(CaughtText::Message(m)) if m.contains("out of memory") => {
                Err(TransformError::Memory)
            }
            Err(CaughtText::Message(m)) => Err(TransformError::Threw(m)),
        }
    }
}

/// A caught error as text (it borrows the context, so it is turned into text
/// inside it).
enum CaughtText {
    Message(String),
    /// `null` was thrown: what QuickJS throws when it cannot even allocate the
    /// exception (out of memory).
    Null,
    NotObject,
}

fn caught(e: CaughtError<'_>) -> CaughtText {
    match &e {
        CaughtError::Value(v) if v.is_null() => CaughtText::Null,
        _ => CaughtText::Message(where_(&e)),
    }
}

/// A caught error's text, its positions as `line L:C` (QuickJS names the script
/// `eval_script`).
fn where_(e: &CaughtError<'_>) -> String {
    let text = match e {
        CaughtError::Exception(x) => {
            let message = x.message().unwrap_or_default();
            let stack = x.stack().unwrap_or_default();
            format!("{message} {}", stack.trim())
        }
        CaughtError::Value(v) => format!("{v:?}"),
        CaughtError::Error(e) => e.to_string(),
    };
    text.replace("eval_script:", "line ").trim().to_owned()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
