//! Reading a recorded audit log without holding it in memory: line by line, each line bounded;
//! a pretty-printed document (one event or EventList spread over lines) is read whole.
//!
//! Which of the two a file is, is decided by a bounded look at its start: a first line that
//! opens a value it does not close is a document only if none of the next lines is a whole
//! event on its own. A log whose first line was cut by rotation (and happens to start with
//! `{`) is read line by line, its first line counted as one bad record.

use std::collections::VecDeque;
use std::io::{self, BufRead};

/// One record of input.
pub enum Record {
    /// A line (without its newline) and its 1-based number; the bytes are in the buffer passed
    /// to [`Reader::next_record`].
    Line(usize),
    /// A line longer than the limit, skipped; its number and length.
    TooLong(usize, usize),
    /// The whole input, which is one multi-line JSON document.
    Document(Vec<u8>),
}

/// How far the look at a file's start goes to tell a document from JSON lines: this many
/// lines after the first, or this many bytes, whichever comes first.
const LOOK_LINES: usize = 16;
const LOOK_BYTES: usize = 4 << 20;

/// Reads audit events out of a file of any of the shapes `replay` takes, record by record.
pub struct Reader<R> {
    inner: R,
    max_line: usize,
    max_document: usize,
    line_no: usize,
    /// Bytes consumed so far (for progress).
    pub consumed: u64,
    first: bool,
    /// Lines read by the look at the start, served before reading on: (number, bytes or
    /// length when too long).
    looked: VecDeque<(usize, Result<Vec<u8>, usize>)>,
}

impl<R: BufRead> Reader<R> {
    /// Reads `inner`; lines over `max_line` bytes and documents over `max_document` are refused.
    pub fn new(inner: R, max_line: usize, max_document: usize) -> Self {
        Reader { inner, max_line, max_document, line_no: 0, consumed: 0, first: true, looked: VecDeque::new() }
    }

    /// The next record, or `None` at the end of input. A line's bytes are left in `line`,
    /// which is reused from call to call.
    pub fn next_record(&mut self, line: &mut Vec<u8>) -> io::Result<Option<Record>> {
        loop {
            let (line_no, too_long) = match self.looked.pop_front() {
                Some((n, Ok(bytes))) => {
                    *line = bytes;
                    (n, None)
                }
                Some((n, Err(len))) => (n, Some(len)),
                None => {
                    let Some(too_long) = self.read_line(line)? else { return Ok(None) };
                    (self.line_no, too_long)
                }
            };
            if let Some(len) = too_long {
                self.first = false;
                return Ok(Some(Record::TooLong(line_no, len)));
            }
            let trimmed = trim(line);
            if trimmed.is_empty() {
                continue;
            }
            if std::mem::take(&mut self.first) && starts_incomplete_document(trimmed) && !self.lines_follow()? {
                return self.read_document(std::mem::take(line)).map(Some);
            }
            return Ok(Some(Record::Line(line_no)));
        }
    }

    /// After a first line that opens a value it does not close: true when one of the next
    /// lines is a whole JSON object on its own (JSON lines whose first line is cut), false
    /// for a document spread over lines (a pretty printer never closes an object it opened
    /// on the same line, unless it is empty). The lines looked at are kept to be served.
    fn lines_follow(&mut self) -> io::Result<bool> {
        let mut bytes = 0;
        let mut line = Vec::new();
        while self.looked.len() < LOOK_LINES && bytes < LOOK_BYTES {
            let Some(too_long) = self.read_line(&mut line)? else { break };
            bytes += line.len();
            let whole = too_long.is_none() && {
                let t = trim(&line);
                t.starts_with(b"{\"") && serde_json::from_slice::<serde::de::IgnoredAny>(t).is_ok()
            };
            let record = match too_long {
                None => Ok(std::mem::take(&mut line)),
                Some(len) => Err(len),
            };
            self.looked.push_back((self.line_no, record));
            if whole {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Reads one line into `line`, up to `max_line` bytes; past that, skips to the newline and
    /// says how long it was.
    fn read_line(&mut self, line: &mut Vec<u8>) -> io::Result<Option<Option<usize>>> {
        line.clear();
        let mut total = 0usize;
        let mut any = false;
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            any = true;
            let (chunk, done) = match memchr(buf) {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            total += chunk.len();
            if total <= self.max_line {
                line.extend_from_slice(chunk);
            } else if !line.is_empty() {
                line.clear();
            }
            let used = done.unwrap_or(buf.len());
            self.inner.consume(used);
            self.consumed += used as u64;
            if done.is_some() {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.line_no += 1;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(Some((total > self.max_line).then_some(total)))
    }

    /// The document that starts with `first_line` (and the lines looked at after it), read
    /// whole up to `max_document` bytes; read into one buffer, so it costs its size once.
    fn read_document(&mut self, first_line: Vec<u8>) -> io::Result<Record> {
        let mut doc = first_line;
        doc.push(b'\n');
        for (_, l) in self.looked.drain(..) {
            if let Ok(l) = l {
                doc.extend_from_slice(&l);
            }
            doc.push(b'\n');
        }
        let limit = self.max_document.saturating_sub(doc.len()) as u64 + 1;
        let n = io::Read::read_to_end(&mut io::Read::take(&mut self.inner, limit), &mut doc)?;
        self.consumed += n as u64;
        if doc.len() > self.max_document {
            // Drain the rest so the byte count is honest, then report it as one oversized record.
            let drained = io::copy(&mut self.inner, &mut io::sink())?;
            self.consumed += drained;
            return Ok(Record::TooLong(1, doc.len() + drained as usize));
        }
        Ok(Record::Document(doc))
    }
}

fn memchr(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}

fn trim(b: &[u8]) -> &[u8] {
    let b = b.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(b);
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end]
}

/// True when the first line opens a JSON value that does not end on that line.
fn starts_incomplete_document(line: &[u8]) -> bool {
    (line[0] == b'{' || line[0] == b'[')
        && matches!(serde_json::from_slice::<serde::de::IgnoredAny>(line), Err(e) if e.is_eof())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], max_line: usize) -> Vec<String> {
        let mut r = Reader::new(io::BufReader::with_capacity(8, input), max_line, 1 << 20);
        let mut v = Vec::new();
        let mut l = Vec::new();
        while let Some(rec) = r.next_record(&mut l).unwrap() {
            v.push(match rec {
                Record::Line(n) => format!("{n}:{}", String::from_utf8_lossy(&l)),
                Record::TooLong(n, len) => format!("{n}:too long {len}"),
                Record::Document(d) => format!("doc:{}", d.len()),
            });
        }
        assert_eq!(r.consumed, input.len() as u64);
        v
    }

    #[test]
    fn lines_blank_lines_crlf_and_long_lines() {
        assert_eq!(
            all(b"{\"a\":1}\r\n\n{\"b\":22222222222222}\n{\"c\":3}", 12),
            vec!["1:{\"a\":1}", "3:too long 20", "4:{\"c\":3}"]
        );
    }

    #[test]
    fn pretty_printed_document_is_read_whole() {
        assert_eq!(all(b"{\n \"a\": 1\n}\n", 100), vec!["doc:12"]);
        let list =
            b"{\n  \"kind\": \"EventList\",\n  \"items\": [\n    {\n      \"auditID\": \"a\"\n    },\n    {}\n  ]\n}\n";
        assert_eq!(all(list, 100), vec![format!("doc:{}", list.len())]);
    }

    #[test]
    fn json_lines_whose_first_line_is_cut_are_read_line_by_line() {
        // Rotation cut the first event; what is left of it happens to start with `{`.
        let input = b"{\"username\":\"x\",\"groups\":[\"a\"\n{\"auditID\":\"1\"}\n\n{\"auditID\":\"2\"}\n";
        assert_eq!(
            all(input, 100),
            vec!["1:{\"username\":\"x\",\"groups\":[\"a\"", "2:{\"auditID\":\"1\"}", "4:{\"auditID\":\"2\"}"]
        );
        // The lines looked at may be too long or bad themselves: each is still its own record.
        let input = b"[{\"a\":\n{\"b\":22222222222222}\nnot json\n{\"c\":3}\n{\"d\":4}";
        assert_eq!(all(input, 12), vec!["1:[{\"a\":", "2:too long 20", "3:not json", "4:{\"c\":3}", "5:{\"d\":4}"]);
    }

    #[test]
    fn the_look_at_the_start_is_bounded() {
        // A cut first line followed by more lines than the look takes, none a whole event:
        // read as one (broken) document, of bounded size.
        let mut input = b"{\"a\":[\n".to_vec();
        for _ in 0..LOOK_LINES + 5 {
            input.extend_from_slice(b"  1,\n");
        }
        input.extend_from_slice(b"{\"late\":1}\n");
        let mut r = Reader::new(io::BufReader::with_capacity(8, &input[..]), 100, 1 << 20);
        let mut l = Vec::new();
        assert!(matches!(r.next_record(&mut l).unwrap(), Some(Record::Document(d)) if d.len() == input.len()));
        assert_eq!(r.looked.len(), 0);
        let mut r = Reader::new(io::BufReader::with_capacity(8, &input[..]), 100, 64);
        assert!(matches!(r.next_record(&mut l).unwrap(), Some(Record::TooLong(1, n)) if n == input.len()));
    }
}
