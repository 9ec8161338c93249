//! The instance id (`INSTANCE_ID`) as claim owner.
//!
//! Claims are held under the instance's id, so that a restarted instance (same id)
//! takes back at once what it held when it died instead of waiting `LEASE_TIMEOUT`.
//! That is only safe when no *live* process uses the id too (two instances started
//! on one host with the default id, the host name): taking back would steal the
//! other's running work, and the two would renew each other's leases. So the id is
//! claimed with a session advisory lock held by a connection of its own for as long
//! as the process lives (PostgreSQL drops it when the process dies, however it
//! dies). A process that cannot get the lock holds its claims under a name of its
//! own (`{id}/{pid}/{uuid}`), takes nothing back, and says so in the log.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Row};
use tracing::{info, warn};
use uuid::Uuid;

use crate::store::StoreError;

/// How often the lock's connection is checked (and the lock taken again after the
/// database restarted).
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// Takes the advisory lock of `id` (two 32-bit keys: the namespace and the id's
/// hash, apart from the one-key locks of migrations and routing).
const TRY_LOCK: &str =
    "SELECT pg_try_advisory_lock(hashtext('hookbox instance'), hashtext($1)) AS got";

/// How many processes hold an `INSTANCE_ID` lock on this database: the live
/// instances (a process that runs under a name of its own is not counted).
pub(super) const LIVE: &str = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
     AND granted AND objsubid = 2 AND classid = hashtext('hookbox instance')::oid \
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// The claim owner of this process and whether it is the instance id itself.
pub(super) async fn take(
    options: &PgConnectOptions,
    id: &str,
) -> Result<(String, bool), StoreError> {
    let mut conn = PgConnection::connect_with(options).await?;
    if try_lock(&mut conn, id).await? {
        tokio::spawn(hold(options.clone(), id.to_owned(), conn));
        return Ok((id.to_owned(), true));
    }
    let own = format!("{id}/{}/{}", std::process::id(), Uuid::now_v7());
    warn!(
        instance_id = id,
        owner = %own,
        "another live process uses this INSTANCE_ID; claims are held under a name of this process's own, and a crash of it leaves them to LEASE_TIMEOUT"
    );
    Ok((own, false))
}

async fn try_lock(conn: &mut PgConnection, id: &str) -> Result<bool, StoreError> {
    Ok(sqlx::query(TRY_LOCK)
        .bind(id)
        .fetch_one(conn)
        .await?
        .try_get("got")?)
}

/// Keeps the lock's connection for the life of the process; after it broke (the
/// database restarted), connects and takes the lock again.
async fn hold(options: PgConnectOptions, id: String, mut conn: PgConnection) {
    let mut held = true;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if held && conn.ping().await.is_ok() {
            continue;
        }
        match PgConnection::connect_with(&options).await {
            Ok(mut fresh) => match try_lock(&mut fresh, &id).await {
                Ok(true) => {
                    if !held {
                        info!(instance_id = %id, "INSTANCE_ID lock taken again");
                    }
                    conn = fresh;
                    held = true;
                }
                Ok(false) => {
                    if held {
                        warn!(instance_id = %id, "another process took this INSTANCE_ID's lock while the database was away");
                    }
                    held = false;
                }
                Err(_) => held = false,
            },
            Err(_) => held = false,
        }
    }
}
