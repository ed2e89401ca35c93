//! Equality-based label selectors (`app=web,tier!=cache,!canary`), as a pipeline's scope and
//! the model's options (which parents' policies apply, which parents are known) write them.

/// One requirement of an equality-based label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` (or `key==value`).
    Equals(String, String),
    /// `key!=value`: true also when the label is absent, as in Kubernetes.
    NotEquals(String, String),
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    NotExists(String),
}

/// An equality-based label selector (`app=web,tier!=cache,!canary`); all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parses a comma-separated selector; set-based forms (`in`, `notin`) are not supported.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(key(k)?, value(v)?)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(key(k)?, value(v)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(key(k)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("{part:?}: only equality-based requirements (k=v, k!=v, k, !k) are supported"));
            } else {
                Requirement::Exists(key(part)?)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector has no requirement (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether labels, looked up by key with `labels`, meet every requirement.
    pub fn matches<'a>(&self, labels: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => labels(k) != Some(v.as_str()),
            Requirement::Exists(k) => labels(k).is_some(),
            Requirement::NotExists(k) => labels(k).is_none(),
        })
    }
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    let valid = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(k.to_string())
    } else {
        Err(format!("{k:?} is not a label key"))
    }
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    if v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        Ok(v.to_string())
    } else {
        Err(format!("{v:?} is not a label value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_forms() {
        let s = LabelSelector::parse("app=web, tier!=cache,canary,!debug,env==prod").unwrap();
        assert_eq!(s.0.len(), 5);
        let labels = [("app", "web"), ("canary", ""), ("env", "prod")];
        let get = |k: &str| labels.iter().find(|(lk, _)| *lk == k).map(|(_, v)| *v);
        assert!(s.matches(get));
        assert!(LabelSelector::parse("app in (a,b)").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }
}
