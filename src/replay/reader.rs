//! Reading a recorded audit log without holding it in memory: line by line, each line bounded;
//! a pretty-printed document (one event or EventList spread over lines) is read whole.

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

pub struct Reader<R> {
    inner: R,
    max_line: usize,
    max_document: usize,
    line_no: usize,
    /// Bytes consumed so far (for progress).
    pub consumed: u64,
    first: bool,
}

impl<R: BufRead> Reader<R> {
    pub fn new(inner: R, max_line: usize, max_document: usize) -> Self {
        Reader { inner, max_line, max_document, line_no: 0, consumed: 0, first: true }
    }

    /// The next record, or `None` at the end of input. A line's bytes are left in `line`,
    /// which is reused from call to call.
    pub fn next_record(&mut self, line: &mut Vec<u8>) -> io::Result<Option<Record>> {
        loop {
            let Some(too_long) = self.read_line(line)? else { return Ok(None) };
            if let Some(len) = too_long {
                self.first = false;
                return Ok(Some(Record::TooLong(self.line_no, len)));
            }
            let trimmed = trim(line);
            if trimmed.is_empty() {
                continue;
            }
            if std::mem::take(&mut self.first) && starts_incomplete_document(trimmed) {
                return self.read_document(std::mem::take(line)).map(Some);
            }
            return Ok(Some(Record::Line(self.line_no)));
        }
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

    fn read_document(&mut self, first_line: Vec<u8>) -> io::Result<Record> {
        let mut doc = first_line;
        doc.push(b'\n');
        let mut rest = Vec::new();
        let limit = self.max_document.saturating_sub(doc.len()) as u64 + 1;
        let n = io::Read::read_to_end(&mut io::Read::take(&mut self.inner, limit), &mut rest)?;
        self.consumed += n as u64;
        doc.extend_from_slice(&rest);
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
    (line[0] == b'{' || line[0] == b'[') && matches!(serde_json::from_slice::<serde::de::IgnoredAny>(line), Err(e) if e.is_eof())
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
        assert_eq!(all(b"{\"a\":1}\r\n\n{\"b\":22222222222222}\n{\"c\":3}", 12), vec!["1:{\"a\":1}", "3:too long 20", "4:{\"c\":3}"]);
    }

    #[test]
    fn pretty_printed_document_is_read_whole() {
        assert_eq!(all(b"{\n \"a\": 1\n}\n", 100), vec!["doc:12"]);
    }
}
