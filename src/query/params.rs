//! The parameters of a request's query string, each route with its closed set of names: an
//! unknown or repeated name, a time that does not parse, a limit out of range is a 400 that
//! says what was wrong.

use std::collections::BTreeMap;

use super::ApiError;
use crate::decode::time::parse_rfc3339_given;

/// Most items a page may hold (`limit`).
pub const MAX_LIMIT: usize = 1000;
/// Items in a page without `limit`.
pub const DEFAULT_LIMIT: usize = 100;

/// The parameters of one request.
#[derive(Debug, Default)]
pub(super) struct Params(BTreeMap<String, String>);

impl Params {
    /// Parses `query` (`a=1&b=x%20y`), refusing names outside `allowed` and repeated names.
    pub(super) fn parse(query: Option<&str>, allowed: &[&str]) -> Result<Params, ApiError> {
        let mut map = BTreeMap::new();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if !allowed.contains(&&*k) {
                return Err(ApiError::BadRequest(format!(
                    "unknown parameter {k:?}; this route takes {}",
                    allowed.join(", ")
                )));
            }
            if map.insert(k.to_string(), v.to_string()).is_some() {
                return Err(ApiError::BadRequest(format!("parameter {k:?} is given twice")));
            }
        }
        Ok(Params(map))
    }

    /// The value of `name`; an empty value counts as absent.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// The value of `name`, including an empty one (a cluster-scoped object's namespace).
    pub(super) fn get_raw(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub(super) fn required(&self, name: &str, what: &str) -> Result<&str, ApiError> {
        self.get(name).ok_or_else(|| ApiError::BadRequest(format!("{name} is required: {what}")))
    }

    /// An RFC 3339 time, as µs since the epoch; a date or UTC offset that does not exist
    /// (`+25:00`) is refused, not read as another time.
    pub(super) fn time(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(t) => parse_rfc3339_given(t).map(Some).map_err(|e| ApiError::BadRequest(format!("{name}={t:?} {e}"))),
        }
    }

    /// `limit`: 1 to [`MAX_LIMIT`], [`DEFAULT_LIMIT`] when absent.
    pub(super) fn limit(&self) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(DEFAULT_LIMIT),
            Some(l) => l.parse::<usize>().ok().filter(|n| (1..=MAX_LIMIT).contains(n)).ok_or_else(|| {
                ApiError::BadRequest(format!("limit={l:?} must be a whole number from 1 to {MAX_LIMIT}"))
            }),
        }
    }

    /// `true` or `false`.
    pub(super) fn flag(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(v) => Err(ApiError::BadRequest(format!("{name}={v:?} must be true or false"))),
        }
    }

    /// One of `options`.
    pub(super) fn one_of<'a>(&'a self, name: &str, options: &[&str]) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            Some(v) if !options.contains(&v) => {
                Err(ApiError::BadRequest(format!("{name}={v:?} must be one of {}", options.join(", "))))
            }
            v => Ok(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(r: Result<impl std::fmt::Debug, ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parameters_are_decoded_checked_and_typed() {
        let p = Params::parse(
            Some("user=system%3Aserviceaccount%3Ax&since=2024-05-01T10%3A00%3A00Z&namespace=&limit=5&flag=true"),
            &["user", "since", "namespace", "limit", "flag"],
        )
        .unwrap();
        assert_eq!(p.get("user"), Some("system:serviceaccount:x"));
        assert_eq!((p.get("namespace"), p.get_raw("namespace")), (None, Some("")));
        assert_eq!(p.time("since").unwrap(), Some(1_714_557_600_000_000));
        assert_eq!((p.limit().unwrap(), p.flag("flag").unwrap()), (5, Some(true)));
        assert_eq!(Params::parse(None, &[]).unwrap().limit().unwrap(), DEFAULT_LIMIT);
        assert!(
            bad(Params::parse(Some("usr=x"), &["user"])).contains("unknown parameter \"usr\"; this route takes user")
        );
        assert!(bad(Params::parse(Some("user=a&user=b"), &["user"])).contains("given twice"));
        let p = Params::parse(
            Some("since=yesterday&limit=0&l2=1001&flag=yes&class=weird"),
            &["since", "limit", "l2", "flag", "class"],
        )
        .unwrap();
        assert!(bad(p.time("since")).contains("not an RFC 3339 time"));
        assert!(bad(p.limit()).contains("from 1 to 1000"));
        assert!(bad(p.flag("flag")).contains("true or false"));
        assert!(bad(p.one_of("class", &["drift", "origin"])).contains("must be one of drift, origin"));
        assert!(bad(p.required("user", "who would write")).contains("user is required"));
    }
}
