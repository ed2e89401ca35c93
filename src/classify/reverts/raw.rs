//! The fields a write changed, found on the two content texts without parsing what they share:
//! the parts whose texts are the same are skipped, and only the values that differ are parsed
//! and compared as [`diff_values`] compares them. A write changes a field or two of a content of
//! a kilobyte or more, so most of both texts is never turned into values.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{diff_walk, merge_changes, side_by_side};
use crate::decode::CowStr;
use crate::state::FieldChange;

/// What [`diff_values`](super::diff_values) gives for the two texts parsed; `None` when either
/// is not JSON.
pub(super) fn diff_texts(before: &str, after: &str) -> Option<Vec<FieldChange>> {
    // Each text is read whole at its first level (or parsed whole, a leaf), so a text that is
    // not JSON is found there.
    let mut out = Vec::new();
    diff_raw(before, after, &mut String::new(), &mut out).ok()?;
    Some(merge_changes(out))
}

/// Not JSON after all (a value the skip accepted that a parse refuses).
struct NotJson;

/// A value's text as far as the walk needs it: a non-empty object or array, split one level
/// down, or anything else (a leaf, as [`is_leaf`](super::is_leaf) says).
enum Shape<'a> {
    Object(BTreeMap<Cow<'a, str>, &'a RawValue>),
    Array(Vec<&'a RawValue>),
    Other,
}

fn shape(text: &str) -> Result<Shape<'_>, NotJson> {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => {
            let m = serde_json::from_str::<RawMap>(text).map_err(|_| NotJson)?.0;
            Ok(if m.is_empty() { Shape::Other } else { Shape::Object(m) })
        }
        Some(b'[') => {
            let a: Vec<&RawValue> = serde_json::from_str(text).map_err(|_| NotJson)?;
            Ok(if a.is_empty() { Shape::Other } else { Shape::Array(a) })
        }
        _ => Ok(Shape::Other),
    }
}

fn parse(v: Option<&str>) -> Result<Option<Value>, NotJson> {
    v.map(|v| serde_json::from_str(v).map_err(|_| NotJson)).transpose()
}

/// [`diff_walk`] of the two values these texts hold.
fn diff_raw(before: &str, after: &str, path: &mut String, out: &mut Vec<FieldChange>) -> Result<(), NotJson> {
    if before == after {
        // The same text is the same value: nothing changed below.
        return Ok(());
    }
    let len = path.len();
    match (shape(before)?, shape(after)?) {
        (Shape::Object(b), Shape::Object(a)) => {
            // Both sorted by key, as a parsed object is: walked side by side, as `diff_walk` does.
            for (key, bv, av) in side_by_side(b.iter(), a.iter()) {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                diff_either(bv.map(|v| v.get()), av.map(|v| v.get()), path, out)?;
                path.truncate(len);
            }
        }
        (Shape::Array(b), Shape::Array(a)) => {
            use std::fmt::Write as _;
            for i in 0..b.len().max(a.len()) {
                let _ = write!(path, "[{i}]");
                diff_either(b.get(i).map(|v| v.get()), a.get(i).map(|v| v.get()), path, out)?;
                path.truncate(len);
            }
        }
        // Leaves, or different shapes: compared as parsed values.
        _ => diff_walk(parse(Some(before))?.as_ref(), parse(Some(after))?.as_ref(), path, out),
    }
    Ok(())
}

fn diff_either(
    before: Option<&str>,
    after: Option<&str>,
    path: &mut String,
    out: &mut Vec<FieldChange>,
) -> Result<(), NotJson> {
    match (before, after) {
        (Some(b), Some(a)) => diff_raw(b, a, path, out),
        _ => {
            diff_walk(parse(before)?.as_ref(), parse(after)?.as_ref(), path, out);
            Ok(())
        }
    }
}

/// An object's members, their values as text; a key given twice keeps its last value, as a
/// parsed object does.
struct RawMap<'a>(BTreeMap<Cow<'a, str>, &'a RawValue>);

impl<'de> Deserialize<'de> for RawMap<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMap<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut m = BTreeMap::new();
                while let Some(CowStr(k)) = map.next_key::<CowStr<'de>>()? {
                    m.insert(k, map.next_value::<&'de RawValue>()?);
                }
                Ok(RawMap(m))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
                Err(serde::de::Error::custom("an array where an object was read"))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::reverts::diff_values;
    use proptest::prelude::*;

    fn both(before: &str, after: &str) -> (Option<Vec<FieldChange>>, Option<Vec<FieldChange>>) {
        let parsed = match (serde_json::from_str::<Value>(before), serde_json::from_str::<Value>(after)) {
            (Ok(b), Ok(a)) => Some(diff_values(&b, &a)),
            _ => None,
        };
        (diff_texts(before, after), parsed)
    }

    #[test]
    fn the_texts_give_what_the_parsed_values_give() {
        for (before, after) in [
            (r#"{"spec":{"replicas":2,"template":{"a":1}}}"#, r#"{"spec":{"replicas":3,"template":{"a":1}}}"#),
            // Key order, spaces and escapes that do not change a value change no field.
            (r#"{"b":1,"a":"x"}"#, r#"{ "a" : "\u0078", "b" : 1 }"#),
            // A key given twice: its last value counts.
            (r#"{"a":1,"a":2}"#, r#"{"a":2}"#),
            (r#"{"a":1,"a":2}"#, r#"{"a":1}"#),
            // Shapes that change: object to leaf, array to object, empty containers.
            (r#"{"a":{"b":1}}"#, r#"{"a":5}"#),
            (r#"{"a":[1,2]}"#, r#"{"a":{"0":1}}"#),
            (r#"{"a":[]}"#, r#"{"a":[1]}"#),
            (r#"{"a":{}}"#, r#"{"a":{"b":{}}}"#),
            // One path, two spellings: a key with a dot before, nesting after.
            (r#"{"a.b":1}"#, r#"{"a":{"b":2}}"#),
            (r#"{"c":[{"image":"a"},{"image":"b"}]}"#, r#"{"c":[{"image":"a"}]}"#),
            // Numbers as parsed values compare them.
            (r#"{"n":1.0}"#, r#"{"n":1.00}"#),
            (r#"{"n":1}"#, r#"{"n":1.0}"#),
            // Not JSON.
            (r#"{"a":1"#, r#"{"a":1}"#),
            (r#"{"a":1}"#, "nope"),
            (r#"{"a":1} x"#, r#"{"a":1}"#),
            (r#"{"a":1}"#, r#"{"a":1}}"#),
            (r#"[1,2]"#, r#"[1,2"#),
            ("3", "4"),
        ] {
            let (texts, parsed) = both(before, after);
            assert_eq!(texts, parsed, "{before} -> {after}");
        }
    }

    #[test]
    fn a_scale_names_replicas_only() {
        let before = r#"{"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"c","image":"a:1"}]}}}}"#;
        let after = r#"{"spec":{"replicas":5,"template":{"spec":{"containers":[{"name":"c","image":"a:1"}]}}}}"#;
        let changes = diff_texts(before, after).expect("JSON");
        assert_eq!(changes.len(), 1);
        assert_eq!(&*changes[0].path, "spec.replicas");
        assert_eq!((changes[0].before.as_deref(), changes[0].after.as_deref()), (Some("2"), Some("5")));
    }

    /// JSON texts of contents' shapes (those the parsed diff is tested on), written compactly
    /// or with spaces.
    fn content() -> impl Strategy<Value = String> {
        (crate::classify::reverts::tests::content(), any::<bool>()).prop_map(|(v, pretty)| {
            if pretty {
                serde_json::to_string_pretty(&v).expect("JSON")
            } else {
                v.to_string()
            }
        })
    }

    proptest! {
        #[test]
        fn texts_and_parsed_values_give_the_same_changes(before in content(), after in content()) {
            let (texts, parsed) = both(&before, &after);
            prop_assert_eq!(texts, parsed);
        }
    }
}
