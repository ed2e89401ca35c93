//! Errors in a pipeline file: the list that the runner and every component (a source's, a
//! sink's, the query API's own checks) add to, so that every problem in the file comes back
//! at once, each naming the file, line and key; and the checks several components share.

use std::fmt;
use std::path::Path;

/// One problem in a pipeline file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as given.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key, e.g. `sources[0].tls.cert`.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}: {}", self.file, self.key, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.key, self.message),
        }
    }
}

/// Every problem found in a pipeline file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Collects errors while a file is decoded and checked.
pub struct Errors<'a> {
    file: &'a str,
    text: &'a str,
    /// The errors found so far, in the order found.
    pub list: Vec<ConfigError>,
    /// Where each section and array item starts, so later checks can name a line.
    anchors: Vec<(String, usize)>,
}

impl<'a> Errors<'a> {
    /// For the file named `file` whose text is `text` (to name lines).
    pub fn new(file: &'a str, text: &'a str) -> Self {
        Errors { file, text, list: Vec::new(), anchors: Vec::new() }
    }

    /// Records a problem with `key`; `at` is a byte offset into the file, when known, else the
    /// start of the section or item the key is in.
    pub fn push(&mut self, key: impl Into<String>, at: Option<usize>, message: impl Into<String>) {
        let key = key.into();
        let at = at.or_else(|| {
            self.anchors
                .iter()
                .filter(|(k, _)| {
                    key.starts_with(k.as_str()) && key[k.len()..].chars().next().is_none_or(|c| c == '.' || c == '[')
                })
                .max_by_key(|(k, _)| k.len())
                .map(|(_, o)| *o)
        });
        let line = at.map(|o| self.text[..o.min(self.text.len())].matches('\n').count() + 1);
        self.list.push(ConfigError { file: self.file.to_string(), line, key, message: message.into() });
    }

    pub(crate) fn anchor(&mut self, key: String, at: usize) {
        self.anchors.push((key, at));
    }

    pub(crate) fn push_toml(&mut self, key: &str, e: toml::de::Error, fallback_at: usize) {
        // Without the input attached, the error's text is the message plus `in `a.b`` naming
        // the nested key; fold that into the key.
        let text = e.to_string();
        let mut lines = text.trim_end().lines();
        let message = lines.next().unwrap_or("").to_string();
        let nested = lines.find_map(|l| l.strip_prefix("in `").and_then(|l| l.strip_suffix('`'))).map(str::to_string);
        let key = match nested {
            Some(n) if !key.is_empty() => format!("{key}.{n}"),
            Some(n) => n,
            None => key.to_string(),
        };
        self.push(key, Some(e.span().map_or(fallback_at, |s| s.start)), message);
    }
}

/// Checks a listener's TLS files and bearer token file (the webhook's, the query API's).
pub fn check_credentials(
    errors: &mut Errors<'_>,
    key: &str,
    tls: Option<&crate::listen::TlsConfig>,
    token: Option<&Path>,
) {
    if let Some(tls) = tls {
        check_file(errors, &format!("{key}.tls.cert"), &tls.cert);
        check_file(errors, &format!("{key}.tls.key"), &tls.key);
        if let Some(ca) = &tls.client_ca {
            check_file(errors, &format!("{key}.tls.client_ca"), ca);
        }
    }
    if let Some(t) = token {
        match std::fs::read_to_string(t) {
            Ok(s) if s.trim().is_empty() => {
                errors.push(format!("{key}.bearer_token_file"), None, format!("{} is empty", t.display()))
            }
            Ok(_) => {}
            Err(e) => {
                errors.push(format!("{key}.bearer_token_file"), None, format!("cannot read {}: {e}", t.display()))
            }
        }
    }
}

/// Checks that `path` names a readable file; `key` names it in the error.
pub fn check_file(errors: &mut Errors<'_>, key: &str, path: &Path) {
    if let Err(e) = std::fs::File::open(path) {
        errors.push(key, None, format!("cannot read {}: {e}", path.display()));
    }
}
