//! The engine's settings: `SET name = value`, `RESET name`, `SHOW name`, and
//! [`Engine::set_setting`] for an embedder. `null_order` changes how the queries planned after
//! it are bound (views and sinks keep the plan they were created with); it is not part of a
//! checkpoint, but each view and sink created under a setting other than its default is
//! recorded with it, so recovery plans it the same way. `memory_limit` bounds the state of
//! every running query from the moment it is set (see [`super::memory`]); it is not recorded
//! either: a restarted engine has the limit it is started with.

use weir_common::{Result, Span, WeirError};
use weir_sql::{BindOptions, NullOrder};

use super::{show, Engine, ExecResult};

/// Every setting's name, as errors list them.
const NAMES: &[&str] = &["null_order", "memory_limit"];

/// The settings' current values.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub bind: BindOptions,
}

impl Settings {
    /// `text` (a CREATE statement) wrapped in the `SET` statements that reproduce these
    /// settings when it is replayed, and restore the defaults after it; `text` itself if every
    /// setting is at its default.
    pub fn wrap(&self, text: &str) -> String {
        if *self == Settings::default() {
            return text.to_string();
        }
        let text = text.trim().trim_end_matches(';');
        format!("SET null_order = '{}'; {text}; RESET null_order", self.bind.null_order.name())
    }
}

fn unknown(name: &str, span: Option<Span>) -> WeirError {
    WeirError::plan_at(
        format!("unknown setting '{name}' (the settings are: {})", NAMES.join(", ")),
        span,
    )
}

impl Engine {
    /// Sets a setting by name (`None`: back to its default), as `SET name = value` does.
    /// The settings: `null_order`, `'smallest'` (the default: NULL sorts before every value,
    /// as in SQLite) or `'largest'` (after every value, as in PostgreSQL), see
    /// [`Engine::set_null_order`]; `memory_limit`, a size such as `'512MB'` or `'none'` (the
    /// default), see [`Engine::set_memory_limit`].
    pub fn set_setting(&mut self, name: &str, value: Option<&str>) -> Result<()> {
        self.set_setting_at(name, value, None, None)
    }

    /// A setting's current value, as `SHOW name` prints it.
    pub fn setting(&self, name: &str) -> Result<String> {
        match name.to_ascii_lowercase().as_str() {
            "null_order" => Ok(self.settings.bind.null_order.name().to_string()),
            "memory_limit" => Ok(self
                .memory_limit()
                .map_or_else(|| "none".to_string(), super::memory::format_bytes)),
            _ => Err(unknown(name, None)),
        }
    }

    /// Where an `ORDER BY` term without `NULLS FIRST` or `NULLS LAST` puts NULL in the
    /// queries, views and sinks planned from now on: [`NullOrder::Smallest`] (the default)
    /// or [`NullOrder::Largest`] (PostgreSQL's order).
    pub fn set_null_order(&mut self, order: NullOrder) {
        self.settings.bind.null_order = order;
    }

    /// The current `null_order` setting.
    pub fn null_order(&self) -> NullOrder {
        self.settings.bind.null_order
    }

    pub(super) fn set_setting_at(
        &mut self,
        name: &str,
        value: Option<&str>,
        span: Option<Span>,
        value_span: Option<Span>,
    ) -> Result<()> {
        match name.to_ascii_lowercase().as_str() {
            "null_order" => {
                let order = match value {
                    None => NullOrder::default(),
                    Some(v) => NullOrder::parse(v).ok_or_else(|| {
                        WeirError::plan_at(
                            format!(
                                "invalid value '{v}' for setting null_order: expected \
                                 'smallest' (NULL before every value, as in SQLite; the \
                                 default) or 'largest' (NULL after every value, as in \
                                 PostgreSQL)"
                            ),
                            value_span,
                        )
                    })?,
                };
                self.set_null_order(order);
                Ok(())
            }
            "memory_limit" => {
                let limit = match value {
                    None => None,
                    Some(v) if v.eq_ignore_ascii_case("none") => None,
                    Some(v) => Some(super::memory::parse_bytes(v).ok_or_else(|| {
                        WeirError::plan_at(
                            format!(
                                "invalid value '{v}' for setting memory_limit: expected a size \
                                 such as '512MB', '2GB' or a number of bytes (units kB, MB, GB, \
                                 TB, powers of 1024), or 'none'"
                            ),
                            value_span,
                        )
                    })?),
                };
                self.set_memory_limit(limit);
                Ok(())
            }
            _ => Err(unknown(name, span)),
        }
    }

    /// `SHOW name` of a setting: one row, one column named after it.
    pub(super) fn show_setting(&self, name: &str, span: Option<Span>) -> Result<ExecResult> {
        let value = self.setting(name).map_err(|_| unknown(name, span))?;
        Ok(show::text_rows(&[&name.to_ascii_lowercase()], vec![vec![value]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_show_and_reset_null_order() {
        let mut e = Engine::new();
        assert_eq!(e.setting("null_order").unwrap(), "smallest");
        e.execute("SET null_order = 'postgres'").unwrap();
        assert_eq!(e.null_order(), NullOrder::Largest);
        assert_eq!(e.setting("NULL_ORDER").unwrap(), "largest");
        e.execute("RESET null_order").unwrap();
        assert_eq!(e.null_order(), NullOrder::Smallest);
        e.set_setting("null_order", Some("largest")).unwrap();
        e.execute("SET null_order TO DEFAULT").unwrap();
        assert_eq!(e.null_order(), NullOrder::Smallest);
        let err = e.execute("SET nul_order = 'largest'").unwrap_err().to_string();
        assert!(
            err.starts_with(
                "unknown setting 'nul_order' (the settings are: null_order, memory_limit) at line 1, column 5"
            ),
            "{err}"
        );
        let err = e.execute("SET null_order = 'nulls_last'").unwrap_err().to_string();
        assert!(err.starts_with("invalid value 'nulls_last' for setting null_order"), "{err}");
        assert!(err.contains("at line 1, column 18"), "{err}");
        let err = e.execute("SHOW nul_order").unwrap_err().to_string();
        assert!(err.starts_with("unknown setting 'nul_order'"), "{err}");
        assert!(e.set_setting("x", None).is_err());
    }

    #[test]
    fn a_view_is_recorded_with_the_setting_it_was_created_under() {
        let s = Settings { bind: BindOptions { null_order: NullOrder::Largest } };
        assert_eq!(
            s.wrap("CREATE VIEW v AS SELECT 1;"),
            "SET null_order = 'largest'; CREATE VIEW v AS SELECT 1; RESET null_order"
        );
        assert_eq!(
            Settings::default().wrap("CREATE VIEW v AS SELECT 1"),
            "CREATE VIEW v AS SELECT 1"
        );
    }
}
