//! Rebuilds hookbox when a migration is added or changed: `sqlx::migrate!` embeds
//! the `migrations/` folders at compile time, and cargo does not watch them
//! otherwise (a new migration file alone left the old binary in place).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
