//! The writer's SQL scripts: text and bound values built side by side.
//!
//! The writer builds one script per batch (several multi-row statements), binding
//! some ten values per event. sqlx's `QueryBuilder` formats every separator it
//! pushes through `core::fmt` (`write!`), which callgrind counted at ~140
//! instructions a bind; [`Script`] appends text with `push_str` and adds the
//! values to the arguments directly. Only text written in this crate goes into the
//! SQL: values are always bound.
//!
//! ```ignore
//! let mut script = Script::new("UPDATE events SET status = 'failed' WHERE id IN (");
//! let mut list = script.separated(", ");
//! for id in ["a", "b"] {
//!     list.push_bind(id);
//! }
//! script.push(")");
//! script.build()?.execute(&mut *conn).await?;
//! ```

use sqlx::sqlite::SqliteArguments;
use sqlx::{Arguments, AssertSqlSafe, Encode, Sqlite, Type};

/// A script being built: its SQL text and the values its `?` placeholders take, in
/// order. A value that cannot be encoded fails [`Script::build`].
#[derive(Default)]
pub(super) struct Script {
    sql: String,
    args: SqliteArguments,
    failed: Option<sqlx::error::BoxDynError>,
}

/// A query made from a [`Script`].
pub(super) type ScriptQuery = sqlx::query::Query<'static, Sqlite, SqliteArguments>;

impl Script {
    /// A script that begins with `sql`.
    pub(super) fn new(sql: impl Into<String>) -> Self {
        Self {
            sql: sql.into(),
            ..Self::default()
        }
    }

    /// Appends SQL text.
    pub(super) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Appends a placeholder and binds `value` to it.
    pub(super) fn push_bind<'t, T>(&mut self, value: T) -> &mut Self
    where
        T: Encode<'t, Sqlite> + Type<Sqlite>,
    {
        self.sql.push('?');
        if let Err(e) = self.args.add(value) {
            self.failed.get_or_insert(e);
        }
        self
    }

    /// A list whose items are joined by `separator`.
    pub(super) fn separated(&mut self, separator: &'static str) -> Separated<'_> {
        Separated {
            script: self,
            separator,
            first: true,
        }
    }

    /// `VALUES (…), (…)`: one parenthesised row per item, whose values `row`
    /// binds.
    pub(super) fn push_values<I, F>(&mut self, items: I, mut row: F) -> &mut Self
    where
        I: IntoIterator,
        F: FnMut(Separated<'_>, I::Item),
    {
        self.push("VALUES ");
        for (i, item) in items.into_iter().enumerate() {
            self.push(if i == 0 { "(" } else { ", (" });
            row(self.separated(", "), item);
            self.push(")");
        }
        self
    }

    /// The query, or the first value that could not be encoded.
    pub(super) fn build(self) -> Result<ScriptQuery, sqlx::Error> {
        match self.failed {
            Some(e) => Err(sqlx::Error::Encode(e)),
            None => Ok(sqlx::query_with(AssertSqlSafe(self.sql), self.args)),
        }
    }

    /// The SQL text so far (for tests).
    #[cfg(test)]
    pub(super) fn sql(&self) -> &str {
        &self.sql
    }
}

/// Items of a list in a [`Script`], joined by a separator.
pub(super) struct Separated<'a> {
    script: &'a mut Script,
    separator: &'static str,
    first: bool,
}

impl Separated<'_> {
    /// Appends the separator (but before the first item) and a bound value.
    pub(super) fn push_bind<'t, T>(&mut self, value: T) -> &mut Self
    where
        T: Encode<'t, Sqlite> + Type<Sqlite>,
    {
        if !self.first {
            self.script.push(self.separator);
        }
        self.first = false;
        self.script.push_bind(value);
        self
    }

    /// Appends `n` NULLs: a padding row, which every statement of the writer
    /// leaves out (an id that is NULL equals nothing, and the inserts' `WHERE`
    /// skips it). Binding NULL allocates nothing, where a text is copied into a
    /// new allocation twice.
    pub(super) fn push_nulls(&mut self, n: usize) -> &mut Self {
        for _ in 0..n {
            self.push_bind(None::<String>);
        }
        self
    }
}

/// `items`, then `None`s up to `rows`: a statement's rows and its padding rows
/// (see [`Separated::push_nulls`]).
pub(super) fn padded<T: Copy>(items: &[T], rows: usize) -> impl Iterator<Item = Option<T>> + '_ {
    let padding = std::iter::repeat_n(None, rows.saturating_sub(items.len()));
    items.iter().copied().map(Some).chain(padding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_rows_are_joined_as_query_builder_joins_them() {
        let mut script = Script::new("SELECT 1 WHERE x IN (");
        let mut list = script.separated(", ");
        for v in [1_i64, 2, 3] {
            list.push_bind(v);
        }
        script.push("); INSERT INTO t (a, b) ");
        script.push_values([("x", 1_i64), ("y", 2)], |mut row, (a, b)| {
            row.push_bind(a).push_bind(b);
        });
        assert_eq!(
            script.sql(),
            "SELECT 1 WHERE x IN (?, ?, ?); INSERT INTO t (a, b) VALUES (?, ?), (?, ?)"
        );
        assert_eq!(script.args.len(), 7);
    }

    #[tokio::test]
    async fn a_built_script_runs_with_its_values() {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .expect("memory database");
        let mut script = Script::new("CREATE TABLE t (a TEXT, b INTEGER); INSERT INTO t (a, b) ");
        script.push_values([("x", 1_i64), ("y", 2)], |mut row, (a, b)| {
            row.push_bind(a.to_owned()).push_bind(b);
        });
        script.push("; SELECT a || b FROM t ORDER BY b");
        let rows = script
            .build()
            .expect("values encode")
            .fetch_all(&mut conn)
            .await
            .expect("script runs");
        let got: Vec<String> = rows
            .iter()
            .map(|r| sqlx::Row::get::<String, _>(r, 0))
            .collect();
        assert_eq!(got, ["x1", "y2"]);
    }
}
