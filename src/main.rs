//! The `hookbox` binary: a thin CLI over the library.
//!
//! Exit codes: 0 done, 1 failure at run time (or a failed check), 2 bad configuration
//! (including a SQLite file that another hookbox process already serves).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hookbox::config::Config;

/// jemalloc instead of the system allocator: a request allocates and frees many
/// small buffers on one worker thread and frees some on another, where glibc's
/// malloc spent about a fifth of the intake path's instructions (callgrind). Its
/// background thread (switched on in [`serve`]) returns freed memory to the
/// system after a few seconds, which mimalloc (the allocator before) and glibc
/// never did once a burst of connections was gone (docs/security.md, "What a
/// sender can and cannot do").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// hookbox — a webhook inbox and delivery service.
///
/// Configuration comes from built-in defaults, then config/hookbox.toml (or the file
/// named by HOOKBOX_CONFIG), then environment variables (BIND_ADDR, DB_PATH, …; see
/// config/hookbox.toml for every setting).
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default when no command is given).
    Serve,
    /// Apply the database schema and exit.
    Migrate,
    /// Validate handler manifests and print the routing table.
    Handlers {
        #[command(subcommand)]
        command: HandlersCommand,
    },
    /// Validate source manifests and print the sources.
    Sources {
        #[command(subcommand)]
        command: SourcesCommand,
    },
    /// Seal every stored subscriber secret again under ENCRYPTION_KEY, opening
    /// them with it or ENCRYPTION_KEYS_OLD (secrets stored in the clear too).
    RotateKey,
    /// Print the OpenAPI 3.1 document that GET /openapi.json serves.
    Openapi,
    /// Print a new signing secret (whsec_ and 32 random bytes in base64), for a
    /// subscriber's `secret`, a manifest's `secret_env` or a source.
    Secret,
    /// Exit 0 when the service at URL answers /ready with 200 (for HEALTHCHECK).
    Health {
        /// Base URL of the service.
        #[arg(default_value = "http://127.0.0.1:8000")]
        url: String,
        /// Give up after this long.
        #[arg(long, default_value = "3s", value_parser = parse_duration)]
        timeout: Duration,
    },
}

#[derive(Subcommand)]
enum HandlersCommand {
    /// Check every manifest in DIR (default: HANDLERS_DIR); exit 1 on any error.
    Check {
        /// The manifests folder.
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SourcesCommand {
    /// Check every manifest in DIR (default: SOURCES_DIR); exit 1 on any error.
    Check {
        /// The manifests folder.
        dir: Option<PathBuf>,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    hookbox::config::parse_duration(s).ok_or_else(|| format!("not a duration: {s:?}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The API's description and a new secret need no configuration (nor a valid one).
    match cli.command {
        Some(Command::Openapi) => {
            println!("{}", hookbox::app::openapi_json());
            return ExitCode::SUCCESS;
        }
        Some(Command::Secret) => return print_secret(),
        _ => {}
    }
    // A `.env` file in the working directory fills in what the environment does not
    // set (the environment wins).
    match dotenvy::dotenv() {
        Ok(_) => {}
        Err(e) if e.not_found() => {}
        Err(e) => {
            eprintln!("hookbox: .env: {}", dotenv_error(&e));
            return ExitCode::from(2);
        }
    }
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hookbox: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hookbox: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => serve(config).await,
            Command::Migrate => migrate(config).await,
            Command::RotateKey => rotate_key(config).await,
            Command::Health { url, timeout } => health(&url, timeout).await,
            Command::Handlers {
                command: HandlersCommand::Check { dir },
            } => Ok(check_handlers(&config, dir)),
            Command::Sources {
                command: SourcesCommand::Check { dir },
            } => Ok(check_sources(&config, dir)),
            Command::Openapi | Command::Secret => Ok(ExitCode::SUCCESS),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hookbox: {}", said_once(&e));
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The error and its causes, each said once: a cause whose text the message
/// already holds (many errors quote their source) is not said again.
/// What is wrong with `.env`, on one line and without the line's text: dotenvy
/// quotes the whole rest of the file from the bad line on, and it may hold a
/// secret (`ADMIN_TOKEN="…` with its quote unclosed). The variable's name is
/// shown when the line has one.
fn dotenv_error(e: &dotenvy::Error) -> String {
    match e {
        dotenvy::Error::LineParse(line, _) => {
            let name = line.split_once('=').map(|(n, _)| n.trim()).filter(|n| {
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b' ')
            });
            match name {
                Some(name) => format!(
                    "the line of {name} does not parse (an unclosed quote?); its text is not shown"
                ),
                None => {
                    "a line does not parse (NAME=value expected); its text is not shown".to_owned()
                }
            }
        }
        other => other.to_string(),
    }
}

fn said_once(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn print_secret() -> ExitCode {
    match hookbox::app::new_signing_secret() {
        Ok(secret) => {
            println!("{secret}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hookbox: no randomness from the operating system: {e}");
            ExitCode::FAILURE
        }
    }
}

/// 2 for the run-time errors that are the configuration's fault
/// (docs/configuration.md, "Bad configuration"), else 1.
fn exit_code(e: &anyhow::Error) -> u8 {
    use hookbox::{app::AppError, store::StoreError};
    match e.downcast_ref::<AppError>() {
        Some(
            AppError::Store(
                StoreError::InUse { .. }
                | StoreError::NotWritable { .. }
                | StoreError::Sealed { .. },
            )
            | AppError::UnsupportedDatabase(_)
            | AppError::NoEncryptionKey,
        ) => 2,
        _ => 1,
    }
}

async fn serve(config: Config) -> anyhow::Result<ExitCode> {
    // Signals are caught from here on: one that arrives while starting (say,
    // while waiting for the database) stops the start, one after it the service.
    let signals = shutdown_signal().context("signal handlers")?;
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            signals.await;
            stop.cancel();
        }
    });
    hookbox::telemetry::init_tracing(&config.log_level, config.log_format);
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %e, "freed memory is not returned to the system: no jemalloc background thread");
    }
    let prometheus = hookbox::telemetry::install_prometheus().context("metrics recorder")?;
    hookbox::telemetry::describe();
    let registry = match hookbox::app::load_registry(&config, &config.handlers_dir) {
        Ok(r) => r,
        Err(errors) => {
            for e in errors {
                eprintln!("hookbox: {e}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    tracing::info!(handlers = registry.routes().len(), dir = %config.handlers_dir.display(), "handlers loaded");
    let sources = match hookbox::sources::manifest::load_dir(&config.sources_dir, &|name| {
        std::env::var(name).ok()
    }) {
        Ok(s) => s,
        Err(errors) => {
            for e in errors {
                eprintln!("hookbox: {e}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    tracing::info!(sources = sources.len(), dir = %config.sources_dir.display(), "sources loaded");
    let starting =
        hookbox::app::App::bind_with_sources(config, registry, sources, Some(prometheus));
    let app = tokio::select! {
        app = starting => app?,
        () = stop.cancelled() => {
            tracing::info!("stopped while starting");
            return Ok(ExitCode::SUCCESS);
        }
    };
    app.run(stop.cancelled_owned()).await?;
    Ok(ExitCode::SUCCESS)
}

/// A handlers or sources folder named on the command line that does not exist:
/// an error (exit 1, as for any error of a check), not "0 handlers" — most
/// likely a typo. (Without a folder named, a missing `HANDLERS_DIR` or
/// `SOURCES_DIR` is checked as the service reads it: none.)
fn missing_folder(dir: Option<&PathBuf>) -> Option<ExitCode> {
    let dir = dir.filter(|d| !d.is_dir())?;
    eprintln!("error: {}: no such folder", dir.display());
    Some(ExitCode::FAILURE)
}

fn check_handlers(config: &Config, dir: Option<PathBuf>) -> ExitCode {
    if let Some(code) = missing_folder(dir.as_ref()) {
        return code;
    }
    // What loading warns about (a target the address guard will refuse) is shown.
    hookbox::telemetry::init_tracing("warn", config.log_format);
    let dir = dir.unwrap_or_else(|| config.handlers_dir.clone());
    match hookbox::app::load_registry(config, &dir) {
        Ok(registry) => {
            println!("{}", hookbox::registry::manifest::table(&registry));
            println!(
                "{} handler(s) in {}",
                registry.routes().len(),
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                println!("error: {e}");
            }
            println!("{} error(s) in {}", errors.len(), dir.display());
            ExitCode::FAILURE
        }
    }
}

fn check_sources(config: &Config, dir: Option<PathBuf>) -> ExitCode {
    use hookbox::sources::manifest;
    if let Some(code) = missing_folder(dir.as_ref()) {
        return code;
    }
    let dir = dir.unwrap_or_else(|| config.sources_dir.clone());
    match manifest::load_dir(&dir, &|name| std::env::var(name).ok()) {
        Ok(sources) => {
            println!("{}", manifest::table(&sources));
            println!("{} source(s) in {}", sources.len(), dir.display());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                println!("error: {e}");
            }
            println!("{} error(s) in {}", errors.len(), dir.display());
            ExitCode::FAILURE
        }
    }
}

async fn migrate(config: Config) -> anyhow::Result<ExitCode> {
    hookbox::app::open_store(&config).await?;
    println!("migrations applied");
    Ok(ExitCode::SUCCESS)
}

async fn rotate_key(config: Config) -> anyhow::Result<ExitCode> {
    let sealed = hookbox::app::rotate_key(&config).await?;
    let key = config.encryption.current_id().unwrap_or_default();
    println!("{sealed} subscriber secrets sealed under key {key}");
    Ok(ExitCode::SUCCESS)
}

/// A minimal HTTP/1.1 GET of `/ready` over a plain TCP stream (no client library
/// needed for one request to a local port).
async fn health(url: &str, timeout: Duration) -> anyhow::Result<ExitCode> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = url
        .strip_prefix("http://")
        .context("health: only http:// URLs are supported")?
        .trim_end_matches('/');
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        let request =
            format!("GET /ready HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head)
    };
    let head = tokio::time::timeout(timeout, check)
        .await
        .context("health: timed out")?
        .with_context(|| format!("health: {authority}"))?;
    let ok = head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200");
    println!("{}", if ok { "ready" } else { "not ready" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Installs the SIGTERM and Ctrl-C (SIGINT) handlers now and returns what resolves
/// on either. Installed before startup, so that a signal arriving while hookbox
/// starts (or just after it is ready) stops it in order instead of killing it with
/// the signal's default action.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {},
                _ = interrupt.recv() => {},
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
