//! What is never kept: the values of sensitive fields (a Secret's `data` and `stringData`,
//! passwords and tokens wherever they appear, and any field a pipeline marks with
//! `[[sensitive]]`). An object's content is redacted once, where it is read from the audit
//! event and before anything keeps it: the cache of recent contents, the fields an origin
//! write changed, the `reverts` of a drift, and from there the state snapshot, the changelog,
//! the history store, the drift report, the query API and `why` only ever see a digest.
//!
//! A redacted value is a JSON string `"(redacted: N bytes, sha256:…)"`: N is the length of
//! the value's JSON text and the digest is the first 8 bytes of its SHA-256. Equal values
//! give equal digests, so a drift can still say that a Secret's value was `restored`; the
//! value itself cannot be read back from it (a digest of a low-entropy value can be guessed
//! by trying values: the audit policy in `deploy/` keeps Secrets at `Metadata` level, so that
//! no Secret body reaches the service at all).

use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Field names whose values are secret in any kind (a scalar under one of these keys is
/// redacted wherever it appears).
pub const DEFAULT_KEYS: &[&str] =
    &["password", "token", "apiKey", "clientSecret", "privateKey", "secretKey", "accessKey"];

/// The fields of whole kinds that are secret by default: kind key to dotted paths.
pub const DEFAULT_FIELDS: &[(&str, &[&str])] = &[("Secret", &["data", "stringData"])];

/// Which fields are sensitive: paths by kind, and key names in any kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Sensitive {
    /// Kind key (`Kind.group`, `Kind` for the core group) to field paths, split at dots.
    fields: Vec<(String, Vec<Vec<String>>)>,
    /// Key names whose scalar values are redacted in every kind.
    keys: Vec<String>,
    /// Of the keys: which bytes one ends with, and the longest's length (kept as keys are
    /// added, for [`Sensitive::names_a_key`]).
    key_ends: [bool; 256],
    longest_key: usize,
}

/// The end of a JSON key, `":`, searched for in every content text.
static KEY_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\":"));

impl Default for Sensitive {
    fn default() -> Self {
        let mut s = Sensitive::none();
        for (kind, paths) in DEFAULT_FIELDS {
            for p in *paths {
                s.add_field(kind, p);
            }
        }
        for k in DEFAULT_KEYS {
            s.add_key(k);
        }
        s
    }
}

impl Sensitive {
    /// Nothing is sensitive (only for tests and measurements).
    pub fn none() -> Self {
        Sensitive { fields: Vec::new(), keys: Vec::new(), key_ends: [false; 256], longest_key: 0 }
    }

    /// Marks `path` (dotted: `data`, `spec.credentials.password`) of `kind_key` sensitive: every
    /// value at or below it.
    pub fn add_field(&mut self, kind_key: &str, path: &str) {
        let path: Vec<String> = path.split('.').map(str::to_string).collect();
        match self.fields.iter_mut().find(|(k, _)| k == kind_key) {
            Some((_, paths)) if !paths.contains(&path) => paths.push(path),
            Some(_) => {}
            None => self.fields.push((kind_key.to_string(), vec![path])),
        }
    }

    /// Marks every scalar under the key `name`, in any kind, sensitive.
    pub fn add_key(&mut self, name: &str) {
        if !self.keys.iter().any(|k| k == name) {
            self.keys.push(name.to_string());
            // (An empty key ends at its opening quote.)
            self.key_ends[*name.as_bytes().last().unwrap_or(&b'"') as usize] = true;
            self.longest_key = self.longest_key.max(name.len());
        }
    }

    /// Whether `text` holds `"key":` for a sensitive key: one pass over its colons, each
    /// checked against the keys (a text without any needs no parsing).
    fn names_a_key(&self, text: &[u8]) -> bool {
        let longest = self.longest_key;
        if longest == 0 {
            return false;
        }
        // The last byte of every key, and their lengths: most keys of a text end otherwise or
        // are longer, and are passed over without looking for their opening quote.
        let last = &self.key_ends;
        KEY_END.find_iter(text).any(|end| {
            if end == 0 || !last[text[end - 1] as usize] {
                return false;
            }
            // The key's opening quote, at most `longest` bytes back.
            let from = end.saturating_sub(longest + 1);
            text[from..end].iter().rposition(|&b| b == b'"').is_some_and(|q| {
                let key = &text[from + q + 1..end];
                self.keys.iter().any(|k| k.as_bytes() == key)
            })
        })
    }

    fn paths(&self, kind_key: &str) -> &[Vec<String>] {
        self.fields.iter().find(|(k, _)| k == kind_key).map_or(&[], |(_, p)| p.as_slice())
    }

    /// `content` (a JSON object text: `{"spec":...}` or a spec-less kind's top-level fields)
    /// with every sensitive value replaced by its digest. Texts that hold none are returned as
    /// they are, without being parsed.
    pub fn redact(&self, kind_key: &str, content: Arc<str>) -> Arc<str> {
        let paths = self.paths(kind_key);
        if paths.is_empty() && !self.names_a_key(content.as_bytes()) {
            return content;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&content) else {
            // Not JSON: nothing of it can be told apart, so nothing of it is kept.
            return Arc::from(format!("{{\"content\":{}}}", digest(&content)));
        };
        for p in paths {
            redact_at(&mut v, p);
        }
        if !self.keys.is_empty() {
            redact_keys(&mut v, &self.keys);
        }
        Arc::from(v.to_string())
    }
}

/// The digest that stands for a value's JSON text.
pub fn digest(text: &str) -> Value {
    let d = Sha256::digest(text.as_bytes());
    let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
    Value::String(format!("(redacted: {} bytes, sha256:{hex})", text.len()))
}

/// Whether a value is already a digest (so a text redacted twice stays the same).
fn is_digest(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with("(redacted: ") && s.ends_with(')'))
}

/// Replaces every scalar at or below `path` with its digest.
fn redact_at(v: &mut Value, path: &[String]) {
    match path {
        [] => redact_all(v),
        [first, rest @ ..] => match v {
            Value::Object(m) => {
                if let Some(child) = m.get_mut(first.as_str()) {
                    redact_at(child, rest);
                }
            }
            // A list on the way: the path goes on in each of its items.
            Value::Array(a) => a.iter_mut().for_each(|item| redact_at(item, path)),
            _ => {}
        },
    }
}

fn redact_all(v: &mut Value) {
    match v {
        Value::Object(m) => m.values_mut().for_each(redact_all),
        Value::Array(a) => a.iter_mut().for_each(redact_all),
        other if is_digest(other) => {}
        other => *other = digest(&other.to_string()),
    }
}

fn redact_keys(v: &mut Value, keys: &[String]) {
    match v {
        Value::Object(m) => redact_members(m, keys),
        Value::Array(a) => a.iter_mut().for_each(|item| redact_keys(item, keys)),
        _ => {}
    }
}

fn redact_members(m: &mut Map<String, Value>, keys: &[String]) {
    for (k, child) in m.iter_mut() {
        if keys.iter().any(|s| s == k) {
            redact_all(child);
        } else {
            redact_keys(child, keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(kind: &str, text: &str) -> String {
        Sensitive::default().redact(kind, Arc::from(text)).to_string()
    }

    #[test]
    fn only_a_key_named_in_full_makes_a_text_parsed() {
        let s = Sensitive::default();
        assert!(s.names_a_key(br#"{"spec":{"password":"x"}}"#));
        assert!(s.names_a_key(br#"{"a":{"b":1},"apiKey":2}"#));
        assert!(!s.names_a_key(br#"{"spec":{"mypassword":"x","image":"a:1","tokens":1}}"#));
        assert!(!s.names_a_key(br#"{"spec":{"note":"password:"}}"#));
        assert!(!s.names_a_key(b"password\":"), "no opening quote");
        assert!(!Sensitive::none().names_a_key(br#"{"password":"x"}"#));
    }

    #[test]
    fn a_secrets_data_and_string_data_are_digests() {
        let got: Value = serde_json::from_str(&redact(
            "Secret",
            r#"{"data":{"password":"aHVudGVyMg==","user":"YWxpY2U="},"stringData":{"k":"v"},"type":"Opaque"}"#,
        ))
        .unwrap();
        let text = got.to_string();
        assert!(!text.contains("aHVudGVyMg") && !text.contains("YWxpY2U") && !text.contains("\"v\""), "{text}");
        assert_eq!(got["type"], "Opaque", "fields outside data are kept");
        assert_eq!(got["data"]["password"], digest("\"aHVudGVyMg==\""));
        assert!(got["data"]["password"].as_str().unwrap().starts_with("(redacted: 14 bytes, sha256:"));
        // Equal values, equal digests: `restored` still works; different values differ.
        assert_eq!(digest("\"a\""), digest("\"a\""));
        assert_ne!(digest("\"a\""), digest("\"b\""));
    }

    #[test]
    fn passwords_and_tokens_are_digests_in_any_kind() {
        let got = redact(
            "Widget.example.com",
            r#"{"spec":{"db":{"password":"s3cr3t","host":"db"},"auth":[{"token":"abc"}],"tokenTTL":5}}"#,
        );
        assert!(!got.contains("s3cr3t") && !got.contains("abc"), "{got}");
        assert!(got.contains("\"host\":\"db\"") && got.contains("\"tokenTTL\":5"), "{got}");
    }

    #[test]
    fn texts_without_sensitive_fields_are_kept_as_they_are() {
        let text = r#"{"spec":{"replicas":2,"z":1,"a":{"secretName":"tls","path":"token"}}}"#;
        let s = Sensitive::default();
        let kept = s.redact("Deployment.apps", Arc::from(text));
        assert_eq!(&*kept, text, "not parsed, not reordered");
        assert_eq!(
            &*Sensitive::none().redact("Secret", Arc::from(r#"{"data":{"k":"dg=="}}"#)),
            r#"{"data":{"k":"dg=="}}"#
        );
    }

    #[test]
    fn pipeline_paths_redact_what_they_name_and_below() {
        let mut s = Sensitive::none();
        s.add_field("Cluster.example.com", "spec.credentials");
        s.add_field("Cluster.example.com", "spec.nodes.sshKey");
        let got = s.redact(
            "Cluster.example.com",
            Arc::from(
                r#"{"spec":{"credentials":{"a":"1","b":[2]},"nodes":[{"sshKey":"k1","n":1},{"sshKey":"k2"}],"c":"x"}}"#,
            ),
        );
        assert!(!got.contains("\"1\"") && !got.contains("k1") && !got.contains("k2") && !got.contains("[2]"), "{got}");
        assert!(got.contains("\"c\":\"x\"") && got.contains("\"n\":1"), "{got}");
        // Redacting a redacted text changes nothing.
        assert_eq!(s.redact("Cluster.example.com", got.clone()), got);
        // Not JSON: not kept.
        assert!(!Sensitive::default().redact("Secret", Arc::from("{\"data\": cut")).contains("cut"));
    }
}
