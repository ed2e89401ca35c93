//! A structural scan of JSON bytes: where values start and end, without decoding them, without
//! recursion (a counter, whatever the depth) and without requiring UTF-8.
//!
//! It splits an EventList or a JSON array into its items when the document as a whole cannot
//! be parsed (one item with a number out of range, invalid UTF-8, over the size limit), so that
//! each bad item is reported on its own and the good ones beside it are still read.
//!
//! Nothing here validates JSON: each item is parsed by serde afterwards, which says what is
//! wrong with it. The scan only has to find the items' boundaries, and it finds them for any
//! input whose brackets and strings are balanced.

/// Index just past the closing quote of a string whose content starts at `i`; `None` when the
/// input ends first.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let j = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[j] == b'"' {
            return Some(j + 1);
        }
        i = j + 2;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Why the scan stopped before the end of a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Broken {
    /// The input ends in the middle of a value.
    Truncated,
    /// Something that cannot stand there, at this byte offset.
    Syntax(usize),
}

enum Skip {
    /// The value ends before this index.
    Done(usize),
    Broken(Broken),
}

/// Skips one value starting at `i` (no whitespace before it).
fn skip_value(b: &[u8], i: usize) -> Skip {
    match b.get(i) {
        None => Skip::Broken(Broken::Truncated),
        Some(b'"') => match string_end(b, i + 1) {
            Some(e) => Skip::Done(e),
            None => Skip::Broken(Broken::Truncated),
        },
        Some(b'{' | b'[') => {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                match b[j] {
                    b'"' => match string_end(b, j + 1) {
                        Some(e) => {
                            j = e;
                            continue;
                        }
                        None => return Skip::Broken(Broken::Truncated),
                    },
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Skip::Done(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Skip::Broken(Broken::Truncated)
        }
        Some(b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
            let end = b[i..]
                .iter()
                .position(|&c| matches!(c, b',' | b']' | b'}') || c.is_ascii_whitespace())
                .map_or(b.len(), |p| i + p);
            Skip::Done(end)
        }
        Some(_) => Skip::Broken(Broken::Syntax(i)),
    }
}

/// The items of an array, as far as they could be found.
#[derive(Debug, Default)]
pub(super) struct Items<'a> {
    pub items: Vec<&'a [u8]>,
    /// Where the scan stopped early; `Some((index, why))`: item `index` (possibly one past the
    /// last found) is where the framing broke, nothing after it was read.
    pub broken: Option<(usize, Broken)>,
    /// Index just past the closing `]` (when not broken).
    pub end: usize,
}

/// Splits the array that starts at `b[i] == b'['`.
pub(super) fn split_array(b: &[u8], i: usize) -> Items<'_> {
    debug_assert_eq!(b.get(i), Some(&b'['));
    let mut out = Items::default();
    let mut i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        out.end = i + 1;
        return out;
    }
    loop {
        i = skip_ws(b, i);
        let end = match skip_value(b, i) {
            Skip::Done(end) => {
                out.items.push(&b[i..end]);
                end
            }
            Skip::Broken(why) => {
                out.broken = Some((out.items.len(), why));
                return out;
            }
        };
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b']') => {
                out.end = i + 1;
                return out;
            }
            None => {
                out.broken = Some((out.items.len(), Broken::Truncated));
                return out;
            }
            Some(_) => {
                out.broken = Some((out.items.len(), Broken::Syntax(i)));
                return out;
            }
        }
    }
}

/// What the top level of an object holds that tells an EventList: `kind`, `apiVersion` and
/// the items of `items`, found without parsing anything else.
#[derive(Debug, Default)]
pub(super) struct ListParts<'a> {
    /// The raw values (a JSON string when well formed).
    pub kind: Option<&'a [u8]>,
    pub api_version: Option<&'a [u8]>,
    pub items: Option<Items<'a>>,
    /// Where the object's own framing broke, outside `items` (the items found still stand).
    pub broken: Option<Broken>,
}

/// Scans the object that starts at `b[0] == b'{'`.
pub(super) fn split_object(b: &[u8]) -> ListParts<'_> {
    debug_assert_eq!(b.first(), Some(&b'{'));
    let mut parts = ListParts::default();
    let mut i = 1;
    let mut first = true;
    let broken = loop {
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b'}') if first => {
                i += 1;
                break None;
            }
            Some(b'"') => {}
            None => break Some(Broken::Truncated),
            Some(_) => break Some(Broken::Syntax(i)),
        }
        first = false;
        let Some(key_end) = string_end(b, i + 1) else { break Some(Broken::Truncated) };
        let key = &b[i + 1..key_end - 1];
        i = skip_ws(b, key_end);
        match b.get(i) {
            Some(b':') => i = skip_ws(b, i + 1),
            None => break Some(Broken::Truncated),
            Some(_) => break Some(Broken::Syntax(i)),
        }
        if key == b"items" && b.get(i) == Some(&b'[') {
            let items = split_array(b, i);
            let (end, stop) = (items.end, items.broken.is_some());
            parts.items = Some(items);
            if stop {
                // Reported with the items: the body ends, or breaks, inside them.
                return parts;
            }
            i = end;
        } else {
            match skip_value(b, i) {
                Skip::Done(end) => {
                    match key {
                        b"kind" => parts.kind = Some(&b[i..end]),
                        b"apiVersion" => parts.api_version = Some(&b[i..end]),
                        _ => {}
                    }
                    i = end;
                }
                Skip::Broken(why) => break Some(why),
            }
        }
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {
                i += 1;
                break None;
            }
            None => break Some(Broken::Truncated),
            Some(_) => break Some(Broken::Syntax(i)),
        }
    };
    parts.broken = broken.or_else(|| {
        let rest = skip_ws(b, i);
        (rest < b.len()).then_some(Broken::Syntax(rest))
    });
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(items: &Items<'a>) -> Vec<&'a str> {
        items.items.iter().map(|s| std::str::from_utf8(s).unwrap()).collect()
    }

    #[test]
    fn an_array_is_split_into_its_items_whatever_they_hold() {
        let b = b"[ {\"a\":\"x]\\\"}\"} , 1e400 ,\"\xff\", [[1]] , true]";
        let items = split_array(b, 0);
        assert_eq!(texts_lossy(&items), vec!["{\"a\":\"x]\\\"}\"}", "1e400", "\"\u{fffd}\"", "[[1]]", "true"]);
        assert_eq!(items.broken, None);
        assert_eq!(items.end, b.len());
        assert!(split_array(b"[]", 0).items.is_empty());
    }

    fn texts_lossy(items: &Items<'_>) -> Vec<String> {
        items.items.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
    }

    #[test]
    fn a_cut_or_broken_array_keeps_the_items_before_the_break() {
        let items = split_array(br#"[{"a":1},{"b":[2,3"#, 0);
        assert_eq!(texts(&items), vec![r#"{"a":1}"#]);
        assert_eq!(items.broken, Some((1, Broken::Truncated)));
        let items = split_array(br#"[{"a":1} {"b":2}]"#, 0);
        assert_eq!(texts(&items), vec![r#"{"a":1}"#]);
        assert_eq!(items.broken, Some((1, Broken::Syntax(9))));
        let items = split_array(br#"[{"a":1},"#, 0);
        assert_eq!(items.broken, Some((1, Broken::Truncated)));
    }

    #[test]
    fn an_object_gives_kind_api_version_and_items() {
        let p = split_object(br#"{"kind":"EventList","metadata":{"x":[1,{"y":"}"}]},"apiVersion":"audit.k8s.io/v1","items":[{"a":1},{"b":2}]}"#);
        assert_eq!(p.kind, Some(&br#""EventList""#[..]));
        assert_eq!(p.api_version, Some(&br#""audit.k8s.io/v1""#[..]));
        assert_eq!(texts(p.items.as_ref().unwrap()), vec![r#"{"a":1}"#, r#"{"b":2}"#]);
        assert_eq!(p.broken, None);

        let p = split_object(br#"{"kind":"Event","auditID":"x"}"#);
        assert!(p.items.is_none() && p.broken.is_none());
        assert_eq!(split_object(br#"{"kind":"Event"} x"#).broken, Some(Broken::Syntax(17)));
        assert_eq!(split_object(br#"{"kind" "Event"}"#).broken, Some(Broken::Syntax(8)));
        assert_eq!(split_object(br#"{"kind":"Eve"#).broken, Some(Broken::Truncated));
        assert_eq!(split_object(b"{}").broken, None);
        let p = split_object(br#"{"items":[{"a":1},{"#);
        assert_eq!(p.items.unwrap().broken, Some((1, Broken::Truncated)));
    }
}
