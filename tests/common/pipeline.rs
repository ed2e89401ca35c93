//! Pipeline files for the `serve` tests: a webhook source and the metrics listener on
//! 127.0.0.1:0 (plain HTTP), and the sections each test adds, so that a test shows only what
//! its pipeline has of its own.
// Each test crate builds the pipelines it needs: some methods go unused in each.
#![allow(dead_code)]

use std::fmt::Write;
use std::path::Path;

/// A pipeline file being written; [`Pipeline::toml`] gives its text.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pipeline {
    top: String,
    options: String,
    webhook: String,
    sinks: String,
    rest: String,
}

impl Pipeline {
    /// A webhook on 127.0.0.1:0 (plain HTTP) and the metrics listener on 127.0.0.1:0.
    pub(crate) fn webhook() -> Pipeline {
        Pipeline::default()
    }

    /// `cluster = "name"`.
    pub(crate) fn cluster(mut self, name: &str) -> Pipeline {
        let _ = writeln!(self.top, "cluster = \"{name}\"");
        self
    }

    /// Lines of `[options]` (`reorder_window = "50ms"`, ...).
    pub(crate) fn options(mut self, lines: &str) -> Pipeline {
        self.options.push_str(lines.trim());
        self.options.push('\n');
        self
    }

    /// More lines of the webhook source (`bearer_token_file = "..."`, ...).
    pub(crate) fn webhook_with(mut self, lines: &str) -> Pipeline {
        self.webhook.push_str(lines.trim());
        self.webhook.push('\n');
        self
    }

    /// A `jsonl` sink writing to `path`.
    pub(crate) fn jsonl(self, path: impl AsRef<Path>) -> Pipeline {
        let path = format!("path = \"{}\"", path.as_ref().display());
        self.sink("jsonl", &path)
    }

    /// A sink of type `kind`, with `lines`.
    pub(crate) fn sink(mut self, kind: &str, lines: &str) -> Pipeline {
        let _ = writeln!(self.sinks, "[[sinks]]\ntype = \"{kind}\"");
        if !lines.trim().is_empty() {
            self.sinks.push_str(lines.trim());
            self.sinks.push('\n');
        }
        self
    }

    /// The query API on 127.0.0.1:0, with `lines` (`history = "..."`, ...).
    pub(crate) fn query(self, lines: &str) -> Pipeline {
        self.section("query", &format!("listen = \"127.0.0.1:0\"\n{}", lines.trim()))
    }

    /// A table `[name]` with `lines` (`[state]`, ...), after the metrics listener's.
    pub(crate) fn section(mut self, name: &str, lines: &str) -> Pipeline {
        let _ = writeln!(self.rest, "[{name}]\n{}", lines.trim());
        self
    }

    /// The pipeline file's text.
    pub(crate) fn toml(&self) -> String {
        let mut out = self.top.clone();
        if !self.options.is_empty() {
            let _ = write!(out, "[options]\n{}", self.options);
        }
        let _ = write!(
            out,
            "[[sources]]\ntype = \"webhook\"\nlisten = \"127.0.0.1:0\"\nplain_http = true\n{}",
            self.webhook
        );
        out.push_str(&self.sinks);
        out.push_str("[metrics]\nlisten = \"127.0.0.1:0\"\n");
        out.push_str(&self.rest);
        out
    }
}

#[test]
fn a_pipeline_file_has_each_section_once_in_order() {
    let toml = Pipeline::webhook()
        .cluster("c")
        .options("reorder_window = \"0\"")
        .jsonl("/tmp/o.jsonl")
        .query("history = \"/tmp/h.db\"")
        .toml();
    assert_eq!(
        toml,
        "cluster = \"c\"\n[options]\nreorder_window = \"0\"\n[[sources]]\ntype = \"webhook\"\nlisten = \"127.0.0.1:0\"\nplain_http = true\n\
         [[sinks]]\ntype = \"jsonl\"\npath = \"/tmp/o.jsonl\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n[query]\nlisten = \"127.0.0.1:0\"\nhistory = \"/tmp/h.db\"\n"
    );
}
